//! What a sink author needs from the binary alone: the WIT a component
//! builds against, written where the author's tools can read it.

pub mod wit;

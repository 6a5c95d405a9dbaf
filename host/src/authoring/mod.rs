//! What a sink author needs from the binary alone: the WIT a component
//! builds against, a project to start from (`sink new`), the toolchain of
//! its language driven with pinned versions (`sink build`), and the edit
//! loop (`sink dev`).

pub mod build;
pub mod project;
pub mod template;
pub mod tools;
pub mod watch;
pub mod wit;

/// Every file of `sdk/templates/` and `sdk/src/`, embedded by `build.rs`.
mod files {
    include!(concat!(env!("OUT_DIR"), "/authoring_files.rs"));
}

//! The soak's seeded generator: every random choice of a run follows from
//! its seed, so a failing run can be repeated. One generator serves the
//! soak and the fuzz targets' seeded inputs.

pub use ankusa_fuzz_targets::mutate::Rng;

//! Bodies of the cargo-fuzz targets, kept in the library so that `tests/fuzz_regressions.rs` replays
//! every committed seed and regression input through exactly the same code on stable Rust in CI.
//! Each function must never panic on any input except when an invariant it checks is broken.

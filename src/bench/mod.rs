//! Benchmarks (`tritium bench ...`): speed is measured here, never asserted in tests.

pub mod generate;
pub mod kernels;
pub mod synth;
pub mod timing;

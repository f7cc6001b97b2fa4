//! Benchmarks (`tritium bench ...`): speed is measured here, never asserted in tests.

pub mod kernels;
pub mod timing;

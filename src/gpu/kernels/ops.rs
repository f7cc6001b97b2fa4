//! Kernel family: norms, RoPE, attention, activations, sampling.

use super::{Kernel, KernelSource};

pub const FILES: &[(&str, &str)] = &[];

pub fn source(_kernel: Kernel) -> Option<KernelSource> {
    None
}

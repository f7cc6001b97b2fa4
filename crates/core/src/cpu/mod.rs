//! The CPU reference twin of the GPU ops: written from the definitions, used as the oracle for
//! every GPU kernel check and as the way to run where no GPU exists.

pub mod bitlinear;
pub mod ops;

//! The kernel source: fixed-width helpers, the packed weight formats' decoders, reductions, the
//! products, the other ops and attention (`native-gds/kernels/*.cu*`), compiled as one NVRTC
//! program.

/// The whole source, in include order.
pub const SOURCE: &str = concat!(
    include_str!("../kernels/common.cuh"),
    "\n",
    include_str!("../kernels/quant.cuh"),
    "\n",
    include_str!("../kernels/reduce.cuh"),
    "\n",
    include_str!("../kernels/products.cu"),
    "\n",
    include_str!("../kernels/ops.cu"),
    "\n",
    include_str!("../kernels/attention.cu"),
);

/// Most tokens the few-token products (`gemv_*`, `gemv_q8_*`, `bitlinear_*`) take at once.
pub const GEMV_MAX_TOKENS: usize = 8;
/// Most candidates `topk_segments` / `topk_merge` select per row.
pub const TOPK_MAX: usize = 64;
/// Values per `topk_segments` block.
pub const TOPK_SEG: usize = 4096;
/// Most candidates `topk_merge` takes per row (`segments * k`).
pub const TOPK_MERGE_MAX: usize = 256 * 16;
/// Largest head dimension `attention_part_*` takes.
pub const MAX_HEAD_DIM: usize = 256;

/// The suffix of a packed format's kernels (`gemv_<suffix>`), by GGML type name.
pub fn format_suffix(ggml_name: &str) -> Option<&'static str> {
    Some(match ggml_name {
        "F32" => "f32",
        "F16" => "f16",
        "BF16" => "bf16",
        "Q4_0" => "q4_0",
        "Q4_1" => "q4_1",
        "Q5_0" => "q5_0",
        "Q5_1" => "q5_1",
        "Q8_0" => "q8_0",
        "Q4_K" => "q4_k",
        "Q5_K" => "q5_k",
        "Q6_K" => "q6_k",
        "TQ1_0" => "tq1_0",
        "TQ2_0" => "tq2_0",
        "I2_S" => "i2_s",
        "IQ4_NL" => "iq4_nl",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    /// The kernels compile with NVRTC for the architectures of the GPUs we run on, where NVRTC
    /// is installed (`scripts/setup.sh` installs it for the test suite; without it the test says
    /// so and fails under CI=true, where it must run).
    #[test]
    fn kernels_compile_with_nvrtc() {
        if let Err(e) = crate::load_nvrtc() {
            if std::env::var_os("CI").is_some() {
                panic!("NVRTC is needed for this test under CI: {e}");
            }
            eprintln!("skipped: {e}");
            return;
        }
        for arch in ["sm_80", "sm_90"] {
            let cubin =
                crate::compile_cubin(super::SOURCE, arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
            assert!(cubin.len() > 1000, "{arch}: a {}-byte CUBIN", cubin.len());
        }
    }
}

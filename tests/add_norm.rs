//! Llama's norms folded into their neighbours (crates/engine/src/backend/gpu/add_norm.rs): in a one-token
//! pass, the attention output's product adds into the residual and writes the FFN norm's
//! record (`MatvecQ8AddNorm`), the gate and up products read that record, and the gated
//! product applies the norm's factor (`SiluMulQuantizeQ8Norm`); `ffn_down`'s product writes
//! the next layer's attention norm record, q, k and v read it, and the decode attention
//! applies the factor (`attention_norm.wgsl`). Neither norm has a dispatch of its own (but
//! the first layer's attention norm, after the embedding, and the head's).
//!
//! On a two-layer Llama-3.2-1B-shaped Q4_K/Q6_K model (`tritium synth llama-1b-q4k --layers
//! 2`) on lavapipe, the attention cut into 4 pieces (a CPU adapter attends in one, which keeps
//! the combine in a dispatch of its own and so the attention norm's), the decode tape holds the
//! fused steps, and the decode logits equal those of the decode with every norm in its own
//! dispatch within rounding, and are no further from the CPU backend's. The kernels
//! themselves are checked against the CPU by the self-test (`q8/add_norm_*`,
//! `ops/attention`'s decodes from a norm record); the SmolLM2 decode against llama.cpp's
//! greedy tokens is in tests/llama_reference.rs.

mod decode_support;

use decode_support::{decode, gpu_backend, relative_diff, synth_llama};
use tritium::backend::cpu::CpuBackend;
use tritium::backend::gpu::GpuBackend;

fn gpu(fuse: bool) -> GpuBackend {
    let mut b = gpu_backend();
    assert!(
        b.int_dot(),
        "the integer-dot decode path is off on this adapter"
    );
    b.set_fuse_add_norm(fuse);
    b.set_attention_splits(Some(4));
    b
}

#[test]
fn fused_norms_leave_the_decode_tape_and_keep_the_logits() {
    let bytes = synth_llama(2);

    let (fused, m) = decode(&bytes, gpu(true));
    let ops_fused = m.backend.tape_ops(1);
    drop(m);
    let (plain, m) = decode(&bytes, gpu(false));
    let ops_plain = m.backend.tape_ops(1);
    drop(m);
    let (cpu, _) = decode(&bytes, CpuBackend::new(4));

    // Each layer's attention output writes its FFN norm's record, whose gate + up product
    // and factor follow; the first layer's `ffn_down` writes the second's attention norm
    // record, whose q + k and v products follow, and its attention applies the factor; the
    // first attention norm and the head's keep their dispatches.
    let count = |ops: &[String], what: &str| ops.iter().filter(|o| o.contains(what)).count();
    for (what, n) in [
        ("+add+norm record Q4_K 2048x2048", 2),
        ("+add+norm record Q6_K 2048x8192", 1),
        ("matvec_q8 Q4_K 2048x2048 + Q4_K 512x2048 (norm record)", 1),
        ("matvec_q8 Q6_K 512x2048 (norm record)", 1),
        ("rms_norm factor+attention", 1),
        ("matvec_q8 Q4_K 8192x2048 + Q4_K 8192x2048 (norm record)", 2),
        ("rms_norm factor+silu_mul+quantize_q8", 2),
        ("rms_norm+quantize_q8", 2),
    ] {
        assert_eq!(count(&ops_fused, what), n, "{what}: {ops_fused:#?}");
    }
    for (what, n) in [("norm record", 0), ("rms_norm+quantize_q8", 5)] {
        assert_eq!(count(&ops_plain, what), n, "{what}: {ops_plain:#?}");
    }
    assert_eq!(ops_plain.len() - ops_fused.len(), 3);

    // The fused decode computes the same products from the same 8-bit inputs: the records of
    // x * w instead of those of rms_norm(x) (the same int8 values but where a product lands
    // within a rounding of a half step, the scales the norm's factor apart), the factor
    // applied after the products, the sum of squares in another order. Its logits stay within
    // 2e-3 of the range of the unfused decode's: about 1e-7 on lavapipe, and up to 6e-4 where
    // one int8 value rounds the other way (seen with an earlier variant of the fusion), which
    // this model amplifies: its random Q4_K rows carry large common offsets, which 8-bit
    // activations reproduce coarsely (both integer-dot decodes differ from the CPU's f32 decode
    // by a few percent of the range, while the f32 matvecs agree with it to about 4e-7). A
    // wrong record, factor or order moves them by more; the self-test holds each kernel to the
    // CPU (its sabotage runs: a factor off by 1e-4 fails every format). And the fused decode
    // is no further from the CPU's than the unfused one.
    for (step, ((f, p), c)) in fused.iter().zip(&plain).zip(&cpu).enumerate() {
        let (df, dp) = (relative_diff(c, f), relative_diff(c, p));
        let between = relative_diff(p, f);
        println!(
            "step {step}: vs CPU fused {df:.2e}, unfused {dp:.2e}; fused vs unfused {between:.2e}"
        );
        assert!(
            between < 2e-3,
            "step {step}: fused and unfused logits differ by {between}"
        );
        assert!(
            df <= dp + 1e-4,
            "step {step}: fused {df} from the CPU against unfused {dp}"
        );
    }
}

/// With RoPE in dispatches of its own (`set_fold_rope(false)`), the rotation runs on q and k
/// (products of the unscaled norm record) before the attention applies the attention norm's
/// factor: RoPE is linear, so that is right, and the logits are those of the decode with RoPE
/// folded (the same rotation arithmetic, the factor after it in both: the same bits on
/// lavapipe; allowed the 2e-3 of the range above). The tape shows both: the rope dispatches
/// and the attention that applies the factor.
#[test]
fn the_attention_norm_factor_commutes_with_a_separate_rope() {
    let bytes = synth_llama(2);
    let (folded, m) = decode(&bytes, gpu(true));
    drop(m);
    let mut b = gpu(true);
    b.set_fold_rope(false);
    let (apart, m) = decode(&bytes, b);
    let ops = m.backend.tape_ops(1);
    drop(m);
    let count = |what: &str| ops.iter().filter(|o| o.contains(what)).count();
    assert_eq!(count("rms_norm factor+attention"), 1, "{ops:#?}");
    assert_eq!(count("rope 1x"), 4, "{ops:#?}");
    for (step, (f, a)) in folded.iter().zip(&apart).enumerate() {
        let d = relative_diff(f, a);
        println!("step {step}: RoPE folded vs apart {d:.2e}");
        assert!(d < 2e-3, "step {step}: logits differ by {d} of the range");
    }
}

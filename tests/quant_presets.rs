//! Quantization types beyond the ones tritium quantizes, end to end through the CLI on the tiny
//! models of tests/fixtures/arch: matrices rewritten into IQ4_NL and MXFP4 (the CPU runs both,
//! the GPU IQ4_NL), and llama.cpp's own Q3_K_M and IQ4_XS presets of a Qwen3-shaped model
//! against llama.cpp and the float64 pass (tests/goldens/gen_quant_mix_goldens.py). The
//! goldens' format and the shared comparisons: tests/common/goldens.rs and tests/arch_reference.rs.

#[path = "common/goldens.rs"]
mod goldens;

use goldens::*;

use sha2::{Digest, Sha256};
use tritium::quant::GgmlType;

/// Qwen2's fixture with its q, k and v matrices in `dtype` (random blocks with tame scales):
/// quantization types the CPU dequantizes that have no quantizer here.
fn with_matrices_in(dtype: GgmlType) -> Vec<u8> {
    rewritten("tests/fixtures/arch/tiny-qwen2.gguf", &|n, d, s, x| {
        if !(n.ends_with("attn_q.weight")
            || n.ends_with("attn_k.weight")
            || n.ends_with("attn_v.weight"))
        {
            return Some((d, s, x));
        }
        let elems: u64 = s.iter().product();
        let mut bytes = vec![0u8; dtype.tensor_bytes(elems).unwrap() as usize];
        let mut state = 0x9e3779b97f4a7c15u64 ^ elems;
        for b in &mut bytes {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b = (state >> 56) as u8;
        }
        tritium::quant::tame(dtype, &mut bytes);
        if dtype == GgmlType::MXFP4 {
            // Blocks of 17 bytes led by an e8m0 scale, 2^(e - 127): 2^-7 to 2^-4 here.
            for block in bytes.chunks_exact_mut(17) {
                block[0] = 120 + block[0] % 4;
            }
        }
        if dtype == GgmlType::IQ4_NL {
            // Blocks of 18 bytes led by an f16 scale d, its exponent set to 7 or 8 (sign and
            // mantissa kept): |d| in [2^-8, 2^-6), so the weights d * KVALUES[q] stay below 1.8.
            for block in bytes.chunks_exact_mut(18) {
                let bits = u16::from_le_bytes([block[0], block[1]]);
                let bits = (bits & 0x83ff) | ((7 + (bits >> 10) % 2) << 10);
                block[..2].copy_from_slice(&bits.to_le_bytes());
            }
        }
        Some((dtype, s, bytes))
    })
}

/// Files whose matrices are in types the CPU dequantizes (crates/core's gguf-py goldens) that
/// have no quantizer here. IQ4_NL (32-value blocks, so the tiny model's rows of 64 take it)
/// runs on the CPU and on the wgpu backend, which gives the CPU's greedy tokens with `--exact`
/// and runs its int8-activation decode without it. MXFP4 has no GPU kernel yet: the CPU runs
/// it, and the GPU backend refuses it with a message that names the type, never a panic
/// (CUDA's load refuses every type it has no kernel for by name, `format_suffix`; its IQ4_NL
/// products are checked by `tritium selftest --backend cuda`, `backend/check.rs`'s FORMATS).
#[test]
fn new_quantization_types_run_on_the_cpu_and_are_refused_by_name_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let greedy = |model: &str, extra: &[&str]| -> Vec<u64> {
        let mut args = vec![
            "run",
            model,
            "--ids",
            "1,2,3",
            "--max-tokens",
            "6",
            "--temperature",
            "0",
            "--json",
        ];
        args.extend_from_slice(extra);
        let v = run_json(&args);
        let ids: Vec<u64> = v["generated_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        assert_eq!(ids.len(), 6, "{model} {extra:?}");
        ids
    };
    for dtype in [GgmlType::IQ4_NL, GgmlType::MXFP4] {
        let path = dir.path().join(format!("{dtype}.gguf"));
        std::fs::write(&path, with_matrices_in(dtype)).unwrap();
        let model = path.to_str().unwrap();
        let cpu = greedy(model, &["--backend", "cpu", "--exact"]);
        if dtype == GgmlType::IQ4_NL {
            let gpu = greedy(model, &["--backend", "gpu", "--exact"]);
            assert_eq!(gpu, cpu, "{dtype}: the GPU's greedy tokens with --exact");
            // The fast arithmetic too (int8 activations in decode, through the table's codes).
            greedy(model, &["--backend", "gpu"]);
            continue;
        }
        let o = tritium_output(&[
            "run",
            model,
            "--ids",
            "1,2,3",
            "--max-tokens",
            "2",
            "--backend",
            "gpu",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{dtype} on the GPU: {err}");
        assert!(
            !err.contains("panicked") && err.contains(&dtype.to_string()),
            "{dtype}: {err}"
        );
    }
}

/// Qwen3's layout quantized by llama.cpp's own quantizer to its Q3_K_M and IQ4_XS presets
/// (tests/goldens/gen_quant_mix_goldens.py: Q3_K with Q4_K, Q5_K and Q6_K; IQ4_XS with Q6_K),
/// on the CPU (the IQ4_XS one on the wgpu backend too; no GPU kernels for Q3_K yet): the prompt
/// ids, `--exact` within
/// [`F64_TOL`] of the float64 pass over the dequantized weights (argmax equal where its margin
/// is twice that), and llama.cpp's logits within twice its own largest distance from the exact
/// ones in that file (0.45-0.64 here: it quantizes activations to 8 bits for these products,
/// and does the same, 0.36-0.41, for a Q8_0 file of this shape), its argmax and greedy tokens
/// ours wherever its margin is above that bound. The IQ4_XS preset also runs on the wgpu
/// backend: `--exact` within [`F64_TOL`] of the float64 pass, and greedy tokens with `--exact`
/// equal to the CPU's (and greedy decoding in its default arithmetic, int8 activations in
/// decode, llama.cpp's over the confident prefix).
#[test]
fn quantization_presets_match_llama_cpp_and_f64() {
    for name in ["qwen3-q3_k_m", "qwen3-iq4_xs"] {
        let g = golden(name);
        let mut h = Sha256::new();
        h.update(std::fs::read(&g.file).unwrap());
        assert_eq!(hex::encode(h.finalize()), g.sha256, "{}", g.file.display());
        let m = g.file.to_str().unwrap();
        let llama_tol = g
            .cases
            .iter()
            .map(|c| 2.0 * c.llama_vs_f64)
            .fold(LLAMA_TOL, f32::max);
        let mut failures = Vec::new();
        for c in &g.cases {
            let p = &c.prompt;
            let v = run_json(&[
                "run",
                m,
                "-p",
                p,
                "--max-tokens",
                "1",
                "--backend",
                "cpu",
                "--json",
            ]);
            if u32s(&v["prompt_ids"]) != c.prompt_ids {
                failures.push(format!("{name} {p:?}: prompt ids differ from llama.cpp's"));
            }
            let seq: Vec<u32> = c.prompt_ids.iter().chain(&c.greedy_ids).copied().collect();
            let exact = logits(&g.file, &seq, &["--backend", "cpu", "--exact"], g.n_vocab);
            let what = format!("{name} {p:?} cpu --exact vs f64");
            against(
                &g,
                &what,
                &exact,
                &c.f64,
                F64_TOL,
                2.0 * F64_TOL,
                &mut failures,
            );
            let what = format!("{name} {p:?} cpu --exact vs llama.cpp");
            against(
                &g,
                &what,
                &exact,
                &c.llama,
                llama_tol,
                llama_tol,
                &mut failures,
            );
            greedy(&g, c, "cpu", llama_tol, &mut failures);
            if name != "qwen3-iq4_xs" {
                continue;
            }
            let gpu_exact = logits(&g.file, &seq, &["--backend", "gpu", "--exact"], g.n_vocab);
            let what = format!("{name} {p:?} gpu --exact vs f64");
            against(
                &g,
                &what,
                &gpu_exact,
                &c.f64,
                F64_TOL,
                2.0 * F64_TOL,
                &mut failures,
            );
            let (ids, n) = (ids_arg(&c.prompt_ids), c.greedy_ids.len().to_string());
            let tokens = |extra: &[&str]| {
                let mut args = vec![
                    "run",
                    m,
                    "--ids",
                    &ids,
                    "--temperature",
                    "0",
                    "--max-tokens",
                    &n,
                    "--ctx",
                    CTX,
                    "--json",
                ];
                args.extend_from_slice(extra);
                u32s(&run_json(&args)["generated_ids"])
            };
            let cpu = tokens(&["--backend", "cpu", "--exact"]);
            let gpu = tokens(&["--backend", "gpu", "--exact"]);
            if gpu != cpu {
                failures.push(format!(
                    "{name} {p:?}: greedy with --exact on the GPU {gpu:?}, on the CPU {cpu:?}"
                ));
            }
            greedy(&g, c, "gpu", llama_tol, &mut failures);
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

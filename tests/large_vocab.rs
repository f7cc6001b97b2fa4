//! A Llama-3-sized vocabulary (128,256 tokens) at the default prefill batch of 512: one batch
//! of logits is 250 MiB, over lavapipe's (and WebGPU's default) 128 MiB storage binding
//! limit. The GPU backend sizes its logits for the rows a binding can hold and `logits_all`
//! splits its passes to match; before, binding the logits buffer failed wgpu's validation
//! (a panic) in every pass, decode included. The GPU's logits are checked against the CPU
//! backend's on the same synthetic model (`tritium synth llama-1b-q4k --layers 1`).

use std::process::Command;

fn tritium(args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_tritium"))
        .args(args)
        .output()
        .expect("the tritium binary runs");
    assert!(
        o.status.success(),
        "tritium {} failed ({}):\n{}",
        args.join(" "),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

fn logits(model: &str, backend: &str, out: &std::path::Path) -> Vec<f32> {
    let out_s = out.to_str().expect("utf-8 path");
    tritium(&[
        "logits",
        model,
        "--backend",
        backend,
        "--batch",
        "512",
        "--ids",
        "1,2,3,4,5",
        "-o",
        out_s,
    ]);
    std::fs::read(out)
        .expect("logits written")
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn a_128k_vocabulary_at_batch_512_runs_on_the_gpu_and_matches_the_cpu() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = dir.path().join("llama.gguf");
    let model = model.to_str().expect("utf-8 path");
    tritium(&["synth", "llama-1b-q4k", model, "--layers", "1"]);
    let gpu = logits(model, "gpu", &dir.path().join("gpu.f32"));
    let cpu = logits(model, "cpu", &dir.path().join("cpu.f32"));
    const VOCAB: usize = 128_256;
    assert_eq!(gpu.len(), 5 * VOCAB);
    assert_eq!(cpu.len(), gpu.len());
    // Random weights give logits of about +-150 here. The two backends quantize and sum in
    // different orders (the GPU's f32 matmul against the CPU's), measured 0.74 apart at most
    // on lavapipe: allow 2% of the largest logit, and the same argmax wherever the CPU's top
    // two are further apart than that.
    let scale = cpu.iter().fold(0f32, |m, v| m.max(v.abs()));
    let tol = 0.02 * scale;
    for (row, (g, c)) in gpu.chunks(VOCAB).zip(cpu.chunks(VOCAB)).enumerate() {
        let diff = g.iter().zip(c).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff <= tol, "row {row}: {diff} > {tol}");
        let argmax = |v: &[f32]| (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap();
        let (gi, ci) = (argmax(g), argmax(c));
        let mut sorted = c.to_vec();
        sorted.sort_by(|a, b| b.total_cmp(a));
        if sorted[0] - sorted[1] > tol {
            assert_eq!(gi, ci, "row {row}");
        }
    }
}

//! Two one-token integer-dot products of one input (q and k, gate and up) run in one
//! dispatch (`MatvecQ8Pair`): on a Llama-3.2-1B-shaped Q4_K/Q6_K model (`tritium synth
//! llama-1b-q4k --layers 1`) the decode tape holds the paired products, and every decode
//! step's logits are the same bits as with each product in its own dispatch (each row's
//! arithmetic is the single kernel's at the same workgroup size). The kernels themselves are
//! checked against the integer reference by the self-test (`q8/matvec_pair_*`).

use std::process::Command;

use tritium::backend::gpu::GpuBackend;
use tritium::backend::{Logits, Readback};
use tritium::formats::gguf::GgufFile;
use tritium::gpu::ops::KvDtype;
use tritium::gpu::{DeviceOptions, GpuContext};
use tritium::model::{GgufTensors, Model, ModelConfig};

/// Logits of a 3-token prompt's decode continuation (ids 7, 8, 9 one at a time), and the
/// decode tape's ops.
fn decode(bytes: &Vec<u8>, pair: bool) -> (Vec<Vec<f32>>, Vec<String>) {
    let file = GgufFile::read(bytes).expect("gguf");
    let config = ModelConfig::from_gguf(&file).expect("config");
    let ctx = pollster::block_on(GpuContext::new(&DeviceOptions::default())).expect("adapter");
    let mut b = GpuBackend::new(ctx, 4).expect("backend");
    b.set_kv_dtype(Some(KvDtype::F32));
    b.set_pair_q8(pair);
    let tensors = GgufTensors {
        file: &file,
        src: bytes,
    };
    let mut m = Model::load(b, config, &tensors, 16).expect("load");
    pollster::block_on(m.forward(&[1, 2, 3], 0, Readback::Nothing)).expect("prefill");
    let mut out = Vec::new();
    for (i, id) in [7u32, 8, 9].into_iter().enumerate() {
        match pollster::block_on(m.forward(&[id], 3 + i, Readback::All)).expect("decode") {
            Logits::Full(v) => out.push(v),
            other => panic!("read back {other:?}"),
        }
    }
    let ops = m.backend.tape_ops(1);
    (out, ops)
}

#[test]
fn paired_products_give_the_same_logits_in_fewer_dispatches() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("llama.gguf");
    let o = Command::new(env!("CARGO_BIN_EXE_tritium"))
        .args([
            "synth",
            "llama-1b-q4k",
            path.to_str().unwrap(),
            "--layers",
            "1",
        ])
        .output()
        .expect("tritium runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&path).expect("model");
    let (alone, ops_alone) = decode(&bytes, false);
    let (paired, ops_paired) = decode(&bytes, true);
    // q + k (Q4_K 2048 and 512 rows) and gate + up (Q4_K 8192 rows each) pair; v and
    // ffn_down (Q6_K) and the head stay alone.
    let pairs: Vec<&String> = ops_paired.iter().filter(|o| o.contains(" + ")).collect();
    assert_eq!(pairs.len(), 2, "{ops_paired:#?}");
    assert!(
        pairs[0].contains("Q4_K 2048x2048 + Q4_K 512x2048"),
        "{}",
        pairs[0]
    );
    assert!(
        pairs[1].contains("Q4_K 8192x2048 + Q4_K 8192x2048"),
        "{}",
        pairs[1]
    );
    assert_eq!(ops_paired.len() + 2, ops_alone.len(), "{ops_alone:#?}");
    for (step, (a, p)) in alone.iter().zip(&paired).enumerate() {
        assert_eq!(a.len(), p.len());
        if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != p[i].to_bits()) {
            panic!("step {step}: logit {i} is {} alone, {} paired", a[i], p[i]);
        }
    }
}

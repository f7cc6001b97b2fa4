//! Decode tests on a synthetic Llama-3.2-1B-shaped Q4_K/Q6_K model (`tritium synth
//! llama-1b-q4k --layers N`): the model's bytes, and a short decode's logits.

use std::process::Command;

use tritium::backend::gpu::GpuBackend;
use tritium::backend::{Backend, Logits, Readback};
use tritium::formats::gguf::GgufFile;
use tritium::gpu::ops::KvDtype;
use tritium::gpu::{DeviceOptions, GpuContext};
use tritium::model::{GgufTensors, Model, ModelConfig};

/// The synthetic model with `layers` layers, as bytes.
pub fn synth_llama(layers: u32) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("llama.gguf");
    let o = Command::new(env!("CARGO_BIN_EXE_tritium"))
        .args(["synth", "llama-1b-q4k", path.to_str().unwrap(), "--layers"])
        .arg(layers.to_string())
        .output()
        .expect("tritium runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read(&path).expect("model")
}

/// A GPU backend of batches up to 4 with an f32 KV cache (for comparisons).
pub fn gpu_backend() -> GpuBackend {
    let ctx = pollster::block_on(GpuContext::new(&DeviceOptions::default())).expect("adapter");
    let mut b = GpuBackend::new(ctx, 4).expect("backend");
    b.set_kv_dtype(Some(KvDtype::F32));
    b
}

/// Logits of a 3-token prompt's decode continuation (ids 7, 8, 9 one pass each), and the
/// model (its backend holds the decode tape).
pub fn decode<B: Backend>(bytes: &Vec<u8>, backend: B) -> (Vec<Vec<f32>>, Model<B>) {
    let file = GgufFile::read(bytes).expect("gguf");
    let config = ModelConfig::from_gguf(&file).expect("config");
    let tensors = GgufTensors {
        file: &file,
        src: bytes,
    };
    let mut m = Model::load(backend, config, &tensors, 16).expect("load");
    pollster::block_on(m.forward(&[1, 2, 3], 0, Readback::Nothing)).expect("prefill");
    let mut out = Vec::new();
    for (i, id) in [7u32, 8, 9].into_iter().enumerate() {
        match pollster::block_on(m.forward(&[id], 3 + i, Readback::All)).expect("decode") {
            Logits::Full(v) => out.push(v),
            other => panic!("read back {other:?}"),
        }
    }
    (out, m)
}

/// The largest |a - b| over the logit range of `a`.
pub fn relative_diff(a: &[f32], b: &[f32]) -> f32 {
    let (lo, hi) = a
        .iter()
        .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(
            0f32,
            |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
        );
    d / (hi - lo)
}

//! Synthetic models with real shapes and random weights, for speed work: the bytes a forward
//! pass moves do not depend on the values (oracles.md). `tritium synth bitnet-2b4t out.gguf`
//! writes BitNet b1.58 2B4T's exact shapes (I2_S ternary layers, F16 tied embedding);
//! `llama-1b-q4k` a Llama-3.2-1B-shaped model in Q4_K with Q6_K `attn_v`/`ffn_down` and a Q6_K
//! tied embedding (the Q4_K_M pattern, simplified: every layer's `attn_v`/`ffn_down` is Q6_K);
//! `qwen3-0.6b-q4k` Qwen3-0.6B's shapes (heads of 128 over a 1024-wide model, per-head q/k
//! norms, a 151,936-token tied embedding) in the same pattern; `gemma3-1b-q4k` Gemma-3-1B's
//! (1152 wide, 26 blocks, 4 query heads of 256 over one KV head, post-norms, five of six
//! layers over a 512-position window, a 262,144-token tied embedding), where the matrices whose
//! rows are not whole 256-value blocks (those 1152 wide) take Q5_0 and Q8_0 instead, as
//! llama.cpp's quantizer falls back for them.

use std::io::Write;
use std::path::Path;

use half::f16;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cli::Error;
use crate::formats::gguf::{GgufFile, GgufWriter, Value};
use crate::quant::GgmlType;

/// The shape of a synthetic model.
#[derive(Clone, Debug)]
pub struct SynthSpec {
    pub arch: &'static str,
    pub dim: u64,
    pub n_layers: u64,
    pub n_heads: u64,
    pub n_kv_heads: u64,
    pub ffn: u64,
    pub vocab: u64,
    pub ctx: u64,
    pub theta: f32,
    /// The head size where it is not `dim / n_heads` (`attention.key_length`).
    pub head_dim: Option<u64>,
    /// Per-head q/k RMSNorm weights (Qwen3).
    pub qk_norm: bool,
    /// Type of the big matrices, of `attn_v`/`ffn_down`, and of the embedding.
    pub weights: GgmlType,
    pub v_down: GgmlType,
    pub embedding: GgmlType,
    /// Gemma 3's block (post-norms) with its sliding window (`attention.sliding_window`).
    pub gemma_window: Option<u64>,
}

impl SynthSpec {
    /// `t`, or llama.cpp's fallback where rows of `cols` are not whole blocks of it.
    fn fitting(t: GgmlType, cols: u64) -> GgmlType {
        match t.block() {
            Some(b) if cols % b.block_elems != 0 => match t {
                GgmlType::Q6_K => GgmlType::Q8_0,
                _ => GgmlType::Q5_0,
            },
            _ => t,
        }
    }
}

impl SynthSpec {
    /// `bitnet-2b4t`, `llama-1b-q4k`, `qwen3-0.6b-q4k` or `gemma3-1b-q4k`.
    pub fn named(name: &str) -> Option<SynthSpec> {
        match name {
            "bitnet-2b4t" => Some(SynthSpec {
                arch: "bitnet-b1.58",
                dim: 2560,
                n_layers: 30,
                n_heads: 20,
                n_kv_heads: 5,
                ffn: 6912,
                vocab: 128_256,
                ctx: 4096,
                theta: 500_000.0,
                head_dim: None,
                qk_norm: false,
                weights: GgmlType::I2_S,
                v_down: GgmlType::I2_S,
                embedding: GgmlType::F16,
                gemma_window: None,
            }),
            "llama-1b-q4k" => Some(SynthSpec {
                arch: "llama",
                dim: 2048,
                n_layers: 16,
                n_heads: 32,
                n_kv_heads: 8,
                ffn: 8192,
                vocab: 128_256,
                ctx: 8192,
                theta: 500_000.0,
                head_dim: None,
                qk_norm: false,
                weights: GgmlType::Q4_K,
                v_down: GgmlType::Q6_K,
                embedding: GgmlType::Q6_K,
                gemma_window: None,
            }),
            "qwen3-0.6b-q4k" => Some(SynthSpec {
                arch: "qwen3",
                dim: 1024,
                n_layers: 28,
                n_heads: 16,
                n_kv_heads: 8,
                ffn: 3072,
                vocab: 151_936,
                ctx: 40_960,
                theta: 1_000_000.0,
                head_dim: Some(128),
                qk_norm: true,
                weights: GgmlType::Q4_K,
                v_down: GgmlType::Q6_K,
                embedding: GgmlType::Q6_K,
                gemma_window: None,
            }),
            "gemma3-1b-q4k" => Some(SynthSpec {
                arch: "gemma3",
                dim: 1152,
                n_layers: 26,
                n_heads: 4,
                n_kv_heads: 1,
                ffn: 6912,
                vocab: 262_144,
                ctx: 32_768,
                theta: 1_000_000.0,
                head_dim: Some(256),
                qk_norm: true,
                weights: GgmlType::Q4_K,
                v_down: GgmlType::Q6_K,
                embedding: GgmlType::Q6_K,
                gemma_window: Some(512),
            }),
            _ => None,
        }
    }
}

/// Random bytes that decode to sane values of `dtype` (finite scales, valid ternary codes).
fn random_tensor(rng: &mut ChaCha8Rng, dtype: GgmlType, n: u64) -> Result<Vec<u8>, Error> {
    let bytes = dtype
        .tensor_bytes(n)
        .ok_or_else(|| Error::Usage(format!("{n} values of {dtype}")))? as usize;
    let mut data = vec![0u8; bytes];
    rng.fill_bytes(&mut data);
    let h = |v: f32| f16::from_f32(v).to_le_bytes();
    match dtype {
        GgmlType::I2_S => {
            // Codes 0..=2 only (3 is invalid): map each 2-bit field that is 3 to 1 (zero).
            let codes = (n / 4) as usize;
            for b in &mut data[..codes] {
                for shift in [0, 2, 4, 6] {
                    if (*b >> shift) & 3 == 3 {
                        *b &= !(2 << shift);
                    }
                }
            }
            data[codes..codes + 4].copy_from_slice(&0.02f32.to_le_bytes());
            data[codes + 4..].fill(0);
        }
        GgmlType::Q4_K => {
            for block in data.chunks_exact_mut(144) {
                block[0..2].copy_from_slice(&h(0.002));
                block[2..4].copy_from_slice(&h(0.001));
            }
        }
        GgmlType::Q6_K => {
            for block in data.chunks_exact_mut(210) {
                block[208..210].copy_from_slice(&h(0.0005));
            }
        }
        GgmlType::Q5_0 | GgmlType::Q8_0 => {
            let size = if dtype == GgmlType::Q5_0 { 22 } else { 34 };
            for block in data.chunks_exact_mut(size) {
                block[0..2].copy_from_slice(&h(0.002));
            }
        }
        GgmlType::F16 => {
            for v in data.chunks_exact_mut(2) {
                let x = (u16::from_le_bytes([v[0], v[1]]) as f32 / 65535.0 - 0.5) * 0.1;
                v.copy_from_slice(&h(x));
            }
        }
        GgmlType::F32 => {
            for v in data.chunks_exact_mut(4) {
                v.copy_from_slice(&1.0f32.to_le_bytes());
            }
        }
        t => return Err(Error::Usage(format!("synthetic {t} weights"))),
    }
    Ok(data)
}

/// Write the synthetic model `spec` (with `layers` overriding its layer count) to `out`
/// (through `<out>.part`, renamed at the end).
pub fn write(
    spec: &SynthSpec,
    layers: Option<u64>,
    vocab: Option<&GgufFile>,
    out: &Path,
) -> Result<u64, Error> {
    let mut s = spec.clone();
    if let Some(l) = layers {
        s.n_layers = l.max(1);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(0x7217);
    let mut w = GgufWriter::new();
    let a = s.arch;
    let kv = |k: &str| format!("{a}.{k}");
    w.add("general.architecture", Value::String(a.into()))?;
    w.add("general.name", Value::String(format!("synthetic {a}")))?;
    w.add(kv("context_length"), Value::U32(s.ctx as u32))?;
    w.add(kv("embedding_length"), Value::U32(s.dim as u32))?;
    w.add(kv("block_count"), Value::U32(s.n_layers as u32))?;
    w.add(kv("feed_forward_length"), Value::U32(s.ffn as u32))?;
    w.add(kv("attention.head_count"), Value::U32(s.n_heads as u32))?;
    w.add(
        kv("attention.head_count_kv"),
        Value::U32(s.n_kv_heads as u32),
    )?;
    w.add(kv("attention.layer_norm_rms_epsilon"), Value::F32(1e-5))?;
    w.add(kv("rope.freq_base"), Value::F32(s.theta))?;
    w.add(kv("vocab_size"), Value::U32(s.vocab as u32))?;
    match vocab {
        Some(v) => {
            let tokens = v
                .get("tokenizer.ggml.tokens")
                .and_then(|t| t.as_array())
                .map_or(0, |a| a.len() as u64);
            if tokens != s.vocab {
                return Err(Error::Usage(format!(
                    "the vocabulary has {tokens} tokens; {a}'s shapes need {}",
                    s.vocab
                )));
            }
            for (k, val) in v
                .metadata
                .iter()
                .filter(|(k, _)| k.starts_with("tokenizer."))
            {
                w.add(k.clone(), val.clone())?;
            }
        }
        // No vocabulary (the benchmarks run from token ids), marked the way llama.cpp reads
        // it, so llama.cpp's `llama-bench` loads the same file for a side-by-side run.
        None => w.add("tokenizer.ggml.model", Value::String("none".into()))?,
    }
    let head_dim = s.head_dim.unwrap_or(s.dim / s.n_heads);
    if let Some(window) = s.gemma_window {
        w.add(kv("attention.sliding_window"), Value::U32(window as u32))?;
    }
    if let Some(hd) = s.head_dim {
        w.add(kv("attention.key_length"), Value::U32(hd as u32))?;
        w.add(kv("attention.value_length"), Value::U32(hd as u32))?;
    }
    let (q, kvd) = (s.n_heads * head_dim, s.n_kv_heads * head_dim);
    let mut add = |w: &mut GgufWriter, name: String, t: GgmlType, shape: &[u64]| {
        let n = shape.iter().product();
        let t = SynthSpec::fitting(t, shape[shape.len() - 1]);
        let data = random_tensor(&mut rng, t, n)?;
        w.add_tensor(name, t, shape, data).map_err(Error::from)
    };
    add(
        &mut w,
        "token_embd.weight".into(),
        s.embedding,
        &[s.vocab, s.dim],
    )?;
    add(&mut w, "output_norm.weight".into(), GgmlType::F32, &[s.dim])?;
    let bitnet = a.starts_with("bitnet");
    for i in 0..s.n_layers {
        let n = |x: &str| format!("blk.{i}.{x}.weight");
        add(&mut w, n("attn_norm"), GgmlType::F32, &[s.dim])?;
        add(&mut w, n("attn_q"), s.weights, &[q, s.dim])?;
        add(&mut w, n("attn_k"), s.weights, &[kvd, s.dim])?;
        add(&mut w, n("attn_v"), s.v_down, &[kvd, s.dim])?;
        if s.qk_norm {
            add(&mut w, n("attn_q_norm"), GgmlType::F32, &[head_dim])?;
            add(&mut w, n("attn_k_norm"), GgmlType::F32, &[head_dim])?;
        }
        add(&mut w, n("attn_output"), s.weights, &[s.dim, q])?;
        add(&mut w, n("ffn_norm"), GgmlType::F32, &[s.dim])?;
        add(&mut w, n("ffn_gate"), s.weights, &[s.ffn, s.dim])?;
        add(&mut w, n("ffn_up"), s.weights, &[s.ffn, s.dim])?;
        add(&mut w, n("ffn_down"), s.v_down, &[s.dim, s.ffn])?;
        if bitnet {
            add(&mut w, n("attn_sub_norm"), GgmlType::F32, &[q])?;
            add(&mut w, n("ffn_sub_norm"), GgmlType::F32, &[s.ffn])?;
        }
        if s.gemma_window.is_some() {
            add(&mut w, n("post_attention_norm"), GgmlType::F32, &[s.dim])?;
            add(&mut w, n("post_ffw_norm"), GgmlType::F32, &[s.dim])?;
        }
    }
    let io = |e: std::io::Error| Error::Io {
        path: out.display().to_string(),
        message: e.to_string(),
    };
    let part = out.with_extension("part");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&part).map_err(io)?);
    w.write(&mut f)?;
    f.flush().map_err(io)?;
    drop(f);
    std::fs::rename(&part, out).map_err(io)?;
    Ok(std::fs::metadata(out).map_err(io)?.len())
}

//! A model's whole way in, from GGUF bytes to logits: the header, `ModelConfig::from_gguf`,
//! the tokenizer and chat template, `Model::load` on the CPU backend and a forward pass. The
//! input is structured (`arbitrary`): a Llama or BitNet configuration whose hyper-parameters
//! are plausible or, each on its own, any claim at all (a `u64`, a NaN, a missing key), and
//! tensors whose shapes follow that configuration or are replaced by claims of their own, with
//! a data section far smaller than what large claims describe. Nothing may panic, abort or
//! allocate by a claim: run with `-rss_limit_mb` / `-malloc_limit_mb` (fuzz/README notes).
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use tritium_core::formats::gguf::GgufFile;
use tritium_core::quant::GgmlType;
use tritium_engine::backend::cpu::CpuBackend;
use tritium_engine::backend::Readback;
use tritium_engine::model::{GgufTensors, Model, ModelConfig};
use tritium_text::{ChatTemplate, Tokenizer};

/// The data section is at most this long; claims may describe far more.
const MAX_DATA: usize = 1 << 20;

#[derive(Arbitrary, Debug)]
enum Int {
    /// A plausible value, chosen from a short list per key.
    Plausible(u8),
    /// Any value at all.
    Claim(u64),
    /// The key is left out.
    Missing,
    /// The key holds a float of these bits instead of an integer.
    WrongType(u32),
}

#[derive(Arbitrary, Debug)]
enum Float {
    Plausible,
    Claim(f32),
    Missing,
    WrongType(u32),
}

#[derive(Arbitrary, Debug)]
enum Shape {
    /// What the configuration implies.
    Implied,
    /// The implied shape with its dimensions swapped.
    Swapped,
    /// Any dimensions (1 to 4 of them).
    Claim(Vec<u64>),
}

#[derive(Arbitrary, Debug)]
struct TensorInput {
    /// An index into the type list (or, past its end, any GGUF type id).
    dtype: u8,
    shape: Shape,
    /// Leave the tensor out.
    omit: bool,
    /// Place it at this offset instead of after the previous tensor.
    offset: Option<u64>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    bitnet: bool,
    dim: Int,
    layers: Int,
    heads: Int,
    kv_heads: Int,
    ffn: Int,
    context: Int,
    vocab: Int,
    key_length: Int,
    rope_dims: Int,
    eps: Float,
    theta: Float,
    tensors: Vec<TensorInput>,
    data: Vec<u8>,
    ids: Vec<u8>,
}

const DTYPES: [GgmlType; 10] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::I2_S,
    GgmlType::TQ2_0,
    GgmlType::BF16,
];

/// Little-endian GGUF v3 writing, with nothing checked: the point is to say anything.
struct Writer {
    out: Vec<u8>,
    n_kv: u64,
}

impl Writer {
    fn string(&mut self, s: &str) {
        self.out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
    }

    fn int(&mut self, key: &str, v: &Int, plausible: &[u64]) -> Option<u64> {
        let value = match *v {
            Int::Missing => return None,
            Int::Plausible(i) => plausible[i as usize % plausible.len()],
            Int::Claim(v) => v,
            Int::WrongType(bits) => {
                self.string(key);
                self.out.extend_from_slice(&6u32.to_le_bytes());
                self.out.extend_from_slice(&bits.to_le_bytes());
                self.n_kv += 1;
                return None;
            }
        };
        self.string(key);
        match u32::try_from(value) {
            Ok(v) => {
                self.out.extend_from_slice(&4u32.to_le_bytes());
                self.out.extend_from_slice(&v.to_le_bytes());
            }
            Err(_) => {
                self.out.extend_from_slice(&10u32.to_le_bytes());
                self.out.extend_from_slice(&value.to_le_bytes());
            }
        }
        self.n_kv += 1;
        Some(value)
    }

    fn float(&mut self, key: &str, v: &Float, plausible: f32) {
        let (ty, bits) = match *v {
            Float::Missing => return,
            Float::Plausible => (6u32, plausible.to_bits()),
            Float::Claim(x) => (6, x.to_bits()),
            Float::WrongType(bits) => (8, bits), // a string type: its length is garbage
        };
        self.string(key);
        self.out.extend_from_slice(&ty.to_le_bytes());
        self.out.extend_from_slice(&bits.to_le_bytes());
        self.n_kv += 1;
    }
}

fn gguf(input: &Input) -> Vec<u8> {
    let arch = if input.bitnet {
        "bitnet-b1.58"
    } else {
        "llama"
    };
    let mut w = Writer {
        out: Vec::new(),
        n_kv: 0,
    };
    w.string("general.architecture");
    w.out.extend_from_slice(&8u32.to_le_bytes());
    w.string(arch);
    w.n_kv += 1;
    let k = |s: &str| format!("{arch}.{s}");
    let dim = w.int(&k("embedding_length"), &input.dim, &[32, 64, 128, 256]);
    let layers = w.int(&k("block_count"), &input.layers, &[1, 2, 3]);
    let heads = w.int(&k("attention.head_count"), &input.heads, &[1, 2, 4, 8]);
    let kv = w.int(&k("attention.head_count_kv"), &input.kv_heads, &[1, 2, 4]);
    let ffn = w.int(&k("feed_forward_length"), &input.ffn, &[32, 64, 256]);
    w.int(&k("context_length"), &input.context, &[16, 512]);
    let head_dim = w.int(
        &k("attention.key_length"),
        &input.key_length,
        &[8, 16, 32, 64],
    );
    w.int(
        &k("rope.dimension_count"),
        &input.rope_dims,
        &[8, 16, 32, 64],
    );
    w.float(&k("attention.layer_norm_rms_epsilon"), &input.eps, 1e-5);
    w.float(&k("rope.freq_base"), &input.theta, 10_000.0);
    let vocab = match input.vocab {
        Int::Plausible(i) => [32u64, 64, 256][i as usize % 3],
        Int::Claim(v) => v,
        _ => 64,
    };

    // The tensors an architecture needs, shaped as the configuration implies.
    let dim = dim.unwrap_or(64);
    let heads = heads.unwrap_or(4).max(1);
    let head_dim = head_dim.unwrap_or(dim / heads);
    let (q, kv) = (
        heads.saturating_mul(head_dim),
        kv.unwrap_or(heads).saturating_mul(head_dim),
    );
    let ffn = ffn.unwrap_or(64);
    let mut wanted: Vec<(String, Vec<u64>)> = vec![
        ("token_embd.weight".into(), vec![dim, vocab]),
        ("output_norm.weight".into(), vec![dim]),
    ];
    for l in 0..layers.unwrap_or(1).min(4) {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        wanted.extend([
            (n("attn_norm"), vec![dim]),
            (n("attn_q"), vec![dim, q]),
            (n("attn_k"), vec![dim, kv]),
            (n("attn_v"), vec![dim, kv]),
            (n("attn_output"), vec![q, dim]),
            (n("ffn_norm"), vec![dim]),
            (n("ffn_gate"), vec![dim, ffn]),
            (n("ffn_up"), vec![dim, ffn]),
            (n("ffn_down"), vec![ffn, dim]),
        ]);
        if input.bitnet {
            wanted.extend([
                (n("attn_sub_norm"), vec![q]),
                (n("ffn_sub_norm"), vec![ffn]),
            ]);
        }
    }

    let mut infos = Vec::new();
    let mut next = 0u64;
    for (i, (name, implied)) in wanted.iter().enumerate() {
        let t = input.tensors.get(i);
        if t.is_some_and(|t| t.omit) {
            continue;
        }
        let (dtype, dims) = match t {
            None => (GgmlType::F32.id(), implied.clone()),
            Some(t) => {
                let dtype = match DTYPES.get(t.dtype as usize) {
                    Some(d) => d.id(),
                    None => u32::from(t.dtype),
                };
                let dims = match &t.shape {
                    Shape::Implied => implied.clone(),
                    Shape::Swapped => implied.iter().rev().copied().collect(),
                    Shape::Claim(d) => d.iter().take(4).copied().collect(),
                };
                (dtype, dims)
            }
        };
        let bytes = GgmlType::from_id(dtype)
            .and_then(|d| {
                let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
                d.tensor_bytes(n)
            })
            .unwrap_or(0);
        let offset = t.and_then(|t| t.offset).unwrap_or(next);
        next = offset
            .saturating_add(bytes)
            .checked_next_multiple_of(32)
            .unwrap_or(u64::MAX);
        infos.push((name.clone(), dims, dtype, offset));
    }

    let header_kv = std::mem::take(&mut w.out);
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(infos.len() as u64).to_le_bytes());
    out.extend_from_slice(&w.n_kv.to_le_bytes());
    out.extend_from_slice(&header_kv);
    for (name, dims, dtype, offset) in &infos {
        out.extend_from_slice(&(name.len() as u64).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&dtype.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
    }
    out.resize(out.len().next_multiple_of(32), 0);
    // The data section: what the tensors claim, capped; the fuzzer's bytes repeated (so
    // weights are anything, NaN and infinities included).
    let data_len = (next as usize).min(MAX_DATA);
    let fill = if input.data.is_empty() {
        &[0u8][..]
    } else {
        &input.data
    };
    out.extend(fill.iter().copied().cycle().take(data_len));
    out
}

fuzz_target!(|input: Input| {
    let bytes = gguf(&input);
    let Ok(file) = GgufFile::read(&bytes) else {
        return;
    };
    let _ = Tokenizer::from_gguf(&file);
    let _ = ChatTemplate::from_gguf(&file);
    let Ok(config) = ModelConfig::from_gguf(&file) else {
        return;
    };
    let tensors = GgufTensors {
        file: &file,
        src: &bytes,
    };
    let Ok(mut model) = Model::load(CpuBackend::new(2), config, &tensors, 8) else {
        return;
    };
    let n_vocab = model.config.n_vocab as u32;
    let ids: Vec<u32> = input
        .ids
        .iter()
        .take(2)
        .map(|&b| u32::from(b) % n_vocab.max(1))
        .collect();
    if !ids.is_empty() {
        let _ = pollster::block_on(model.forward(&ids, 0, Readback::All));
    }
});

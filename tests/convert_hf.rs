//! `tritium convert <hf-checkpoint> <out> --quantize ...` on Hugging Face checkpoints whose
//! weights are known exactly, so the result can be compared with an existing GGUF of the same
//! weights:
//!
//! - Llama: SmolLM2-135M-Instruct as an F32 checkpoint (two safetensors shards and an index),
//!   written by this test from the Q8_0 GGUF (dequantized; Q and K rows put back into
//!   transformers' order with the inverse of llama.cpp's `LlamaModel.permute`, written here from
//!   its definition). Converting it with `--quantize q8_0` must give back the Q8_0 GGUF's tensors
//!   byte for byte (requantizing Q8_0-dequantized values reproduces them: every block's largest
//!   value maps to ±127 again), so the converter's Q/K permutation, names, types and shapes are
//!   checked exactly, and `logits` are bit-identical. `--quantize q4_k_m --to gguf` must give the
//!   tensors `tritium quantize --type q4_k_m` (byte-identical to llama-quantize, tests/llama_quant.rs)
//!   makes from the same Q8_0 file. `--quantize f16` is compared by logits (tolerance below).
//! - BitNet: the tiny BitNet fixture (tests/goldens/gen_bitnet_tiny.py) as transformers'
//!   offline-quantized checkpoint: packed 2-bit weights (`pack_weights` layout) with an F32
//!   `weight_scale` (`autobitlinear`: the model multiplies by it), written by this test from
//!   tiny-i2s.gguf. `--quantize i2_s` must give back tiny-i2s.gguf's tensors byte for byte (that
//!   file's logits match transformers' within tests/bitnet_reference.rs's tolerance) and the same
//!   logits.
//!
//! The tokenizer.json of each checkpoint is the one `tritium convert` extracts from the GGUF
//! (checked against the GGUF tokenizer in tests/convert_rdrr.rs).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::json;
use tritium::formats::gguf::{GgufFile, Value};
use tritium::formats::rdrr::Manifest;
use tritium::quant::{dequantize, GgmlType};
use tritium::storage::DirFiles;

const SMOLLM2_Q8: &str = "models/SmolLM2-135M-Instruct.Q8_0.gguf";
const TINY_I2S: &str = "tests/fixtures/bitnet/tiny-i2s.gguf";

fn tritium(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tritium"))
        .args(args)
        .output()
        .expect("runs")
}

fn ok(o: Output) -> Output {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// One tensor of a safetensors file being written.
struct StTensor {
    name: String,
    dtype: &'static str,
    shape: Vec<u64>,
    bytes: u64,
}

/// Write a safetensors file, asking `data(i)` for each tensor's bytes in turn (so a 540 MB
/// checkpoint never sits in memory whole). The header is padded with spaces to 8 bytes, as
/// the `safetensors` library writes it.
fn write_safetensors(path: &Path, tensors: &[StTensor], data: &mut dyn FnMut(usize) -> Vec<u8>) {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({ "format": "pt" }));
    let mut offset = 0u64;
    for t in tensors {
        header.insert(
            t.name.clone(),
            json!({ "dtype": t.dtype, "shape": t.shape, "data_offsets": [offset, offset + t.bytes] }),
        );
        offset += t.bytes;
    }
    let mut text = serde_json::to_string(&header).unwrap();
    while text.len() % 8 != 0 {
        text.push(' ');
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    f.write_all(&(text.len() as u64).to_le_bytes()).unwrap();
    f.write_all(text.as_bytes()).unwrap();
    for (i, t) in tensors.iter().enumerate() {
        let bytes = data(i);
        assert_eq!(bytes.len() as u64, t.bytes, "{}", t.name);
        f.write_all(&bytes).unwrap();
    }
    f.flush().unwrap();
}

/// GGUF name -> transformers name (Llama, BitNet, Qwen2, Qwen3, Phi-3; Gemma's norms by
/// [`gemma_hf_name`]).
fn hf_name(gguf: &str) -> String {
    let map = [
        ("attn_norm", "input_layernorm"),
        ("attn_q", "self_attn.q_proj"),
        ("attn_k", "self_attn.k_proj"),
        ("attn_v", "self_attn.v_proj"),
        ("attn_q_norm", "self_attn.q_norm"),
        ("attn_qkv", "self_attn.qkv_proj"),
        ("attn_k_norm", "self_attn.k_norm"),
        ("attn_output", "self_attn.o_proj"),
        ("attn_sub_norm", "self_attn.attn_sub_norm"),
        ("ffn_norm", "post_attention_layernorm"),
        ("ffn_gate", "mlp.gate_proj"),
        ("ffn_up", "mlp.up_proj"),
        ("ffn_down", "mlp.down_proj"),
        ("ffn_sub_norm", "mlp.ffn_sub_norm"),
    ];
    match gguf {
        "token_embd.weight" => "model.embed_tokens.weight".into(),
        "output_norm.weight" => "model.norm.weight".into(),
        "output.weight" => "lm_head.weight".into(),
        _ => {
            let rest = gguf.strip_prefix("blk.").unwrap();
            let (layer, rest) = rest.split_once('.').unwrap();
            let (base, kind) = rest.rsplit_once('.').unwrap();
            let hf = map.iter().find(|(g, _)| *g == base).unwrap().1;
            format!("model.layers.{layer}.{hf}.{kind}")
        }
    }
}

/// Gemma's transformers names: its norm after attention is `post_attention_layernorm`, the
/// FFN's `pre_feedforward_layernorm` and `post_feedforward_layernorm`.
fn gemma_hf_name(gguf: &str) -> String {
    let norms = [
        ("post_attention_norm", "post_attention_layernorm"),
        ("ffn_norm", "pre_feedforward_layernorm"),
        ("post_ffw_norm", "post_feedforward_layernorm"),
    ];
    if let Some(rest) = gguf.strip_prefix("blk.") {
        let (layer, rest) = rest.split_once('.').unwrap();
        if let Some((_, hf)) = norms.iter().find(|(g, _)| rest == format!("{g}.weight")) {
            return format!("model.layers.{layer}.{hf}.weight");
        }
    }
    hf_name(gguf)
}

/// The inverse of llama.cpp's `permute(w, n_head)`: numpy's
/// `w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)`.
fn unpermute(values: &[f32], rows: usize, heads: usize) -> Vec<f32> {
    let cols = values.len() / rows;
    let half = rows / heads / 2;
    let mut out = vec![0f32; values.len()];
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                // GGUF row (h, i, j) came from transformers row (h, j, i).
                let gguf_row = h * 2 * half + 2 * i + j;
                let hf_row = h * 2 * half + j * half + i;
                out[hf_row * cols..(hf_row + 1) * cols]
                    .copy_from_slice(&values[gguf_row * cols..(gguf_row + 1) * cols]);
            }
        }
    }
    out
}

fn gguf_tokenizer_json(gguf: &str, dir: &Path) -> Vec<u8> {
    let rdrr = dir.join("tok-rdrr");
    ok(tritium(&["convert", gguf, p(&rdrr)]));
    std::fs::read(rdrr.join("tokenizer.json")).unwrap()
}

/// Every tensor of `rdrr` (an RDRR folder or a GGUF file) has the name, type, shape and bytes
/// of the same tensor in the GGUF `want`, and the sets of names are equal.
fn assert_same_tensors(got: &Path, want: &str) {
    let want_bytes = std::fs::read(want).unwrap();
    let want_file = GgufFile::read(&want_bytes).unwrap();
    let got_tensors: BTreeMap<String, (GgmlType, Vec<u64>, Vec<u8>)> = if got.is_dir() {
        let files = DirFiles::new(got);
        let m = Manifest::load(&files).unwrap();
        m.tensors
            .iter()
            .map(|(n, t)| {
                let bytes = tritium::formats::rdrr::read_tensor(&m, &files, n).unwrap();
                (n.clone(), (t.ggml_type().unwrap(), t.shape.clone(), bytes))
            })
            .collect()
    } else {
        let bytes = std::fs::read(got).unwrap();
        let f = GgufFile::read(&bytes).unwrap();
        f.tensors
            .iter()
            .map(|t| {
                let data = f.read_tensor(&bytes, &t.name).unwrap();
                (t.name.clone(), (t.dtype, t.shape(), data))
            })
            .collect()
    };
    let names: Vec<&String> = got_tensors.keys().collect();
    let mut want_names: Vec<&String> = want_file.tensors.iter().map(|t| &t.name).collect();
    want_names.sort();
    assert_eq!(names, want_names);
    for t in &want_file.tensors {
        let (dtype, shape, bytes) = &got_tensors[&t.name];
        assert_eq!((*dtype, shape), (t.dtype, &t.shape()), "{}", t.name);
        let data = want_file.read_tensor(&want_bytes, &t.name).unwrap();
        assert!(*bytes == data, "{}: bytes differ", t.name);
    }
}

fn logits(model: &str, ids: &str, out: &Path) -> Vec<f32> {
    ok(tritium(&[
        "logits",
        model,
        "--backend",
        "cpu",
        "--ids",
        ids,
        "-o",
        p(out),
    ]));
    std::fs::read(out)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// SmolLM2 as an F32 transformers checkpoint in two shards, from the Q8_0 GGUF.
fn write_smollm2_checkpoint(dir: &Path) -> PathBuf {
    let ck = dir.join("smollm2-hf");
    std::fs::create_dir(&ck).unwrap();
    let bytes = std::fs::read(SMOLLM2_Q8)
        .unwrap_or_else(|_| panic!("{SMOLLM2_Q8} is missing: run scripts/make-test-models.sh"));
    let file = GgufFile::read(&bytes).unwrap();
    let get = |k: &str| file.get_u64(&format!("llama.{k}")).unwrap();
    let (heads, kv_heads) = (
        get("attention.head_count") as usize,
        get("attention.head_count_kv") as usize,
    );
    let tensors: Vec<StTensor> = file
        .tensors
        .iter()
        .map(|t| StTensor {
            name: hf_name(&t.name),
            dtype: "F32",
            shape: t.shape(),
            bytes: t.n_elements() * 4,
        })
        .collect();
    let half = tensors.len() / 2;
    let mut weight_map = serde_json::Map::new();
    for (k, part) in [(0, &tensors[..half]), (1, &tensors[half..])] {
        let name = format!("model-0000{}-of-00002.safetensors", k + 1);
        for t in part {
            weight_map.insert(t.name.clone(), name.clone().into());
        }
        let first = if k == 0 { 0 } else { half };
        write_safetensors(&ck.join(&name), part, &mut |i| {
            let t = &file.tensors[first + i];
            let data = file.read_tensor(&bytes, &t.name).unwrap();
            let mut v = dequantize(t.dtype, &data, t.n_elements() as usize).unwrap();
            let rows = t.shape()[0] as usize;
            if t.name.ends_with("attn_q.weight") {
                v = unpermute(&v, rows, heads);
            } else if t.name.ends_with("attn_k.weight") {
                v = unpermute(&v, rows, kv_heads);
            }
            v.iter().flat_map(|x| x.to_le_bytes()).collect()
        });
    }
    let index = json!({ "metadata": {}, "weight_map": weight_map });
    std::fs::write(ck.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let config = json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": get("embedding_length"),
        "intermediate_size": get("feed_forward_length"),
        "num_hidden_layers": get("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": 49152,
        "max_position_embeddings": get("context_length"),
        "rope_theta": 100000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": true,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    });
    std::fs::write(ck.join("config.json"), config.to_string()).unwrap();
    let Some(Value::String(template)) = file.get("tokenizer.chat_template") else {
        panic!("no chat template")
    };
    let tc = json!({ "chat_template": template, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>" });
    std::fs::write(ck.join("tokenizer_config.json"), tc.to_string()).unwrap();
    std::fs::write(
        ck.join("tokenizer.json"),
        gguf_tokenizer_json(SMOLLM2_Q8, dir),
    )
    .unwrap();
    ck
}

#[test]
fn smollm2_checkpoint_converts_to_the_q8_0_and_q4_k_m_ggufs_of_the_same_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let ck = write_smollm2_checkpoint(tmp.path());

    // Q8_0 into RDRR: the Q8_0 GGUF's tensors exactly; the same logits, bit for bit.
    let q8 = tmp.path().join("q8");
    ok(tritium(&["convert", p(&ck), p(&q8), "--quantize", "q8_0"]));
    assert_same_tensors(&q8, SMOLLM2_Q8);
    let ids = "1,504,3575,282,4649,314";
    let want = logits(SMOLLM2_Q8, ids, &tmp.path().join("want.f32"));
    let got = logits(p(&q8), ids, &tmp.path().join("got.f32"));
    assert!(got == want, "Q8_0 logits differ");
    // The RDRR folder runs with the checkpoint's own tokenizer.json and chat template.
    let o = ok(tritium(&[
        "run",
        p(&q8),
        "--backend",
        "cpu",
        "--json",
        "--chat",
        "-p",
        "Hi",
        "--max-tokens",
        "2",
        "--temperature",
        "0",
    ]));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["prompt_ids"][0], 1,
        "the template starts with <|im_start|>"
    );

    // Q4_K_M straight to GGUF: what `tritium quantize` makes of the Q8_0 file.
    let q4 = tmp.path().join("q4km.gguf");
    ok(tritium(&[
        "convert",
        p(&ck),
        p(&q4),
        "--quantize",
        "q4_k_m",
    ]));
    let reference = tmp.path().join("reference-q4km.gguf");
    ok(tritium(&[
        "quantize",
        SMOLLM2_Q8,
        p(&reference),
        "--type",
        "q4_k_m",
    ]));
    assert_same_tensors(&q4, p(&reference));

    // F16: f16 rounding of the weights (relative error at most 2^-11) moves the logits a
    // little. Measured: max |difference| 0.025 on logits of magnitude up to ~25; the
    // bound 0.25 leaves a wide margin and still catches a wrong permutation or name (those
    // change logits by whole units).
    let f16 = tmp.path().join("f16");
    ok(tritium(&["convert", p(&ck), p(&f16), "--quantize", "f16"]));
    let got = logits(p(&f16), ids, &tmp.path().join("f16.f32"));
    let max = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!("f16 vs Q8_0: max abs logit difference {max}");
    assert!(max < 0.25, "f16 logits differ by {max}");
}

#[test]
fn bitnet_packed_checkpoint_converts_to_the_i2s_fixture() {
    let tmp = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(TINY_I2S).unwrap();
    let file = GgufFile::read(&bytes).unwrap();
    let ck = tmp.path().join("bitnet-hf");
    std::fs::create_dir(&ck).unwrap();
    // Tensors as transformers' BitNet checkpoint stores them.
    let mut tensors = Vec::new();
    let mut payload: Vec<Vec<u8>> = Vec::new();
    for t in &file.tensors {
        let data = file.read_tensor(&bytes, &t.name).unwrap();
        let name = hf_name(&t.name);
        let shape = t.shape();
        match t.dtype {
            GgmlType::I2_S => {
                let (rows, cols) = (shape[0] as usize, shape[1] as usize);
                let n = rows * cols;
                let scale = f32::from_le_bytes(data[n / 4..n / 4 + 4].try_into().unwrap());
                let values = dequantize(GgmlType::I2_S, &data, n).unwrap();
                // transformers' pack_weights: packed row r, bits 2k, holds row k * rows/4 + r.
                let quarter = rows / 4;
                let mut packed = vec![0u8; quarter * cols];
                for (i, v) in values.iter().enumerate() {
                    let (row, col) = (i / cols, i % cols);
                    let code = (v / scale).round() as i8 + 1;
                    assert!((0..=2).contains(&code));
                    packed[(row % quarter) * cols + col] |= (code as u8) << (2 * (row / quarter));
                }
                tensors.push(StTensor {
                    name: name.clone(),
                    dtype: "U8",
                    shape: vec![quarter as u64, cols as u64],
                    bytes: packed.len() as u64,
                });
                payload.push(packed);
                tensors.push(StTensor {
                    name: name.replace(".weight", ".weight_scale"),
                    dtype: "F32",
                    shape: vec![1],
                    bytes: 4,
                });
                payload.push(scale.to_le_bytes().to_vec());
            }
            GgmlType::F16 | GgmlType::F32 => {
                let dtype = if t.dtype == GgmlType::F16 {
                    "F16"
                } else {
                    "F32"
                };
                tensors.push(StTensor {
                    name,
                    dtype,
                    shape,
                    bytes: data.len() as u64,
                });
                payload.push(data);
            }
            other => panic!("unexpected {other}"),
        }
    }
    write_safetensors(&ck.join("model.safetensors"), &tensors, &mut |i| {
        payload[i].clone()
    });
    let config = json!({
        "architectures": ["BitNetForCausalLM"],
        "model_type": "bitnet",
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
        "max_position_embeddings": 512, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": true, "hidden_act": "relu2",
        "bos_token_id": 509, "eos_token_id": 510,
        "quantization_config": {
            "quant_method": "bitnet", "linear_class": "autobitlinear", "quantization_mode": "offline"
        },
    });
    std::fs::write(ck.join("config.json"), config.to_string()).unwrap();
    std::fs::write(
        ck.join("tokenizer.json"),
        gguf_tokenizer_json(TINY_I2S, tmp.path()),
    )
    .unwrap();

    let out = tmp.path().join("i2s");
    ok(tritium(&[
        "convert",
        p(&ck),
        p(&out),
        "--quantize",
        "i2_s",
        "--shard-size",
        "32KB",
    ]));
    assert_same_tensors(&out, TINY_I2S);
    let ids = "509,70,423,281,486,93,300,421";
    let want = logits(TINY_I2S, ids, &tmp.path().join("want.f32"));
    let got = logits(p(&out), ids, &tmp.path().join("got.f32"));
    assert!(got == want, "logits differ");

    // Other types are refused for BitNet, and i2_s for Llama, with clear errors.
    let o = tritium(&[
        "convert",
        p(&ck),
        p(&tmp.path().join("x")),
        "--quantize",
        "q8_0",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("i2_s"));
    assert!(!tmp.path().join("x").exists());
}

/// A tiny fixture of tests/fixtures/arch (F16 matrices, F32 norms and biases; its logits
/// checked against llama.cpp's by tests/arch_reference.rs) as an F32 transformers checkpoint:
/// transformers' names, Q/K rows in transformers' order (NeoX RoPE: nothing to undo), q/k/v
/// biases (Qwen2), per-head q/k norms (Qwen3), Phi-3's stacked `qkv_proj` and `gate_up_proj`
/// and its RoPE factors in the config (longrope, 32 times the original context of 64, the
/// fixture's attention factor).
fn write_arch_checkpoint(dir: &Path, arch: &str) -> (PathBuf, String) {
    let gguf = format!("tests/fixtures/arch/tiny-{arch}.gguf");
    let ck = dir.join(format!("{arch}-hf"));
    std::fs::create_dir(&ck).unwrap();
    let bytes = std::fs::read(&gguf).unwrap();
    let file = GgufFile::read(&bytes).unwrap();
    let get = |k: &str| file.get_u64(&format!("{arch}.{k}")).unwrap();
    let values = |name: &str| {
        let t = file.tensor(name).unwrap();
        let data = file.read_tensor(&bytes, name).unwrap();
        dequantize(t.dtype, &data, t.n_elements() as usize).unwrap()
    };
    let kept: Vec<_> = file
        .tensors
        .iter()
        .filter(|t| !t.name.starts_with("rope_factors"))
        .collect();
    let gemma = arch.starts_with("gemma");
    let tensors: Vec<StTensor> = kept
        .iter()
        .map(|t| StTensor {
            name: match (arch, t.name.ends_with("ffn_up.weight")) {
                ("phi3", true) => hf_name(&t.name).replace("mlp.up_proj", "mlp.gate_up_proj"),
                _ if gemma => gemma_hf_name(&t.name),
                _ => hf_name(&t.name),
            },
            dtype: "F32",
            shape: t.shape(),
            bytes: t.n_elements() * 4,
        })
        .collect();
    write_safetensors(&ck.join("model.safetensors"), &tensors, &mut |i| {
        let mut v = values(&kept[i].name);
        // Gemma's norms: transformers keeps w where GGUF stores 1 + w (the fixture's values
        // are multiples of 2^-20, so both ways are exact in f32).
        if gemma && kept[i].name.ends_with("norm.weight") {
            v.iter_mut().for_each(|x| *x -= 1.0);
        }
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    });
    let heads = get("attention.head_count");
    let head_dim = file
        .get_u64(&format!("{arch}.attention.key_length"))
        .unwrap_or(get("embedding_length") / heads);
    let mut config = json!({
        "architectures": [match arch {
            "qwen2" => "Qwen2ForCausalLM",
            "qwen3" => "Qwen3ForCausalLM",
            "gemma2" => "Gemma2ForCausalLM",
            "gemma3" => "Gemma3ForCausalLM",
            _ => "Phi3ForCausalLM",
        }],
        "model_type": arch,
        "hidden_size": get("embedding_length"),
        "intermediate_size": get("feed_forward_length"),
        "num_hidden_layers": get("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": get("attention.head_count_kv"),
        "head_dim": head_dim,
        "vocab_size": 320,
        "max_position_embeddings": get("context_length"),
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": file.tensor("output.weight").is_none(),
        "attention_bias": arch == "qwen2",
        "hidden_act": "silu",
        "torch_dtype": "float32",
    });
    if arch == "phi3" {
        let rot = file.get_u64("phi3.rope.dimension_count").unwrap();
        config["rope_theta"] = json!(10000.0);
        config["rms_norm_eps"] = json!(1e-5);
        config["max_position_embeddings"] = json!(64 * 32);
        config["original_max_position_embeddings"] = json!(64);
        config["partial_rotary_factor"] = json!(rot as f64 / head_dim as f64);
        config["rope_scaling"] = json!({
            "type": "longrope",
            "short_factor": values("rope_factors_short.weight"),
            "long_factor": values("rope_factors_long.weight"),
        });
    }
    if gemma {
        let act = config.as_object_mut().unwrap();
        act.remove("hidden_act");
        act.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
        config["sliding_window"] = json!(8);
        config["query_pre_attn_scalar"] = json!(head_dim);
    }
    if arch == "gemma2" {
        config["rope_theta"] = json!(10000.0);
        config["attn_logit_softcapping"] = json!(4.0);
        config["final_logit_softcapping"] = json!(8.0);
        // transformers' Gemma 2: the even layers slide.
        config["layer_types"] = json!(["sliding_attention", "full_attention"]);
    }
    if arch == "gemma3" {
        config["rope_local_base_freq"] = json!(10000.0);
        config["rope_scaling"] = json!({"rope_type": "linear", "factor": 8.0});
        config["sliding_window_pattern"] = json!(6);
    }
    std::fs::write(ck.join("config.json"), config.to_string()).unwrap();
    std::fs::write(ck.join("tokenizer.json"), gguf_tokenizer_json(&gguf, dir)).unwrap();
    (ck, gguf)
}

/// Qwen2 (q/k/v biases), Qwen3 (per-head q/k norms), Phi-3 (stacked matrices, longrope) and
/// Gemma 2 and 3 (norms stored as 1 + w, windows, soft caps, Gemma 3's linear RoPE scaling):
/// `--quantize f16 --to gguf` gives back the fixture's tensors byte for byte (F16 values
/// survive F32 and back exactly; norms, biases and RoPE factors stay F32), the metadata that
/// shapes the pass as the fixture has it, and the same logits.
#[test]
fn arch_checkpoints_convert_to_the_fixtures_of_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    for arch in ["qwen2", "qwen3", "phi3", "gemma2", "gemma3"] {
        let work = dir.path().join(arch);
        std::fs::create_dir(&work).unwrap();
        let (ck, gguf) = write_arch_checkpoint(&work, arch);
        let out = work.join(format!("{arch}.gguf"));
        ok(tritium(&[
            "convert",
            p(&ck),
            p(&out),
            "--quantize",
            "f16",
            "--to",
            "gguf",
        ]));
        assert_same_tensors(&out, &gguf);
        let meta = |path: &str, key: &str| {
            let b = std::fs::read(path).unwrap();
            GgufFile::read(&b).unwrap().get(key).cloned()
        };
        let keys: &[&str] = match arch {
            "phi3" => &["rope.dimension_count", "rope.scaling.attn_factor"],
            "gemma2" => &[
                "attention.sliding_window",
                "attn_logit_softcapping",
                "final_logit_softcapping",
            ],
            "gemma3" => &[
                "attention.sliding_window",
                "rope.scaling.type",
                "rope.scaling.factor",
            ],
            _ => &[],
        };
        for key in keys {
            let key = format!("{arch}.{key}");
            assert_eq!(meta(p(&out), &key), meta(&gguf, &key), "{key}");
        }
        let ids = "257,316,108,277,102,259,282,283";
        let want = logits(&gguf, ids, &work.join("want.f32"));
        let got = logits(p(&out), ids, &work.join("got.f32"));
        assert!(want == got, "{arch}: logits differ");
    }
}

//! GGUF files whose metadata claims more than the file holds, or hyper-parameters no model
//! can have: each is refused with an error naming the key or tensor, the same on the CPU and
//! the GPU backend, before anything is sized by the claim. The files are the tiny BitNet
//! fixture with one metadata value overwritten in place (same type, same length), as a
//! hostile user would edit it.

use std::process::Command;

use tritium::backend::cpu::CpuBackend;
use tritium::backend::gpu::GpuBackend;
use tritium::backend::Backend;
use tritium::formats::gguf::GgufFile;
use tritium::gpu::{DeviceOptions, GpuContext};
use tritium::model::{GgufTensors, Model, ModelConfig, TensorSource};
use tritium::quant::GgmlType;
use tritium::Error;

const MODEL: &str = "tests/fixtures/bitnet/tiny-i2s.gguf";

/// The fixture with the value of `key` (a u32 or f32 scalar) replaced by `value`'s bytes.
fn patched(key: &str, value: [u8; 4]) -> Vec<u8> {
    let mut bytes = std::fs::read(MODEL).expect("fixture");
    let mut needle = (key.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(key.as_bytes());
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{key} in the fixture"));
    let ty = at + needle.len();
    let type_id = u32::from_le_bytes(bytes[ty..ty + 4].try_into().unwrap());
    assert!(
        type_id == 4 || type_id == 6,
        "{key}: u32 or f32, got type {type_id}"
    );
    bytes[ty + 4..ty + 8].copy_from_slice(&value);
    bytes
}

fn config_error(bytes: &[u8]) -> String {
    let file = GgufFile::read(&bytes.to_vec()).expect("the header itself is well formed");
    match ModelConfig::from_gguf(&file) {
        Ok(c) => panic!("accepted {c:?}"),
        Err(e) => e.to_string(),
    }
}

fn gpu() -> GpuBackend {
    let ctx = pollster::block_on(GpuContext::new(&DeviceOptions::default())).expect("adapter");
    GpuBackend::new(ctx, 4).expect("backend")
}

/// `tritium run` on `bytes` with each backend: a clean error exit with the same message, no
/// panic and no allocation failure.
fn run_refuses(bytes: &[u8], expect: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hostile.gguf");
    std::fs::write(&path, bytes).expect("write");
    let mut messages = Vec::new();
    for backend in ["cpu", "gpu"] {
        let o = Command::new(env!("CARGO_BIN_EXE_tritium"))
            .args(["run", path.to_str().unwrap(), "--prompt", "hi"])
            .args(["--max-tokens", "2", "--backend", backend])
            .output()
            .expect("tritium runs");
        let stderr = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(1), "{backend}: {stderr}");
        assert!(!stderr.contains("panicked"), "{backend}: {stderr}");
        assert!(stderr.contains(expect), "{backend}: {stderr}");
        messages.push(stderr.lines().last().unwrap_or_default().to_string());
    }
    assert_eq!(messages[0], messages[1], "both backends give one error");
}

#[test]
fn a_block_count_the_file_does_not_hold_is_refused_before_allocating() {
    // Far beyond any model: refused by range (this count once aborted on a 200 GB allocation).
    let huge = patched("bitnet-b1.58.block_count", u32::MAX.to_le_bytes());
    let e = config_error(&huge);
    assert!(e.contains("block_count is 4294967295"), "{e}");
    run_refuses(&huge, "block_count is 4294967295");
    // In range, but one block more than the file's two.
    let three = patched("bitnet-b1.58.block_count", 3u32.to_le_bytes());
    let e = config_error(&three);
    assert!(
        e.contains("says 3 blocks") && e.contains("blk.2.attn_norm.weight"),
        "{e}"
    );
    run_refuses(&three, "blk.2.attn_norm.weight");
}

#[test]
fn widths_beyond_any_model_are_refused() {
    for key in [
        "bitnet-b1.58.embedding_length",
        "bitnet-b1.58.feed_forward_length",
        "bitnet-b1.58.attention.head_count",
        "bitnet-b1.58.attention.head_count_kv",
    ] {
        for v in [0u32, u32::MAX] {
            let e = config_error(&patched(key, v.to_le_bytes()));
            assert!(
                e.contains(key) || e.contains("attention heads"),
                "{key}={v}: {e}"
            );
        }
    }
    // 4 heads of 2^19 dimensions each: every value in range, their product is not.
    let e = config_error(&patched(
        "bitnet-b1.58.rope.dimension_count",
        (1u32 << 30).to_le_bytes(),
    ));
    assert!(e.contains("rope.dimension_count"), "{e}");
}

#[test]
fn non_finite_or_non_positive_floats_are_refused_on_every_backend() {
    for key in [
        "bitnet-b1.58.attention.layer_norm_rms_epsilon",
        "bitnet-b1.58.rope.freq_base",
    ] {
        for v in [f32::NAN, f32::INFINITY, -1.0, 0.0] {
            let bytes = patched(key, v.to_le_bytes());
            let e = config_error(&bytes);
            assert!(e.contains(key) && e.contains("must be"), "{key}={v}: {e}");
            if v.is_nan() {
                // These were an error on the CPU and text on the GPU.
                run_refuses(&bytes, key);
            }
        }
    }
    let e = config_error(&patched(
        "bitnet-b1.58.attention.layer_norm_rms_epsilon",
        2.0f32.to_le_bytes(),
    ));
    assert!(e.contains("below 1"), "{e}");
}

#[test]
fn a_key_of_the_wrong_type_is_an_error_not_a_default() {
    // block_count's type id overwritten from u32 to f32 (same size): its bits are now a
    // float, which is not a block count.
    let mut bytes = std::fs::read(MODEL).expect("fixture");
    let key = "bitnet-b1.58.block_count";
    let mut needle = (key.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(key.as_bytes());
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
        + needle.len();
    assert_eq!(bytes[at..at + 4], 4u32.to_le_bytes());
    bytes[at..at + 4].copy_from_slice(&6u32.to_le_bytes());
    let e = config_error(&bytes);
    assert!(e.contains(key) && e.contains("F32"), "{e}");
}

/// The fixture's tensors, with one tensor's bytes grown or cut by `delta` bytes.
struct Resized<'a> {
    inner: GgufTensors<'a>,
    name: &'a str,
    delta: isize,
}

impl TensorSource for Resized<'_> {
    fn meta(&self, name: &str) -> Option<(GgmlType, Vec<u64>)> {
        self.inner.meta(name)
    }

    fn read(&self, name: &str) -> Result<Vec<u8>, Error> {
        let mut bytes = self.inner.read(name)?;
        if name == self.name {
            let len = bytes.len() as isize + self.delta;
            bytes.resize(len as usize, 0);
        }
        Ok(bytes)
    }
}

fn load_error<B: Backend>(backend: B, name: &str, delta: isize) -> String {
    let bytes = std::fs::read(MODEL).expect("fixture");
    let file = GgufFile::read(&bytes).expect("gguf");
    let config = ModelConfig::from_gguf(&file).expect("config");
    let src = Resized {
        inner: GgufTensors {
            file: &file,
            src: &bytes,
        },
        name,
        delta,
    };
    match Model::load(backend, config, &src, 16) {
        Ok(_) => panic!("{name} {delta:+} bytes loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_tensor_one_byte_long_or_short_is_refused_by_every_backend() {
    // A ternary weight (its scale trails the codes), a norm vector and the f16 embedding.
    for (name, need) in [
        ("blk.0.attn_q.weight", 16416),
        ("blk.1.ffn_norm.weight", 1024),
        ("token_embd.weight", 262144),
    ] {
        for delta in [1isize, -1, 4096] {
            let have = need as isize + delta;
            let expect =
                format!("'{name}' holds {have} bytes; its dtype and shape need exactly {need}");
            let cpu = load_error(CpuBackend::new(4), name, delta);
            assert!(cpu.contains(&expect), "cpu: {cpu}");
            let gpu = load_error(gpu(), name, delta);
            assert_eq!(cpu, gpu, "the same error on both backends");
        }
    }
}

#[cfg(target_os = "linux")]
mod memory_support;

/// A command's arguments for a model, an output folder and the `run` options.
#[cfg(target_os = "linux")]
type Args = fn(&str, &str, &[&str]) -> Vec<String>;

/// Write a GGUF header of `n` metadata array elements (`elem` bytes each, as `elem_type`)
/// under one key, streamed to `path` (the test never holds it). Returns the file's size.
#[cfg(target_os = "linux")]
fn write_header_of_elements(path: &std::path::Path, elem_type: u32, elem: &[u8], n: u64) -> u64 {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut put = |b: &[u8]| f.write_all(b).unwrap();
    put(b"GGUF");
    put(&3u32.to_le_bytes());
    put(&0u64.to_le_bytes()); // tensors
    put(&2u64.to_le_bytes()); // metadata entries
    let key = |put: &mut dyn FnMut(&[u8]), k: &str| {
        put(&(k.len() as u64).to_le_bytes());
        put(k.as_bytes());
    };
    key(&mut put, "general.architecture");
    put(&8u32.to_le_bytes());
    key(&mut put, "llama");
    key(&mut put, "tokenizer.ggml.tokens");
    put(&9u32.to_le_bytes());
    put(&elem_type.to_le_bytes());
    put(&n.to_le_bytes());
    for _ in 0..n {
        put(elem);
    }
    f.flush().unwrap();
    std::fs::metadata(path).unwrap().len()
}

/// `inspect`, `convert` and `run` on GGUF headers made of millions of tiny metadata values,
/// their peak memory measured (tests/memory_support): a clear exit, and at most the same
/// command on the tiny fixture plus 8 times the file plus 64 MiB. The factor covers what the
/// values cost as Rust values (up to 6.2 times their encoding): a one-byte string takes 9 bytes in the file and 56 in memory
/// (a `String` and its smallest heap block); an empty inner array 12 and 32. `run` and
/// `convert` also build the tokenizer from the strings, and `convert` writes the JSON of the
/// metadata (at most 64 MiB). A JSON tree of the metadata once took 73 times the file here.
#[cfg(target_os = "linux")]
#[test]
fn millions_of_tiny_metadata_values_stay_within_a_memory_bound() {
    use memory_support::tritium;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let files = [
        // One million empty u8 arrays inside an array of arrays.
        (
            "nested.gguf",
            9u32,
            [0u8; 4]
                .iter()
                .chain(&[0u8; 8])
                .copied()
                .collect::<Vec<_>>(),
        ),
        // 1.3 million one-byte strings.
        ("strings.gguf", 8, [1u8, 0, 0, 0, 0, 0, 0, 0, b'a'].to_vec()),
    ];
    for (name, elem_type, elem) in files {
        let path = dir.path().join(name);
        let n = 12_000_000 / elem.len() as u64;
        let size = write_header_of_elements(&path, elem_type, &elem, n);
        let path = path.to_str().unwrap();
        let out = dir.path().join(format!("{name}.rdrr"));
        let out = out.to_str().unwrap();
        let base_out = dir.path().join("baseline.rdrr");
        let base_out = base_out.to_str().unwrap();
        // Each command's arguments for a model and an output folder: the hostile file, and the
        // fixture for the baseline.
        let run = ["--prompt", "hi", "--max-tokens", "1", "--backend", "cpu"];
        let commands: [(&str, Args); 3] = [
            ("inspect", |m, _, _| vec!["inspect".into(), m.into()]),
            ("convert", |m, o, _| {
                vec!["convert".into(), m.into(), o.into()]
            }),
            ("run", |m, _, r| {
                ["run", m].iter().chain(r).map(|a| a.to_string()).collect()
            }),
        ];
        for (what, command) in commands {
            let args = command(path, out, &run);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let baseline_args = command(MODEL, base_out, &run);
            let baseline_args: Vec<&str> = baseline_args.iter().map(String::as_str).collect();
            let baseline = tritium(&baseline_args, &store);
            assert_eq!(
                baseline.code,
                Some(0),
                "{what} baseline: {}",
                baseline.text()
            );
            let _ = std::fs::remove_dir_all(base_out);
            let o = tritium(&args, &store);
            assert!(
                o.signal.is_none() && o.code.is_some(),
                "{what} {name}: {}",
                o.text()
            );
            assert!(
                !o.stderr.contains("panicked"),
                "{what} {name}: {}",
                o.text()
            );
            let bound = baseline.peak + 8 * size + (64 << 20);
            eprintln!(
                "{what} {name} ({size} bytes): peak {} MiB, baseline {} MiB, bound {} MiB, exit {:?}",
                o.peak >> 20,
                baseline.peak >> 20,
                bound >> 20,
                o.code
            );
            assert!(o.peak <= bound, "{what} {name}: peak {} > {bound}", o.peak);
        }
    }
}

//! Trellis v3/v2: decode bit-exact against an independent numpy implementation
//! (`tests/fixtures/trellis/gen_fixture.py`, committed output), the worked example of
//! `trellis.md`, bit unpacking against a plain bit reader, migration, and one broken fixture
//! per validation check.

use std::borrow::Cow;
use std::cell::RefCell;
use std::path::Path;

use half::f16;
use serde_json::{json, Value};
use tritium::formats::safetensors::{self as st, Dtype, SafetensorsHeader, TensorBytes};
use tritium::formats::source::{ByteSource, MemoryFiles, ModelFiles, SourceError};
use tritium::formats::trellis::{
    self, dequantize_tensor, describe, migrate_v2_to_v3, validate, MigrateOptions, TrellisError,
    TrellisModel,
};
use tritium::quant::trellis::{
    decode_weight, decode_weight_f32, pack_indices, quantize_weight, unpack_indices,
    TrellisGeometry, MAX_ERROR_PER_SCALE,
};

// ---------------------------------------------------------------- fixture helpers

const SHARD1: &str = "model-00001-of-00002.safetensors";
const SHARD2: &str = "model-00002-of-00002.safetensors";
const INDEX: &str = "model.safetensors.index.json";
const QCONF: &str = "quantization_config.json";
const Q_PROJ: &str = "model.layers.0.self_attn.q_proj.weight";

fn fixture_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trellis")
}

fn load_dir(root: &Path, rel: &str, files: &mut MemoryFiles) {
    let dir = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        if entry.file_type().unwrap().is_dir() {
            load_dir(root, &path, files);
        } else {
            files.insert(path, std::fs::read(entry.path()).unwrap());
        }
    }
}

fn v3() -> MemoryFiles {
    let mut files = MemoryFiles::new();
    load_dir(&fixture_dir().join("v3"), "", &mut files);
    files
}

fn v2() -> MemoryFiles {
    let mut files = MemoryFiles::new();
    load_dir(&fixture_dir().join("v2"), "", &mut files);
    files
}

/// The fixture's expected.safetensors: decoded f16 weights and their f16 originals.
struct Expected {
    bytes: Vec<u8>,
    header: SafetensorsHeader,
}

impl Expected {
    fn load() -> Self {
        let bytes = std::fs::read(fixture_dir().join("expected.safetensors")).unwrap();
        let header = SafetensorsHeader::read(&bytes).unwrap();
        Self { bytes, header }
    }

    /// Names of the quantized weights.
    fn weights(&self) -> Vec<String> {
        self.header
            .names()
            .filter(|n| !n.ends_with(".original"))
            .map(str::to_string)
            .collect()
    }

    fn f16(&self, name: &str) -> (Vec<f16>, Vec<u64>) {
        let t = self.header.tensor(name).unwrap();
        assert_eq!(t.dtype, Dtype::F16);
        let raw = self.header.read_tensor(&self.bytes, name).unwrap();
        let v = raw
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]))
            .collect();
        (v, t.shape.clone())
    }
}

/// An owned tensor of a shard, for mutating fixtures.
#[derive(Clone)]
struct Owned {
    name: String,
    dtype: Dtype,
    shape: Vec<u64>,
    data: Vec<u8>,
}

fn read_file_tensors(files: &MemoryFiles, path: &str) -> Vec<Owned> {
    let bytes = &files.files[path];
    let h = SafetensorsHeader::read(bytes).unwrap();
    h.tensors
        .iter()
        .map(|t| Owned {
            name: t.name.clone(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            data: h.read_tensor(bytes, &t.name).unwrap(),
        })
        .collect()
}

fn write_file_tensors(files: &mut MemoryFiles, path: &str, tensors: &[Owned]) {
    let views: Vec<TensorBytes> = tensors
        .iter()
        .map(|t| TensorBytes {
            name: t.name.clone(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            data: Cow::Borrowed(&t.data),
        })
        .collect();
    files.insert(path, st::serialize(&views, None).unwrap());
}

fn edit_shard(files: &mut MemoryFiles, path: &str, f: impl FnOnce(&mut Vec<Owned>)) {
    let mut tensors = read_file_tensors(files, path);
    f(&mut tensors);
    write_file_tensors(files, path, &tensors);
}

fn edit_tensor(files: &mut MemoryFiles, path: &str, name: &str, f: impl FnOnce(&mut Owned)) {
    edit_shard(files, path, |ts| {
        f(ts.iter_mut()
            .find(|t| t.name == name)
            .expect("tensor in fixture"))
    });
}

fn edit_json(files: &mut MemoryFiles, path: &str, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&files.files[path]).unwrap();
    f(&mut v);
    files.insert(path, serde_json::to_vec_pretty(&v).unwrap());
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    st::to_f32(Dtype::F32, bytes).unwrap()
}

fn decoded_f16(files: &dyn ModelFiles, name: &str) -> Vec<f16> {
    let model = TrellisModel::open(files).unwrap();
    let w = model
        .weight(name)
        .unwrap_or_else(|| panic!("no weight {name}"));
    model.resolve(files, w).unwrap().decode(files).unwrap()
}

// ---------------------------------------------------------------- worked example, bits

#[test]
fn worked_example_from_the_guide() {
    let (out, in_) = (16, 32);
    let geo = TrellisGeometry::new(out, in_, 3).unwrap();
    assert_eq!(geo.packed_len(), 193);
    let mut packed = vec![0u8; 193];
    packed[0] = 0x03;
    packed[1..4].copy_from_slice(&[0x88, 0xC6, 0xFA]);
    let idx = unpack_indices(&packed, out, in_, 3).unwrap();
    assert_eq!(&idx[..8], &[0, 1, 2, 3, 4, 5, 6, 7]);

    // Our packer writes the same bytes.
    let mut want = vec![0u8; out * in_];
    want[..8].copy_from_slice(&[0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(pack_indices(&want, out, in_, 3).unwrap(), packed);

    // W[0,1] = -3.1092772 * 0.01 * -1 * 1 = 0.031092772 -> 0.031097412 in f16.
    let scales = vec![0.01f32; out]; // G = 1
    let mut su = vec![1f32; in_];
    su[1] = -1.0;
    let sv = vec![1f32; out];
    let w = decode_weight(&packed, &scales, &su, &sv, out, in_, 3).unwrap();
    let w32 = decode_weight_f32(&packed, &scales, &su, &sv, out, in_, 3).unwrap();
    assert!((w32[1] - 0.031_092_772).abs() < 1e-9, "{}", w32[1]);
    assert_eq!(w[1].to_f32(), 0.031_097_412);
    assert_eq!(w[1], f16::from_f32(0.031_092_772));

    // Element (9, 17): tile 1, p = 145, stream bit 435, byte 1 + 96 + 54 = 151, bits 3..5.
    let loc = geo.locate(9, 17);
    assert_eq!((loc.tile, loc.position, loc.bit_in_tile), (1, 145, 435));
    assert_eq!((loc.byte, loc.shift), (151, 3));
    let mut one = vec![0u8; out * in_];
    one[9 * in_ + 17] = 0b101;
    let p = pack_indices(&one, out, in_, 3).unwrap();
    assert_eq!(p[151], 0b101 << 3);
    assert!(p
        .iter()
        .enumerate()
        .all(|(k, &b)| k == 0 || k == 151 || b == 0));
    assert_eq!(unpack_indices(&p, out, in_, 3).unwrap()[9 * in_ + 17], 5);
}

/// A plain bit reader: the stream as a list of bits, LSB first, read one bit at a time.
fn reference_unpack(packed: &[u8], out: usize, in_: usize, bits: usize) -> Vec<u8> {
    let stream_bits: Vec<u8> = packed[1..]
        .iter()
        .flat_map(|byte| (0..8).map(move |k| (byte >> k) & 1))
        .collect();
    let tiles_in = in_.div_ceil(16);
    let mut idx = Vec::new();
    for o in 0..out {
        for i in 0..in_ {
            let tile = (o / 16) * tiles_in + i / 16;
            let p = (o % 16) * 16 + i % 16;
            let start = tile * 32 * bits * 8 + p * bits;
            let mut v = 0u8;
            for k in 0..bits {
                v |= stream_bits[start + k] << k;
            }
            idx.push(v);
        }
    }
    idx
}

#[test]
fn unpacking_matches_a_plain_bit_reader_for_every_width() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for bits in 2..=8u32 {
        for (out, in_) in [(16, 16), (20, 128), (33, 47), (1, 300), (64, 17)] {
            let geo = TrellisGeometry::new(out, in_, bits).unwrap();
            let mut packed: Vec<u8> = (0..geo.packed_len())
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            packed[0] = bits as u8;
            let ours = unpack_indices(&packed, out, in_, bits).unwrap();
            assert_eq!(
                ours,
                reference_unpack(&packed, out, in_, bits as usize),
                "b={bits} [{out},{in_}]"
            );
        }
    }
}

// ---------------------------------------------------------------- fixture decode

#[test]
fn decode_is_bit_identical_to_numpy() {
    let files = v3();
    let expected = Expected::load();
    assert_eq!(expected.weights().len(), 7);
    for name in expected.weights() {
        let (want, shape) = expected.f16(&name);
        let got = decoded_f16(&files, &name);
        assert_eq!(got.len(), want.len(), "{name}");
        let mismatches = got
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            mismatches, 0,
            "{name} {shape:?}: {mismatches} f16 values differ"
        );
        // The public f32 path is the same values, widened.
        let wide = dequantize_tensor(&files, &name).unwrap();
        assert!(
            wide.iter().zip(&want).all(|(a, b)| *a == b.to_f32()),
            "{name}"
        );
    }
}

#[test]
fn every_bit_width_and_odd_shape_is_covered() {
    let files = v3();
    let model = TrellisModel::open(&files).unwrap();
    let mut bits: Vec<u32> = Vec::new();
    let mut odd_out = false;
    let mut square = false;
    for w in &model.weights {
        let r = model.resolve(&files, w).unwrap();
        bits.push(r.bits);
        odd_out |= r.out % 16 != 0 && r.in_ != r.out;
        square |= r.out == r.in_;
    }
    bits.sort();
    assert_eq!(bits, vec![2, 3, 4, 5, 6, 7, 8]);
    assert!(odd_out && square);
}

#[test]
fn decode_error_is_within_the_bound() {
    let files = v3();
    let expected = Expected::load();
    let model = TrellisModel::open(&files).unwrap();
    for name in expected.weights() {
        let (orig, _) = expected.f16(&format!("{name}.original"));
        let r = model.resolve(&files, model.weight(&name).unwrap()).unwrap();
        let indices = r.indices.read(&files).unwrap();
        let scales = f32s(&r.scales.read(&files).unwrap());
        let su = f32s(&r.su.read(&files).unwrap());
        let sv = f32s(&r.sv.read(&files).unwrap());
        let exact = decode_weight_f32(&indices, &scales, &su, &sv, r.out, r.in_, r.bits).unwrap();
        let rounded = decoded_f16(&files, &name);
        let gs = r.in_.div_ceil(r.groups);
        for o in 0..r.out {
            for i in 0..r.in_ {
                let k = o * r.in_ + i;
                let scale = scales[(i / gs).min(r.groups - 1) * r.out + o];
                let w = orig[k].to_f32();
                let e = (exact[k] - w).abs();
                assert!(
                    e <= MAX_ERROR_PER_SCALE * scale,
                    "{name} ({o},{i}): {e} > 0.622*{scale}"
                );
                // f16 rounding adds at most half an f16 ulp of the value.
                let d = rounded[k].to_f32();
                let e16 = (d - w).abs();
                assert!(
                    e16 <= MAX_ERROR_PER_SCALE * scale + d.abs() * 2f32.powi(-11),
                    "{name} ({o},{i})"
                );
            }
        }
    }
}

#[test]
fn our_quantizer_reproduces_the_fixture() {
    let files = v3();
    let expected = Expected::load();
    let model = TrellisModel::open(&files).unwrap();
    for name in expected.weights() {
        let (orig, _) = expected.f16(&format!("{name}.original"));
        let w: Vec<f32> = orig.iter().map(|v| v.to_f32()).collect();
        let r = model.resolve(&files, model.weight(&name).unwrap()).unwrap();
        let su = f32s(&r.su.read(&files).unwrap());
        let sv = f32s(&r.sv.read(&files).unwrap());
        let q = quantize_weight(&w, r.out, r.in_, r.bits, r.groups, &su, &sv).unwrap();
        assert_eq!(
            q.indices,
            r.indices.read(&files).unwrap(),
            "{name}: indices differ"
        );
        let scales = f32s(&r.scales.read(&files).unwrap());
        assert!(
            q.scales
                .iter()
                .zip(&scales)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name}: scales differ"
        );
    }
}

#[test]
fn plain_tensors_and_names() {
    let files = v3();
    let embed = dequantize_tensor(&files, "model.embed_tokens.weight").unwrap();
    assert_eq!(embed.len(), 64 * 128);
    let norm = dequantize_tensor(&files, "model.norm.weight").unwrap();
    assert_eq!(norm.len(), 128);
    assert!(norm.iter().all(|v| (0.5..1.5).contains(v)));
    // Quantized weights answer to their name with or without `.weight`, and in `__` style.
    let a = dequantize_tensor(&files, Q_PROJ).unwrap();
    assert_eq!(
        a,
        dequantize_tensor(&files, "model.layers.0.self_attn.q_proj").unwrap()
    );
    assert_eq!(
        a,
        dequantize_tensor(&files, "model__layers__0__self_attn__q_proj__weight").unwrap()
    );
    assert!(matches!(
        dequantize_tensor(&files, "model.nothing"),
        Err(TrellisError::TensorNotFound { .. })
    ));
}

#[test]
fn describe_v3_and_v2() {
    let files = v3();
    let d = describe(&files).unwrap();
    assert_eq!(d.format, "Trellis v3");
    assert_eq!(d.architecture.as_deref(), Some("llama"));
    let hp: std::collections::HashMap<_, _> = d.hyper_parameters.iter().cloned().collect();
    assert_eq!(hp["hidden_size"], json!(128));
    assert_eq!(hp["num_hidden_layers"], json!(2));
    assert_eq!(d.tensors.len(), 9);
    let q = d.tensors.iter().find(|t| t.name == Q_PROJ).unwrap();
    assert_eq!(q.dtype, "trellis-2bit");
    assert_eq!(q.shape, vec![32, 128]);
    // indices 1 + 2*8*32*2, scales 1*32*4, su 128*4, sv 32*4
    assert_eq!(q.bytes, (1 + 2 * 8 * 64) + 128 + 512 + 128);
    assert_eq!(q.location, SHARD1);
    let up = d
        .tensors
        .iter()
        .find(|t| t.name == "model.layers.1.mlp.up_proj.weight")
        .unwrap();
    assert_eq!(
        (up.dtype.as_str(), up.shape.clone()),
        ("trellis-8bit", vec![20, 384])
    );
    let embed = d
        .tensors
        .iter()
        .find(|t| t.name == "model.embed_tokens.weight")
        .unwrap();
    assert_eq!((embed.dtype.as_str(), embed.bytes), ("F16", 64 * 128 * 2));

    let d2 = describe(&v2()).unwrap();
    assert_eq!(d2.format, "Trellis v2");
    assert_eq!(d2.tensors.len(), 9);
    assert!(d2
        .tensors
        .iter()
        .any(|t| t.name == "model.layers.1.mlp.gate_proj" && t.dtype == "trellis-5bit"));
}

// ---------------------------------------------------------------- key styles, orientation

#[test]
fn accepts_underscore_keys_headerless_indices_and_seed_order_shapes() {
    let original = v3();
    let want_q = decoded_f16(&original, Q_PROJ);
    let k_proj = "model.layers.0.self_attn.k_proj.weight";
    let want_k = decoded_f16(&original, k_proj);
    let gate = "model.layers.1.mlp.gate_proj.weight";
    let want_gate = decoded_f16(&original, gate);

    let mut files = original.clone();
    // q_proj in `__` style with `.weight` omitted; k_proj in `__` style with it.
    let renames = |name: &str| -> Option<String> {
        let (base, part) = name.rsplit_once('.')?;
        if base == Q_PROJ {
            Some(format!("model__layers__0__self_attn__q_proj__{part}"))
        } else if base == k_proj {
            Some(format!("{}__{part}", base.replace('.', "__")))
        } else {
            None
        }
    };
    edit_shard(&mut files, SHARD1, |ts| {
        for t in ts.iter_mut() {
            if let Some(n) = renames(&t.name) {
                t.name = n;
            }
            // k_proj's indices already shaped [TO, TI, 32*b] without the header.
            if t.name.ends_with("k_proj__weight__indices") {
                t.data.remove(0);
                t.shape = vec![2, 8, 96];
            }
        }
    });
    edit_json(&mut files, INDEX, |v| {
        let map = v["weight_map"].as_object_mut().unwrap();
        let keys: Vec<String> = map.keys().cloned().collect();
        for k in keys {
            if let Some(n) = renames(&k) {
                let shard = map.remove(&k).unwrap();
                map.insert(n, shard);
            }
        }
    });
    // gate_proj (48 x 128) metadata written in the seed's [in, out] order.
    edit_json(&mut files, QCONF, |v| {
        v["tensor_metadata"][gate]["shape"] = json!([128, 48]);
    });

    let report = validate(&files);
    assert!(report.is_valid(), "{:?}", report.issues);
    assert_eq!(
        decoded_f16(&files, "model.layers.0.self_attn.q_proj"),
        want_q
    );
    assert_eq!(decoded_f16(&files, Q_PROJ), want_q);
    assert_eq!(decoded_f16(&files, k_proj), want_k);
    assert_eq!(decoded_f16(&files, gate), want_gate);
    let d = describe(&files).unwrap();
    let g = d.tensors.iter().find(|t| t.name == gate).unwrap();
    assert_eq!(g.shape, vec![48, 128]);
}

#[test]
fn without_metadata_the_sign_vectors_give_the_shape() {
    let original = v3();
    let mut files = original.clone();
    files.files.remove(QCONF);
    for name in Expected::load().weights() {
        assert_eq!(
            decoded_f16(&files, &name),
            decoded_f16(&original, &name),
            "{name}"
        );
    }
}

// ---------------------------------------------------------------- validation

#[test]
fn the_valid_fixtures_pass() {
    for (files, format) in [(v3(), "Trellis v3"), (v2(), "Trellis v2")] {
        let report = validate(&files);
        assert_eq!(report.format.as_deref(), Some(format));
        assert!(report.issues.is_empty(), "{format}: {:?}", report.issues);
        assert_eq!(report.quantized_weights, 7);
        assert_eq!(report.plain_tensors, 2);
    }
}

/// Validate a mutated copy of the v3 fixture: exactly one error, containing every `needle`.
fn expect_one_error(what: &str, files: &MemoryFiles, needles: &[&str]) {
    let report = validate(files);
    let errors: Vec<&str> = report.errors().map(|i| i.message.as_str()).collect();
    assert_eq!(
        errors.len(),
        1,
        "{what}: expected one error, got {errors:#?}"
    );
    for n in needles {
        assert!(
            errors[0].contains(n),
            "{what}: {:?} does not mention {n:?}",
            errors[0]
        );
    }
}

fn mutated(f: impl FnOnce(&mut MemoryFiles)) -> MemoryFiles {
    let mut files = v3();
    f(&mut files);
    files
}

const Q_IDX: &str = "model.layers.0.self_attn.q_proj.weight.indices";
const Q_SCALES: &str = "model.layers.0.self_attn.q_proj.weight.scales";
const Q_SU: &str = "model.layers.0.self_attn.q_proj.weight.su";
const Q_SV: &str = "model.layers.0.self_attn.q_proj.weight.sv";

/// Records every path opened, to show that unsafe names are refused before any open.
struct Recording {
    inner: MemoryFiles,
    opened: RefCell<Vec<String>>,
}

impl ModelFiles for Recording {
    fn open<'a>(&'a self, path: &str) -> Result<Box<dyn ByteSource + 'a>, SourceError> {
        self.opened.borrow_mut().push(path.to_string());
        self.inner.open(path)
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, SourceError> {
        self.inner.list(dir)
    }
}

#[test]
fn shard_names_must_be_plain() {
    for bad in [
        "../evil.safetensors",
        "/etc/passwd",
        "sub/x.safetensors",
        "a\\b.safetensors",
        "x\0y",
        "..",
        "",
    ] {
        let files = mutated(|f| {
            edit_json(f, INDEX, |v| {
                v["weight_map"]["model.extra.weight"] = json!(bad)
            });
        });
        expect_one_error(
            bad,
            &files,
            &["model.extra.weight", "not a plain file name"],
        );
        let rec = Recording {
            inner: files,
            opened: RefCell::new(Vec::new()),
        };
        validate(&rec);
        assert!(
            rec.opened.borrow().iter().all(|p| p != bad),
            "{bad:?} was opened"
        );
    }
}

#[test]
fn one_broken_fixture_per_check() {
    type Mutation = Box<dyn FnOnce(&mut MemoryFiles)>;
    let cases: Vec<(&str, Mutation, Vec<&str>)> = vec![
        (
            "missing shard",
            Box::new(|f| {
                f.files.remove(SHARD2);
            }),
            vec![SHARD2, "does not exist"],
        ),
        (
            "mapped key absent from its shard",
            Box::new(|f| {
                edit_json(f, INDEX, |v| {
                    v["weight_map"]["model.extra.weight"] = json!(SHARD1)
                })
            }),
            vec![SHARD1, "model.extra.weight", "has no tensor"],
        ),
        (
            "orphan",
            Box::new(|f| {
                edit_json(f, INDEX, |v| {
                    v["weight_map"]
                        .as_object_mut()
                        .unwrap()
                        .remove("model.embed_tokens.weight");
                })
            }),
            vec![SHARD1, "model.embed_tokens.weight", "orphan"],
        ),
        (
            "missing part",
            Box::new(|f| {
                edit_shard(f, SHARD1, |ts| ts.retain(|t| t.name != Q_SV));
                edit_json(f, INDEX, |v| {
                    v["weight_map"].as_object_mut().unwrap().remove(Q_SV);
                });
            }),
            vec![Q_PROJ, "no sv tensor"],
        ),
        (
            "int16 indices",
            Box::new(|f| {
                edit_tensor(f, SHARD1, Q_IDX, |t| {
                    t.dtype = Dtype::I16;
                    t.shape = vec![32 * 128];
                    t.data = vec![0; 32 * 128 * 2];
                })
            }),
            vec![SHARD1, Q_IDX, "int16", "retired Trellis v1"],
        ),
        (
            "other indices dtype",
            Box::new(|f| edit_tensor(f, SHARD1, Q_IDX, |t| t.dtype = Dtype::I8)),
            vec![Q_IDX, "dtype I8", "expected U8"],
        ),
        (
            "indices length",
            Box::new(|f| {
                // (Dropping exactly the header byte would leave a valid headerless tensor.)
                edit_tensor(f, SHARD1, Q_IDX, |t| {
                    t.data.truncate(1000);
                    t.shape = vec![1000];
                })
            }),
            vec![Q_IDX, "holds 1000 bytes", "1 + 2*8*32*2 = 1025"],
        ),
        (
            "header out of range",
            Box::new(|f| edit_tensor(f, SHARD1, Q_IDX, |t| t.data[0] = 9)),
            vec![Q_IDX, "header byte is 9", "2..8"],
        ),
        (
            "header differs from metadata",
            Box::new(|f| edit_tensor(f, SHARD1, Q_IDX, |t| t.data[0] = 3)),
            vec![
                Q_IDX,
                "header byte says 3 bits",
                "quantization_config.json says 2",
            ],
        ),
        (
            "metadata bits out of range",
            Box::new(|f| {
                edit_json(f, QCONF, |v| {
                    v["tensor_metadata"][Q_PROJ]["bits"] = json!(9)
                })
            }),
            vec![QCONF, Q_PROJ, "bits is 9"],
        ),
        (
            "scales dtype",
            Box::new(|f| {
                edit_tensor(f, SHARD1, Q_SCALES, |t| {
                    t.dtype = Dtype::F16;
                    t.data = f32s(&t.data)
                        .iter()
                        .flat_map(|v| f16::from_f32(*v).to_le_bytes())
                        .collect();
                })
            }),
            vec![Q_SCALES, "dtype F16", "expected F32"],
        ),
        (
            "scales shape",
            Box::new(|f| edit_tensor(f, SHARD1, Q_SCALES, |t| t.shape = vec![32])),
            vec![Q_SCALES, "shape [32]", "[G, 32]"],
        ),
        (
            "su shape",
            Box::new(|f| {
                edit_tensor(f, SHARD1, Q_SU, |t| {
                    t.data.extend(1f32.to_le_bytes());
                    t.shape = vec![129];
                })
            }),
            vec![Q_SU, "shape [129]", "expected [128]"],
        ),
        (
            "sv dtype",
            Box::new(|f| {
                edit_tensor(f, SHARD1, Q_SV, |t| {
                    t.dtype = Dtype::BF16;
                    t.data.truncate(t.data.len() / 2);
                })
            }),
            vec![Q_SV, "dtype BF16", "expected F32"],
        ),
        (
            "non-finite scale",
            Box::new(|f| {
                edit_tensor(f, SHARD1, Q_SCALES, |t| {
                    t.data[8..12].copy_from_slice(&f32::NAN.to_le_bytes())
                })
            }),
            vec![Q_SCALES, "non-finite scale", "element 2"],
        ),
        (
            "quantization_config.json missing",
            Box::new(|f| {
                f.files.remove(QCONF);
            }),
            vec![QCONF, "not found"],
        ),
        (
            "quantization_config.json unparsable",
            Box::new(|f| f.insert(QCONF, b"{\"tensor_metadata\": [".to_vec())),
            vec![QCONF, "invalid type"],
        ),
        (
            "quantization_config.json does not cover a weight",
            Box::new(|f| {
                edit_json(f, QCONF, |v| {
                    v["tensor_metadata"].as_object_mut().unwrap().remove(Q_PROJ);
                })
            }),
            vec![QCONF, "no entry for quantized weight", Q_PROJ],
        ),
        (
            "config.json missing",
            Box::new(|f| {
                f.files.remove("config.json");
            }),
            vec!["config.json", "not found"],
        ),
        (
            "config.json not an object",
            Box::new(|f| f.insert("config.json", b"[1, 2]".to_vec())),
            vec!["config.json", "not a JSON object"],
        ),
        (
            "config.json without model_type or architectures",
            Box::new(|f| f.insert("config.json", br#"{"hidden_size": 128}"#.to_vec())),
            vec!["config.json", "model_type", "architectures"],
        ),
        (
            "corrupt shard header",
            Box::new(|f| {
                let shard = f.files.get_mut(SHARD2).unwrap();
                let len = shard.len() as u64;
                shard[0..8].copy_from_slice(&len.to_le_bytes());
            }),
            vec![SHARD2, "runs past the end"],
        ),
    ];
    for (what, mutation, needles) in cases {
        let files = mutated(mutation);
        expect_one_error(what, &files, &needles);
    }
}

#[test]
fn odd_signs_are_a_warning_not_an_error() {
    let files = mutated(|f| {
        edit_tensor(f, SHARD1, Q_SU, |t| {
            t.data[4..8].copy_from_slice(&0.5f32.to_le_bytes())
        })
    });
    let report = validate(&files);
    assert!(report.is_valid(), "{:?}", report.issues);
    let warnings: Vec<_> = report.warnings().collect();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].message.contains(Q_SU) && warnings[0].message.contains("other than +1/-1"));
}

#[test]
fn v2_checks() {
    let mut files = v2();
    edit_json(&mut files, "layer_0001/index.json", |v| {
        v["format"] = json!("trellis_v9")
    });
    let report = validate(&files);
    let errors: Vec<_> = report.errors().collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].message.contains("layer_0001/index.json")
            && errors[0].message.contains("trellis_v2")
    );
}

#[test]
fn unrecognised_folders_are_one_error() {
    let mut files = MemoryFiles::new();
    files.insert("README.md", b"hi".to_vec());
    let report = validate(&files);
    assert_eq!(report.errors().count(), 1);
    assert!(matches!(describe(&files), Err(TrellisError::UnknownLayout)));
}

// ---------------------------------------------------------------- migration

#[test]
fn migration_gives_the_same_weights_and_a_valid_v3() {
    let input = v2();
    let mut output = MemoryFiles::new();
    let report = migrate_v2_to_v3(&input, &mut output, &MigrateOptions::default()).unwrap();
    assert_eq!(report.shards, vec!["model-00001-of-00001.safetensors"]);
    assert!(report.warnings.is_empty());
    for f in [
        "config.json",
        "tokenizer_config.json",
        "quantization_index.json",
        "base_weights.safetensors",
    ] {
        assert_eq!(output.files[f], input.files[f], "{f} copied unchanged");
        assert!(report.copied_files.iter().any(|c| c == f));
    }
    let v = validate(&output);
    assert!(v.issues.is_empty(), "{:?}", v.issues);
    assert_eq!(v.format.as_deref(), Some("Trellis v3"));

    // Same decoded weights as the reference v3 fixture, and as the v2 input.
    let reference = v3();
    for name in Expected::load().weights() {
        let want = decoded_f16(&reference, &name);
        assert_eq!(decoded_f16(&output, &name), want, "{name}");
        assert_eq!(decoded_f16(&input, &name), want, "{name} (v2)");
    }
    for name in ["model.embed_tokens.weight", "model.norm.weight"] {
        assert_eq!(
            dequantize_tensor(&output, name).unwrap(),
            dequantize_tensor(&reference, name).unwrap()
        );
    }

    // Index: true total size, dotted names, metadata [out, in].
    let index: Value = serde_json::from_slice(&output.files[INDEX]).unwrap();
    let model = TrellisModel::open(&output).unwrap();
    let total: u64 = model.tensors.iter().map(|t| t.entry.byte_len()).sum();
    assert_eq!(index["metadata"]["total_size"], json!(total));
    assert_eq!(report.total_size, total);
    assert_eq!(index["metadata"]["format"], json!("trellis_v3"));
    let map = index["weight_map"].as_object().unwrap();
    assert_eq!(map[Q_IDX], json!("model-00001-of-00001.safetensors"));
    assert_eq!(
        map["model.layers.1.mlp.gate_proj.indices"],
        json!("model-00001-of-00001.safetensors")
    );
    assert_eq!(
        map["model.embed_tokens.weight"],
        json!("base_weights.safetensors")
    );
    let qc: Value = serde_json::from_slice(&output.files[QCONF]).unwrap();
    assert_eq!(
        qc["tensor_metadata"]["model.layers.1.mlp.up_proj"]["shape"],
        json!([20, 384])
    );
    assert_eq!(qc["tensor_metadata"][Q_PROJ]["bits"], json!(2));
    assert_eq!(qc["quantization_version"], json!("trellis_v3"));
    assert_eq!(qc["layer_allocation"]["0"]["self_attn.q_proj"], json!(2));
}

#[test]
fn migration_shards_by_size_and_copies_router_weights() {
    let mut input = v2();
    let router = vec![Owned {
        name: "model.layers.1.mlp.gate.weight".into(),
        dtype: Dtype::F32,
        shape: vec![4, 128],
        data: st::f32_bytes(&[0.25; 512]),
    }];
    write_file_tensors(&mut input, "router_weights.safetensors", &router);
    let mut output = MemoryFiles::new();
    let options = MigrateOptions { shard_size: 8192 };
    let report = migrate_v2_to_v3(&input, &mut output, &options).unwrap();
    let n = report.shards.len();
    assert!(n >= 3, "{n} shards");
    for (i, s) in report.shards.iter().enumerate() {
        assert_eq!(s, &format!("model-{:05}-of-{n:05}.safetensors", i + 1));
        // Every shard but a single-tensor one stays under the limit.
        let h = SafetensorsHeader::read(&output.files[s]).unwrap();
        let data: u64 = h.tensors.iter().map(|t| t.byte_len()).sum();
        assert!(data <= 8192 || h.tensors.len() == 1, "{s}: {data} bytes");
    }
    assert!(validate(&output).is_valid());
    assert_eq!(
        output.files["router_weights.safetensors"],
        input.files["router_weights.safetensors"]
    );
    assert_eq!(
        dequantize_tensor(&output, "model.layers.1.mlp.gate.weight").unwrap(),
        vec![0.25; 512]
    );
    for name in Expected::load().weights() {
        assert_eq!(
            decoded_f16(&output, &name),
            decoded_f16(&input, &name),
            "{name}"
        );
    }
}

#[test]
fn migration_refuses_v3_and_broken_v2() {
    let mut out = MemoryFiles::new();
    assert!(migrate_v2_to_v3(&v3(), &mut out, &MigrateOptions::default()).is_err());
    let mut broken = v2();
    broken.files.remove("layer_0000/tensor_0000.safetensors");
    let err = migrate_v2_to_v3(&broken, &mut out, &MigrateOptions::default()).unwrap_err();
    assert!(err.to_string().contains("does not validate"), "{err}");
    assert_eq!(trellis::parse_shard_size("2GB"), Some(2 << 30));
    assert_eq!(trellis::parse_shard_size("1.5 MB"), Some(3 << 19));
    assert_eq!(trellis::parse_shard_size("123"), Some(123));
    assert_eq!(trellis::parse_shard_size("0"), None);
    assert_eq!(trellis::parse_shard_size("2 parsecs"), None);
}

// ---------------------------------------------------------------- robustness

#[test]
fn corrupted_files_never_panic() {
    let base = v3();
    let paths: Vec<String> = base.files.keys().cloned().collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..300 {
        let mut files = base.clone();
        let path = &paths[(next() % paths.len() as u64) as usize];
        let bytes = files.files.get_mut(path).unwrap();
        match round % 3 {
            0 => {
                let cut = (next() % (bytes.len() as u64 + 1)) as usize;
                bytes.truncate(cut);
            }
            _ => {
                for _ in 0..1 + next() % 8 {
                    if bytes.is_empty() {
                        break;
                    }
                    let k = (next() % bytes.len() as u64) as usize;
                    bytes[k] = next() as u8;
                }
            }
        }
        let _ = validate(&files);
        let _ = describe(&files);
        let _ = dequantize_tensor(&files, Q_PROJ);
        let _ = dequantize_tensor(&files, "model.norm.weight");
    }
}

//! Trellis v3/v2 decoding: bit-exact against an independent numpy implementation
//! (`tests/fixtures/trellis/gen_fixture.py`, committed output), the worked example of
//! `trellis.md`, bit unpacking against a plain bit reader, the reference quantizer, plain
//! tensors, `describe`, and the key styles and orientations we accept.

use half::f16;
use serde_json::json;
use tritium::formats::trellis::{
    dequantize_tensor, describe, validate, TrellisError, TrellisModel,
};
use tritium::quant::trellis::{
    decode_weight, decode_weight_f32, pack_indices, quantize_weight, unpack_indices,
    TrellisGeometry, MAX_ERROR_PER_SCALE,
};

#[path = "fixtures/trellis/common.rs"]
mod common;

use common::*;

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

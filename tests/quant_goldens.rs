//! The CPU quantization reference against gguf-py 0.19 (goldens written by
//! `tests/goldens/gen_quant_goldens.py`, committed under `tests/goldens/quant/`), plus round
//! trips with stated error bounds and hand-built I2_S blocks. Needs no Python: it only reads the
//! committed files.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;
use tritium::quant::{
    dequantize, dequantize_into, f16_bits_to_f32, i2s_weight_scale, quantize, F16Le, GgmlType,
    QuantError,
};

// ---------------------------------------------------------------------------------------------
// Golden files

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/quant")
}

fn read_json(name: &str) -> Value {
    let text = std::fs::read_to_string(golden_dir().join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn read_bytes(name: &str) -> Vec<u8> {
    std::fs::read(golden_dir().join(name)).unwrap()
}

fn read_f32(name: &str) -> Vec<f32> {
    let b = read_bytes(name);
    assert_eq!(b.len() % 4, 0, "{name}");
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

struct Case {
    name: String,
    dtype: GgmlType,
    n: usize,
    input: Option<Vec<f32>>,
    quantized: Vec<u8>,
    dequantized: Vec<f32>,
}

fn cases() -> Vec<Case> {
    let index = read_json("index.json");
    let cases = index["cases"].as_array().unwrap();
    cases
        .iter()
        .map(|c| {
            let name = c["name"].as_str().unwrap().to_string();
            let dtype = GgmlType::from_name(c["dtype"].as_str().unwrap()).unwrap();
            assert_eq!(
                u64::from(dtype.id()),
                c["type_id"].as_u64().unwrap(),
                "{name}"
            );
            let n = c["n_elements"].as_u64().unwrap() as usize;
            let input = c["input"].as_str().map(read_f32);
            let quantized = read_bytes(c["quantized"].as_str().unwrap());
            let dequantized = read_f32(c["dequantized"].as_str().unwrap());
            assert_eq!(dequantized.len(), n, "{name}");
            if let Some(x) = &input {
                assert_eq!(x.len(), n, "{name}");
            }
            Case {
                name,
                dtype,
                n,
                input,
                quantized,
                dequantized,
            }
        })
        .collect()
}

/// Equal bit patterns, except that any two NaNs are equal (payloads are not compared).
fn same_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn assert_same_f32s(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad: Vec<usize> = (0..got.len())
        .filter(|&i| !same_f32(got[i], want[i]))
        .collect();
    if let Some(&i) = bad.first() {
        panic!(
            "{what}: {} of {} values differ; first at {i}: got {} ({:#010x}), want {} ({:#010x})",
            bad.len(),
            got.len(),
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Bit-exactness against gguf-py

#[test]
fn goldens_cover_every_dequantizable_type_but_i2s() {
    let have: BTreeSet<GgmlType> = cases().iter().map(|c| c.dtype).collect();
    for t in GgmlType::ALL {
        if t.can_dequantize() && t != GgmlType::I2_S {
            assert!(have.contains(&t), "no gguf-py golden for {t}");
        }
    }
}

#[test]
fn dequantize_matches_gguf_py_bit_for_bit() {
    for c in cases() {
        assert_eq!(
            c.dtype.tensor_bytes(c.n as u64),
            Some(c.quantized.len() as u64),
            "{}",
            c.name
        );
        let got = dequantize(c.dtype, &c.quantized, c.n).unwrap();
        assert_same_f32s(&c.name, &got, &c.dequantized);
        // NaN payloads too, in fact: we widen f16 NaNs as numpy does.
        assert!(got
            .iter()
            .zip(&c.dequantized)
            .all(|(a, b)| a.to_bits() == b.to_bits()));

        let mut into = vec![0f32; c.n];
        dequantize_into(c.dtype, &c.quantized, &mut into).unwrap();
        assert_same_f32s(&c.name, &into, &c.dequantized);
    }
}

#[test]
fn quantize_matches_gguf_py_bytes() {
    let mut checked = BTreeSet::new();
    for c in cases() {
        let Some(input) = &c.input else { continue };
        let got = quantize(c.dtype, input).unwrap();
        assert_eq!(got.len(), c.quantized.len(), "{}", c.name);
        if c.dtype == GgmlType::F16 {
            // Any f16 NaN equals any other (numpy's payload handling is a build detail).
            for (i, (g, w)) in got
                .chunks_exact(2)
                .zip(c.quantized.chunks_exact(2))
                .enumerate()
            {
                let (g, w) = (
                    u16::from_le_bytes([g[0], g[1]]),
                    u16::from_le_bytes([w[0], w[1]]),
                );
                assert!(
                    same_f32(f16_bits_to_f32(g), f16_bits_to_f32(w)),
                    "f16 element {i}: got {g:#06x}, want {w:#06x}"
                );
            }
        } else if let Some(i) = (0..got.len()).find(|&i| got[i] != c.quantized[i]) {
            panic!(
                "{}: quantized bytes differ first at byte {i} (block {}): got {:#04x}, want {:#04x}",
                c.name,
                i / c.dtype.block().map_or(1, |b| b.block_bytes as usize),
                got[i],
                c.quantized[i]
            );
        }
        checked.insert(c.dtype);
    }
    for t in [
        GgmlType::Q8_0,
        GgmlType::TQ2_0,
        GgmlType::TQ1_0,
        GgmlType::Q4_0,
        GgmlType::BF16,
    ] {
        assert!(checked.contains(&t), "no quantize golden for {t}");
    }
}

/// (name, gguf-py's (block elements, block bytes), ours).
type GeometryDifference = (&'static str, (u64, u64), (u64, u64));

/// gguf-py's type table vs ours. Differences are listed here on purpose, so a change on either
/// side shows up as a failure rather than being skipped.
#[test]
fn dtype_table_agrees_with_gguf_py() {
    // gguf-py 0.19 says Q8_1 is 4 + 4 + 32 = 40 bytes; ggml's `block_q8_1` is two f16 (d, s)
    // and 32 int8 = 36 bytes (static_assert in ggml-common.h). We keep ggml's 36.
    let known_geometry_differences: &[GeometryDifference] = &[("Q8_1", (32, 40), (32, 36))];
    // Upstream ids newer than our table.
    let ids_we_lack: &[(u64, &str)] = &[];
    // Ours only: the BitNet fork's ids, absent upstream (which retired 36 and never had 38).
    let ours_only = [GgmlType::I2_S, GgmlType::TL1];

    let table = read_json("dtypes.json");
    let mut seen_ours = BTreeSet::new();
    let mut geometry_differences: Vec<GeometryDifference> = Vec::new();
    let mut lacking = Vec::new();
    for t in table["types"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let id = t["id"].as_u64().unwrap();
        let theirs = (
            t["block_elems"].as_u64().unwrap(),
            t["block_bytes"].as_u64().unwrap(),
        );
        let Some(ours) = u32::try_from(id).ok().and_then(GgmlType::from_id) else {
            lacking.push((id, name));
            continue;
        };
        assert_eq!(ours.name(), name, "id {id}");
        seen_ours.insert(ours);
        let g = ours.block().unwrap();
        let ours_geometry = (g.block_elems, g.block_bytes);
        if ours_geometry != theirs {
            geometry_differences.push((ours.name(), theirs, ours_geometry));
        }
    }
    assert_eq!(geometry_differences, known_geometry_differences);
    assert_eq!(lacking, ids_we_lack);
    for t in GgmlType::ALL {
        assert_eq!(
            !seen_ours.contains(&t),
            ours_only.contains(&t),
            "{t} ({})",
            t.id()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Seeded random data

/// SplitMix64 (Steele, Lea, Flood 2014).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Weight-like data in blocks of `block`: Gaussian, uniform, heavy-tailed (cubed normal),
/// shifted, plus all-zero, constant and small blocks. Block scales are log-uniform over
/// `10^lo..10^hi`.
fn weight_like(rng: &mut Rng, block: usize, n_blocks: usize, (lo, hi): (f64, f64)) -> Vec<f32> {
    let mut v = Vec::with_capacity(block * n_blocks);
    for b in 0..n_blocks {
        let scale = 10f64.powf(lo + rng.uniform() * (hi - lo));
        for _ in 0..block {
            let x = match b % 7 {
                0 => rng.normal(),
                1 => rng.uniform() * 2.0 - 1.0,
                2 => rng.normal().powi(3),
                3 => rng.normal() + 2.5,
                4 if b == 4 => 0.0,
                4 => rng.normal() * 1e-2,
                5 if b == 5 => 0.75,
                _ => rng.normal() - 1.0,
            };
            v.push((x * scale) as f32);
        }
    }
    v
}

fn f16_round(x: f32) -> f32 {
    F16Le::from_f32(x).to_f32()
}

/// Q8_0: `d = amax/127` is rounded to f16 after `q = round(x * (1/d))` was chosen with the f32 `d`,
/// so `|x - q d16| <= |x - q d| + |q| |d - d16| <= d/2 + 127 |d - d16|` (plus f32 rounding of
/// `x * (1/d)`, covered by a 1e-6 relative slack).
#[test]
fn q8_0_round_trip_error_is_at_most_half_a_step() {
    let mut rng = Rng(0x0808);
    let x = weight_like(&mut rng, 32, 301, (-6.0, 3.0));
    let y = dequantize(
        GgmlType::Q8_0,
        &quantize(GgmlType::Q8_0, &x).unwrap(),
        x.len(),
    )
    .unwrap();
    for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact(32)) {
        let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let d16 = f16_round(d);
        let bound = d / 2.0 + 127.0 * (d - d16).abs() + amax * 1e-6;
        for (a, b) in xb.iter().zip(yb) {
            assert!((a - b).abs() <= bound, "x {a} y {b} bound {bound}");
        }
    }
}

/// RMS of `x - y` per `block`-element block, next to the block's largest magnitude and its
/// range including zero (`max(hi, 0) - min(lo, 0)`, the span a K-quant with `min <= 0` covers).
fn block_rms(x: &[f32], y: &[f32], block: usize) -> Vec<(f64, f64, f64)> {
    x.chunks_exact(block)
        .zip(y.chunks_exact(block))
        .map(|(xb, yb)| {
            let se: f64 = xb
                .iter()
                .zip(yb)
                .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
                .sum();
            let (lo, hi) = xb
                .iter()
                .fold((0f32, 0f32), |(l, h), &v| (l.min(v), h.max(v)));
            let amax = lo.abs().max(hi.abs());
            (
                (se / block as f64).sqrt(),
                f64::from(amax),
                f64::from(hi - lo),
            )
        })
        .collect()
}

/// The same per-block RMS for a naive quantizer: per `sub`-element sub-block min/max
/// (asymmetric, min clamped to <= 0 as in K-quants) or absmax (symmetric) uniform codes with
/// exact f32 scales. A ggml-quality quantizer should at least match it.
fn naive_block_rms(x: &[f32], block: usize, sub: usize, levels: i32, symmetric: bool) -> Vec<f64> {
    let y: Vec<f32> = x
        .chunks_exact(sub)
        .flat_map(|xb| {
            let (lo, hi) = xb
                .iter()
                .fold((0f32, 0f32), |(l, h), &v| (l.min(v), h.max(v)));
            let amax = lo.abs().max(hi.abs());
            xb.iter().map(move |&v| {
                if symmetric {
                    let d = amax / (levels / 2) as f32;
                    let top = (levels / 2 - 1) as f32;
                    if d == 0.0 {
                        0.0
                    } else {
                        (v / d).round().clamp(-top - 1.0, top) * d
                    }
                } else {
                    let d = (hi - lo) / (levels - 1) as f32;
                    if d == 0.0 {
                        lo
                    } else {
                        ((v - lo) / d).round() * d + lo
                    }
                }
            })
        })
        .collect();
    block_rms(x, &y, block)
        .into_iter()
        .map(|(rms, _, _)| rms)
        .collect()
}

/// Q4_K bound. Let R = max(hi, 0) - min(lo, 0) be a super-block's range including zero (the
/// span Q4_K's `d * sc * q - dmin * m` with `m >= 0` must cover). An ideal 4-bit uniform
/// quantizer over R has step R/15 and RMS error step/sqrt(12) = R/52 on spread-out data. Q4_K
/// does better on sub-blocks narrower than R (each 32-weight sub-block gets its own scale and
/// min) and worse by up to about half a 6-bit step of the largest sub-scale where it rounds
/// sub-scales and mins to 6 bits. We require RMS <= R/30 for every super-block (measured worst:
/// about R/60), exact zeros for an all-zero block, and a summed per-block relative RMS no worse
/// than 1.1x a naive per-sub-block min/max quantizer with exact f32 scales (measured: ggml's
/// search is about 15% better than that baseline despite its 6-bit scales).
///
/// Block scales are kept >= 1 so the f16 super-scale `d = max_scale/63` is a normal f16; for
/// much smaller blocks `d` becomes subnormal and its absolute rounding (2^-25) dominates (see
/// `k_quants_on_tiny_blocks_stay_bounded`), in ggml too.
#[test]
fn q4_k_round_trip_is_ggml_quality() {
    let mut rng = Rng(0x0404);
    let x = weight_like(&mut rng, 256, 63, (0.0, 2.0));
    let q = quantize(GgmlType::Q4_K, &x).unwrap();
    assert_eq!(q.len(), 63 * 144);
    let y = dequantize(GgmlType::Q4_K, &q, x.len()).unwrap();
    let naive = naive_block_rms(&x, 256, 32, 16, false);
    let (mut ours_rel, mut naive_rel) = (0f64, 0f64);
    for (b, (rms, _, range)) in block_rms(&x, &y, 256).into_iter().enumerate() {
        assert!(rms <= range / 30.0, "block {b}: rms {rms} range {range}");
        if range == 0.0 {
            assert!(y[b * 256..(b + 1) * 256].iter().all(|&v| v == 0.0));
        } else {
            ours_rel += rms / range;
            naive_rel += naive[b] / range;
        }
    }
    assert!(
        ours_rel <= 1.1 * naive_rel,
        "Q4_K {ours_rel} vs naive {naive_rel}"
    );
}

/// Q6_K bound. Let A be a super-block's largest magnitude. Symmetric 6-bit codes (-32..31) over
/// a 16-weight sub-block with absmax A have step A/32 and RMS A/(32 sqrt(12)) = A/111 on
/// spread-out data; narrower sub-blocks do better, and the 8-bit sub-scales relative to the
/// largest add a little. We require RMS <= A/100 for every super-block (measured worst: about
/// A/125), exact zeros for an all-zero block, and a summed per-block relative RMS no worse than
/// 1.1x a naive per-sub-block absmax quantizer with exact f32 scales (measured: about 20% better).
/// Block scales are >= 1 so `d = A/4096`-ish stays a normal f16 (as for Q4_K above).
#[test]
fn q6_k_round_trip_is_ggml_quality() {
    let mut rng = Rng(0x0606);
    let x = weight_like(&mut rng, 256, 63, (0.0, 2.0));
    let q = quantize(GgmlType::Q6_K, &x).unwrap();
    assert_eq!(q.len(), 63 * 210);
    let y = dequantize(GgmlType::Q6_K, &q, x.len()).unwrap();
    let naive = naive_block_rms(&x, 256, 16, 64, true);
    let (mut ours_rel, mut naive_rel) = (0f64, 0f64);
    for (b, (rms, amax, _)) in block_rms(&x, &y, 256).into_iter().enumerate() {
        assert!(rms <= amax / 100.0, "block {b}: rms {rms} amax {amax}");
        if amax == 0.0 {
            assert!(y[b * 256..(b + 1) * 256].iter().all(|&v| v == 0.0));
        } else {
            ours_rel += rms / amax;
            naive_rel += naive[b] / amax;
        }
    }
    assert!(
        ours_rel <= 1.1 * naive_rel,
        "Q6_K {ours_rel} vs naive {naive_rel}"
    );
}

/// Blocks far below f16's normal range (values about 1e-9..1e-4): the f16 super-scales become
/// subnormal or zero, so relative accuracy is lost, in ggml too. Rounding `d` (and `dmin`) to
/// f16 there moves it by up to half the smallest subnormal step, 2^-25, and a decoded value
/// multiplies `d` by at most `sc * q` = 63 * 15 and `dmin` by at most 63 (Q4_K), or `d` by
/// 128 * 32 (Q6_K). We require finite output within `amax + floor` of the input, with that
/// floor = (largest multiplier) * 2^-25: never much worse than decoding the block as zeros.
#[test]
fn k_quants_on_tiny_blocks_stay_bounded() {
    let mut rng = Rng(0x7171);
    let x = weight_like(&mut rng, 256, 21, (-7.0, -2.0));
    let half_subnormal = f32::powi(2.0, -25);
    for (dtype, floor) in [
        (GgmlType::Q4_K, (63.0 * 15.0 + 63.0) * half_subnormal),
        (GgmlType::Q6_K, 128.0 * 32.0 * half_subnormal),
    ] {
        let y = dequantize(dtype, &quantize(dtype, &x).unwrap(), x.len()).unwrap();
        for (xb, yb) in x.chunks_exact(256).zip(y.chunks_exact(256)) {
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
            for (a, b) in xb.iter().zip(yb) {
                assert!(
                    b.is_finite() && (a - b).abs() <= amax + floor,
                    "{dtype}: {a} -> {b}"
                );
            }
        }
    }
}

/// TQ2_0 (and TQ1_0) reproduce exactly the ternarized values: `d16 * round(x * (1/d))` with
/// `d = max|x|` per block, rounding half away from zero.
#[test]
fn tq_round_trip_reproduces_the_ternarized_values() {
    let mut rng = Rng(0x7272);
    let x = weight_like(&mut rng, 256, 21, (-6.0, 3.0));
    for dtype in [GgmlType::TQ2_0, GgmlType::TQ1_0] {
        let y = dequantize(dtype, &quantize(dtype, &x).unwrap(), x.len()).unwrap();
        for (xb, yb) in x.chunks_exact(256).zip(y.chunks_exact(256)) {
            let d = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
            let id = if d == 0.0 { 0.0 } else { 1.0 / d };
            let d16 = f16_round(d);
            for (a, b) in xb.iter().zip(yb) {
                let t = (a * id).round();
                assert!(
                    same_f32(*b, d16 * t) || (*b == 0.0 && t == 0.0),
                    "{dtype}: {a} -> {b}"
                );
            }
        }
    }
}

/// I2_S reproduces exactly the ternarized values `s * clamp(round(w / s), -1, 1)` with
/// `s = mean|W|` over the whole tensor, and stores `s` at byte n/4.
#[test]
fn i2s_round_trip_reproduces_the_ternarized_values() {
    let mut rng = Rng(0x1253);
    let n = 128 * 37;
    let x: Vec<f32> = (0..n).map(|_| (rng.normal() * 0.02) as f32).collect();
    let q = quantize(GgmlType::I2_S, &x).unwrap();
    assert_eq!(q.len(), n / 4 + 32);
    let s = (x.iter().map(|v| f64::from(v.abs())).sum::<f64>() / n as f64) as f32;
    assert_eq!(i2s_weight_scale(&q, n).unwrap(), s);
    let y = dequantize(GgmlType::I2_S, &q, n).unwrap();
    let mut counts = [0usize; 3];
    for (a, b) in x.iter().zip(&y) {
        let t = (a / s).round_ties_even().clamp(-1.0, 1.0);
        counts[(t + 1.0) as usize] += 1;
        assert_eq!(*b, t * s, "{a}");
    }
    assert!(
        counts.iter().all(|&c| c > n / 10),
        "all three values used: {counts:?}"
    );
    // The independent decoder reads the same codes.
    let codes = decode_i2s_u32(&q, n);
    for (c, b) in codes.iter().zip(&y) {
        assert_eq!((f32::from(*c) - 1.0) * s, *b);
    }
}

#[test]
fn i2s_all_zero_tensor_has_zero_scale_and_zero_weights() {
    let x = vec![0f32; 256];
    let q = quantize(GgmlType::I2_S, &x).unwrap();
    assert_eq!(i2s_weight_scale(&q, 256).unwrap(), 0.0);
    assert!(q[..64].iter().all(|&b| b == 0b01_01_01_01));
    let y = dequantize(GgmlType::I2_S, &q, 256).unwrap();
    assert!(y.iter().all(|&v| v == 0.0));
}

// ---------------------------------------------------------------------------------------------
// I2_S from hand-built blocks (no upstream reference exists)

/// Tensor bytes for `codes` (one per weight, 0..=2) with `scale` at n/4 and `pad` after it,
/// written from facts.md: byte j of a block holds weights j, 32+j, 64+j, 96+j in bit pairs
/// [7:6], [5:4], [3:2], [1:0].
fn build_i2s(codes: &[u8], scale: f32, pad: u8) -> Vec<u8> {
    assert_eq!(codes.len() % 128, 0);
    let mut out = vec![0u8; codes.len() / 4];
    for (i, &c) in codes.iter().enumerate() {
        let (block, within) = (i / 128, i % 128);
        let (group, j) = (within / 32, within % 32);
        out[block * 32 + j] |= c << (6 - 2 * group);
    }
    out.extend_from_slice(&scale.to_le_bytes());
    out.extend_from_slice(&[pad; 28]);
    out
}

/// The seed document's decoder: little-endian u32 words,
/// `u32_idx = block*8 + gp/4; shift = (gp%4)*8 + (6 - 2*group); code = (w >> shift) & 3`.
fn decode_i2s_u32(data: &[u8], n: usize) -> Vec<u8> {
    let words: Vec<u32> = data[..n / 4]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (0..n)
        .map(|i| {
            let (block, within) = (i / 128, i % 128);
            let (group, gp) = (within / 32, within % 32);
            let word = words[block * 8 + gp / 4];
            let shift = (gp % 4) * 8 + (6 - 2 * group);
            ((word >> shift) & 3) as u8
        })
        .collect()
}

#[test]
fn i2s_literal_block() {
    // Byte 0 = 0b10_01_00_10: weight 0 -> +1, 32 -> 0, 64 -> -1, 96 -> +1.
    // Byte 31 = 0b00_10_01_00: weight 31 -> -1, 63 -> +1, 95 -> 0, 127 -> -1.
    // Every other byte 0b01_01_01_01 (all zero weights).
    let mut data = vec![0x55u8; 32];
    data[0] = 0b10_01_00_10;
    data[31] = 0b00_10_01_00;
    data.extend_from_slice(&2.5f32.to_le_bytes());
    data.extend_from_slice(&[0u8; 28]);
    let y = dequantize(GgmlType::I2_S, &data, 128).unwrap();
    let mut want = [0f32; 128];
    for (i, v) in [
        (0, 2.5),
        (64, -2.5),
        (96, 2.5),
        (31, -2.5),
        (63, 2.5),
        (127, -2.5),
    ] {
        want[i] = v;
    }
    assert_eq!(y, want);
}

#[test]
fn i2s_every_bit_position_and_code() {
    let scale = 0.375f32;
    for i in 0..128 {
        for code in 0..3u8 {
            let mut codes = [1u8; 128];
            codes[i] = code;
            let data = build_i2s(&codes, scale, 0);
            let y = dequantize(GgmlType::I2_S, &data, 128).unwrap();
            for (k, &v) in y.iter().enumerate() {
                let want = if k == i { f32::from(code) - 1.0 } else { 0.0 } * scale;
                assert_eq!(v, want, "weight {i} code {code}: element {k}");
            }
            assert_eq!(decode_i2s_u32(&data, 128), codes);
        }
    }
}

#[test]
fn i2s_code_3_is_an_error_at_its_position() {
    for i in [0usize, 31, 32, 95, 127, 128 + 64, 3 * 128 - 1] {
        let mut data = build_i2s(&[1u8; 384], 1.0, 0);
        let (block, within) = (i / 128, i % 128);
        data[block * 32 + within % 32] |= 3 << (6 - 2 * (within / 32));
        match dequantize(GgmlType::I2_S, &data, 384) {
            Err(QuantError::InvalidCode {
                dtype: GgmlType::I2_S,
                index,
                code: 3,
            }) => assert_eq!(index, i as u64),
            other => panic!("weight {i}: {other:?}"),
        }
    }
}

#[test]
fn i2s_multi_block_tensor_and_scale_position() {
    let mut rng = Rng(0x0036);
    let n = 128 * 5;
    let codes: Vec<u8> = (0..n).map(|_| (rng.next_u64() % 3) as u8).collect();
    // Trailing bytes after the scale are ignored, whatever they hold.
    let data = build_i2s(&codes, -0.8125, 0xee);
    assert_eq!(data.len(), n / 4 + 32);
    assert_eq!(i2s_weight_scale(&data, n).unwrap(), -0.8125);
    let y = dequantize(GgmlType::I2_S, &data, n).unwrap();
    let independent = decode_i2s_u32(&data, n);
    assert_eq!(independent, codes);
    for ((&c, &v), i) in independent.iter().zip(&y).zip(0..) {
        assert_eq!(v, (f32::from(c) - 1.0) * -0.8125, "weight {i}");
    }
}

#[test]
fn i2s_decoders_agree_on_random_data() {
    let mut rng = Rng(0x2525);
    for blocks in [1usize, 2, 7, 33] {
        let n = 128 * blocks;
        let mut data: Vec<u8> = (0..n / 4 + 32).map(|_| rng.next_u64() as u8).collect();
        // Clear code 3s (invalid) by turning them into 2s.
        for b in &mut data[..n / 4] {
            for shift in [0, 2, 4, 6] {
                if (*b >> shift) & 3 == 3 {
                    *b &= !(1 << shift);
                }
            }
        }
        let scale = 0.0625f32;
        data[n / 4..n / 4 + 4].copy_from_slice(&scale.to_le_bytes());
        let y = dequantize(GgmlType::I2_S, &data, n).unwrap();
        for (c, v) in decode_i2s_u32(&data, n).iter().zip(&y) {
            assert_eq!((f32::from(*c) - 1.0) * scale, *v);
        }
    }
}

#[test]
fn i2s_size_errors() {
    let data = build_i2s(&[1u8; 256], 1.0, 0);
    assert!(matches!(
        i2s_weight_scale(&data, 128),
        Err(QuantError::SizeMismatch { .. })
    ));
    assert!(matches!(
        dequantize(GgmlType::I2_S, &data[..data.len() - 1], 256),
        Err(QuantError::SizeMismatch { .. })
    ));
    assert!(matches!(
        dequantize(GgmlType::I2_S, &data, 200),
        Err(QuantError::PartialBlock { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Untrusted input

#[test]
fn arbitrary_bytes_and_sizes_never_panic() {
    let mut rng = Rng(0xbad);
    for t in GgmlType::ALL {
        for _ in 0..40 {
            let n = [0usize, 1, 32, 64, 128, 256, 512, 1000][(rng.next_u64() % 8) as usize];
            let exact = t.tensor_bytes(n as u64).map(|b| b as usize);
            let len = match (rng.next_u64() % 3, exact) {
                (0, Some(b)) => b,
                (1, Some(b)) => b.saturating_sub(1 + (rng.next_u64() % 3) as usize),
                _ => (rng.next_u64() % 700) as usize,
            };
            let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            match dequantize(t, &data, n) {
                Ok(y) => {
                    assert!(t.can_dequantize() && Some(len) == exact, "{t}");
                    assert_eq!(y.len(), n);
                }
                Err(QuantError::Unsupported(u)) => assert!(!t.can_dequantize() && u == t),
                Err(QuantError::SizeMismatch { expected, got, .. }) => {
                    assert_eq!((Some(expected as usize), got as usize), (exact, len));
                    assert_ne!(expected as usize, len);
                }
                Err(QuantError::PartialBlock { .. }) => assert_eq!(exact, None, "{t}"),
                Err(QuantError::InvalidCode { .. }) => assert_eq!(t, GgmlType::I2_S),
                Err(e) => panic!("{t}: unexpected {e}"),
            }
        }
    }
}

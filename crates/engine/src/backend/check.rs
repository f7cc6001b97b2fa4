//! The backend self-test: every op of the pass vocabulary on a backend against the CPU
//! reference ([`super::cpu::CpuBackend`]) running the very same passes, on seeded random inputs
//! (`tritium selftest --backend cuda`). Each check states its bound on the difference of the
//! two backends' results; a NaN, an infinity or an unwritten value fails.
//!
//! Bounds, each the sum of the two backends' worst errors (the CPU's own error is part of the
//! difference):
//! - products on f32 or f16 operands: `2 * cols * eps * sum |w| |x|` (any order of the f32
//!   sums of the same rounded operands), scaled as the op scales;
//! - products on int8 activations: `2 * (cols + 2) * eps * magnitude`, the magnitude of
//!   [`crate::quant::q8dot::vec_dot_q8`] (the same integer sums, f32 group terms);
//! - BitLinear over I2_S, embeddings, copies, the residual add and top-k: equal (the same
//!   exact integers, decodes and f32 operations);
//! - RMSNorm, RoPE and the activation functions, f64 on both: one f32 ulp of the result;
//! - attention: the bound of the wgpu self-test (`crates/gpu/src/selftest/attention.rs`) with
//!   the cache's rounding the same on both sides (u = 0), its cooperative-matrix terms for
//!   prefills over an f16 cache (f16 q and p on tensor cores).

use std::future::Future;

use super::cpu::CpuBackend;
use super::{Backend, Batch, KvShape, KvType, Logits, Op, Pass, Readback, Span, Tensor, Tokens};
use super::{Weight, WeightData};
use crate::ops::{AttentionScores, Elementwise, Llama3Scaling, RopeConfig, RopeStyle};
use crate::pass::Activations;
use crate::quant::{self, GgmlType};
use crate::Error;

const EPS: f64 = f32::EPSILON as f64;
/// What output buffers hold before a pass writes them (both backends load it): a value the
/// backend under test leaves unwritten differs from the reference's.
const POISON: f32 = -7777.25;

/// The outcome of one check.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OpCheck {
    pub name: String,
    pub passed: bool,
    /// Values compared.
    pub values: usize,
    /// The largest `|difference| / bound` (0 where every value was equal).
    pub worst: f64,
    pub error: Option<String>,
}

/// Seeded xorshift numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [-1, 1).
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32() * scale).collect()
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A weight of a check, in its file format.
struct WeightSpec {
    dtype: GgmlType,
    rows: usize,
    cols: usize,
    bytes: Vec<u8>,
    scale: Option<f32>,
}

impl WeightSpec {
    /// Random tame data of `dtype`, with I2_S's trailing scale.
    fn random(rng: &mut Rng, dtype: GgmlType, rows: usize, cols: usize) -> WeightSpec {
        let row_bytes = dtype.row_bytes(cols as u64).expect("whole blocks") as usize;
        let mut bytes = rng.bytes(row_bytes * rows);
        quant::tame(dtype, &mut bytes);
        if dtype == GgmlType::I2_S {
            // Codes 0..=2 (tame leaves only 0 and 1), then the f32 scale and its padding.
            for b in bytes.iter_mut() {
                let mut v = 0;
                for g in 0..4 {
                    v |= ((rng.next() % 3) as u8) << (2 * g);
                }
                *b = v;
            }
            bytes.extend(0.75f32.to_le_bytes());
            bytes.extend([0u8; 28]);
        }
        WeightSpec {
            dtype,
            rows,
            cols,
            bytes,
            scale: matches!(dtype, GgmlType::TQ1_0 | GgmlType::TQ2_0).then_some(0.5),
        }
    }

    /// The weight's values (its own scale and the separate one applied).
    fn values(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        let row_bytes = self.dtype.row_bytes(self.cols as u64).unwrap() as usize;
        quant::dequantize_rows(self.dtype, &self.bytes[..row_bytes * self.rows], &mut out)
            .expect("tame data");
        let own = quant::tensor_scale(self.dtype, &self.bytes, self.rows * self.cols)
            .ok()
            .flatten()
            .unwrap_or(1.0);
        let s = own * self.scale.unwrap_or(1.0);
        out.iter_mut().for_each(|v| *v *= s);
        out
    }
}

/// What a check loads before its passes.
#[derive(Default)]
struct Setup {
    weights: Vec<WeightSpec>,
    vectors: Vec<Vec<f32>>,
    cache: Option<(KvShape, Vec<RopeConfig>)>,
}

/// The handles a backend gave out for a [`Setup`], in its order.
struct Handles {
    w: Vec<Weight>,
    t: Vec<Tensor>,
}

/// One pass to run: its ops (given the handles), batch and token ids.
type PassFn<'a> = &'a dyn Fn(&Handles) -> Vec<(Pass, Batch, Vec<u32>)>;

/// Load `setup` on `b`, run the passes in order, and return what each read back.
async fn execute<B: Backend>(
    b: &mut B,
    setup: &Setup,
    passes: PassFn<'_>,
) -> Result<Vec<Logits>, Error> {
    let mut h = Handles {
        w: Vec::new(),
        t: Vec::new(),
    };
    for (i, w) in setup.weights.iter().enumerate() {
        h.w.push(b.load_weight(WeightData {
            name: &format!("w{i}"),
            dtype: w.dtype,
            rows: w.rows,
            cols: w.cols,
            bytes: &w.bytes,
            scale: w.scale,
            layer: None,
            location: None,
        })?);
    }
    for (i, v) in setup.vectors.iter().enumerate() {
        h.t.push(b.load_vector(&format!("t{i}"), v)?);
    }
    if let Some((kv, rope)) = &setup.cache {
        b.init_cache(*kv, rope)?;
    }
    let mut out = Vec::new();
    for (pass, batch, ids) in passes(&h) {
        let plan = b.plan(&pass)?;
        let rec = b.record(&plan, &batch)?;
        let pending = b.submit(rec, Tokens::Ids(&ids))?;
        out.push(b.wait(pending).await?);
    }
    Ok(out)
}

/// A pass of `ops` over `n` tokens of sequence 0 from position 0 that reads `out` back.
fn reading(mut ops: Vec<Op>, n: usize, out: Tensor, len: usize) -> (Pass, Batch, Vec<u32>) {
    ops.push(Op::Read {
        logits: out,
        rows: 1,
        vocab: len,
        what: Readback::All,
    });
    (Pass { tokens: n, ops }, Batch::one(0, n), vec![0; n])
}

fn full(l: &Logits) -> Result<&[f32], String> {
    match l {
        Logits::Full(v) => Ok(v),
        _ => Err("no values read back".into()),
    }
}

/// Compare with per-value bounds; the worst `|got - want| / bound` (0 for equal values).
fn compare(got: &[f32], want: &[f32], bound: &[f64]) -> Result<(usize, f64), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{} values, the reference has {}",
            got.len(),
            want.len()
        ));
    }
    let mut worst = 0f64;
    for (i, ((&g, &w), &b)) in got.iter().zip(want).zip(bound).enumerate() {
        if !g.is_finite() && g.to_bits() != w.to_bits() {
            return Err(format!("value {i}: {g} where the reference has {w}"));
        }
        let d = (f64::from(g) - f64::from(w)).abs();
        if d == 0.0 {
            continue;
        }
        if d > b {
            return Err(format!(
                "value {i}: {g} where the reference has {w} (difference {d:.3e}, bound {b:.3e})"
            ));
        }
        worst = worst.max(d / b);
    }
    Ok((got.len(), worst))
}

/// Run a check's passes on `b` and on the CPU, and compare the last readback of each pass
/// with `bound(cpu_values, pass_index)`.
async fn against_cpu<B, F, Fut>(
    make: &mut F,
    setup: &Setup,
    passes: PassFn<'_>,
    bound: &dyn Fn(&[f32], usize) -> Vec<f64>,
) -> Result<(usize, f64), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let mut b = make().await.map_err(|e| e.to_string())?;
    let got = execute(&mut b, setup, passes)
        .await
        .map_err(|e| e.to_string())?;
    let mut cpu = CpuBackend::new(b.limits().max_batch);
    cpu.set_arithmetic(b.limits().arithmetic);
    let want = execute(&mut cpu, setup, passes)
        .await
        .map_err(|e| format!("the CPU reference: {e}"))?;
    compare_passes(&got, &want, bound)
}

/// Compare each pass's readback with the reference's under `bound(reference, pass)`.
fn compare_passes(
    got: &[Logits],
    want: &[Logits],
    bound: &dyn Fn(&[f32], usize) -> Vec<f64>,
) -> Result<(usize, f64), String> {
    let (mut n, mut worst) = (0, 0f64);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (full(g)?, full(w)?);
        let (k, r) = compare(g, w, &bound(w, i)).map_err(|e| format!("pass {i}: {e}"))?;
        n += k;
        worst = worst.max(r);
    }
    Ok((n, worst))
}

/// The formats the checks cover.
pub const FORMATS: [GgmlType; 15] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::I2_S,
    GgmlType::IQ4_NL,
];

/// Run every check whose name starts with `prefix` on backends made by `make` (a fresh one
/// per check: each loads its own weights and cache).
pub async fn run<B, F, Fut>(mut make: F, prefix: &str) -> Vec<OpCheck>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let mut out = Vec::new();
    let mut record = |name: String, r: Result<(usize, f64), String>| {
        let (values, worst) = *r.as_ref().unwrap_or(&(0, 0.0));
        out.push(OpCheck {
            name,
            passed: r.is_ok(),
            values,
            worst,
            error: r.err(),
        });
    };
    let want = |name: &str| name.starts_with(prefix);
    for dtype in FORMATS {
        let d = dtype.name().to_lowercase();
        for tokens in [1usize, 3, 12] {
            for act in [Activations::F32, Activations::Q8, Activations::F16] {
                if act == Activations::Q8 && !quant::q8dot::has_q8_dot(dtype) {
                    continue;
                }
                let name = format!("matmul/{d}/{}{}", tokens, act_name(act));
                if want(&name) {
                    record(name, matmul(&mut make, dtype, tokens, act).await);
                }
            }
        }
        let name = format!("embed/{d}");
        if want(&name) {
            record(name, embed(&mut make, dtype).await);
        }
        if quant::bitlinear_input(dtype).is_some() {
            for tokens in [1usize, 11] {
                let name = format!("bitlinear/{d}/{tokens}");
                if want(&name) {
                    record(name, bitlinear(&mut make, dtype, tokens).await);
                }
            }
        }
    }
    if want("rms_norm") {
        record("rms_norm".into(), rms_norm(&mut make).await);
    }
    for (name, bitnet) in [("fusions/llama", false), ("fusions/bitnet", true)] {
        for tokens in [1usize, 3] {
            let name = format!("{name}/{tokens}");
            if want(&name) {
                record(name, fusions(&mut make, bitnet, tokens).await);
            }
        }
    }
    for (style, rot, llama3, linear) in [
        (RopeStyle::Interleaved, 64, false, false),
        (RopeStyle::NeoX, 64, false, false),
        (RopeStyle::NeoX, 32, false, false),
        (RopeStyle::Interleaved, 64, true, false),
        (RopeStyle::NeoX, 64, false, true),
    ] {
        let name = format!(
            "rope/{}/{rot}{}{}",
            if style == RopeStyle::NeoX {
                "neox"
            } else {
                "interleaved"
            },
            if llama3 { "/llama3" } else { "" },
            if linear { "/second-table-linear" } else { "" }
        );
        if want(&name) {
            record(name, rope(&mut make, style, rot, llama3, linear).await);
        }
    }
    for kv in [KvType::F32, KvType::F16] {
        for (heads, kv_heads, dim) in [
            (8usize, 2usize, 64usize),
            (10, 2, 96),
            (6, 6, 128),
            (4, 1, 256),
        ] {
            let name = format!(
                "attention/{}/{heads}x{kv_heads}x{dim}",
                if kv == KvType::F16 { "f16" } else { "f32" }
            );
            if want(&name) {
                let plain = AttentionScores::default();
                record(
                    name,
                    attention(&mut make, kv, heads, kv_heads, dim, plain).await,
                );
            }
        }
        // Windows of 1 and 100 keys and a soft cap of 4 (scores reach about 13 here).
        for (window, softcap) in [(100usize, 0.0f32), (1, 0.0), (0, 4.0), (100, 4.0)] {
            let name = format!(
                "attention/{}/8x2x64/window-{window}-cap-{softcap}",
                if kv == KvType::F16 { "f16" } else { "f32" }
            );
            if want(&name) {
                let scores = AttentionScores { window, softcap };
                record(name, attention(&mut make, kv, 8, 2, 64, scores).await);
            }
        }
    }
    for f in [
        Elementwise::Add,
        Elementwise::SiluMul,
        Elementwise::ReluSquared,
        Elementwise::ReluSquaredMul,
        Elementwise::GeluMul,
    ] {
        let name = format!("elementwise/{}", f.name());
        if want(&name) {
            record(name, elementwise(&mut make, f).await);
        }
    }
    if want("softcap") {
        record("softcap".into(), softcap(&mut make).await);
    }
    if want("add_bias") {
        record("add_bias".into(), by_columns(&mut make, false).await);
    }
    if want("scale_columns") {
        record("scale_columns".into(), by_columns(&mut make, true).await);
    }
    if want("copy_row") {
        record("copy_row".into(), copy_row(&mut make).await);
    }
    for k in [1usize, 5, 64, 100] {
        let name = format!("topk/{k}");
        if want(&name) {
            record(name, topk(&mut make, k).await);
        }
    }
    out
}

fn act_name(a: Activations) -> &'static str {
    match a {
        Activations::F32 => "",
        Activations::Q8 => "/q8",
        Activations::F16 => "/f16",
    }
}

async fn matmul<B, F, Fut>(
    make: &mut F,
    dtype: GgmlType,
    tokens: usize,
    act: Activations,
) -> Result<(usize, f64), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let mut rng = Rng(0x9e37_79b9 ^ dtype as u64 ^ (tokens as u64) << 8);
    let (rows, cols) = (67, 512);
    let w = WeightSpec::random(&mut rng, dtype, rows, cols);
    let x = rng.vec(tokens * cols, 2.0);
    let wv = w.values();
    // sum |w| |x| per output, and for int8 activations the integer-dot magnitude.
    let mut mag = vec![0f64; tokens * rows];
    let row_bytes = dtype.row_bytes(cols as u64).unwrap() as usize;
    for t in 0..tokens {
        let xs = &x[t * cols..][..cols];
        let record = (act == Activations::Q8).then(|| quant::q8dot::quantize_q8(xs).unwrap());
        for r in 0..rows {
            mag[t * rows + r] = match &record {
                Some(rec) => {
                    let (_, m) = quant::q8dot::vec_dot_q8(
                        dtype,
                        &w.bytes[r * row_bytes..][..row_bytes],
                        rec,
                    )
                    .unwrap();
                    m * f64::from(w.scale.unwrap_or(1.0)).abs() * (cols as f64 + 2.0)
                }
                None => {
                    let s: f64 = wv[r * cols..][..cols]
                        .iter()
                        .zip(xs)
                        .map(|(&a, &b)| f64::from(a).abs() * f64::from(b).abs())
                        .sum();
                    // f16 operands: each rounded by at most 2^-11 of itself.
                    let widen = if act == Activations::F16 {
                        1.0 + 2f64.powi(-10)
                    } else {
                        1.0
                    };
                    s * cols as f64 * widen
                }
            };
        }
    }
    let setup = Setup {
        weights: vec![w],
        vectors: vec![x, vec![POISON; tokens * rows]],
        cache: None,
    };
    let passes = move |h: &Handles| {
        vec![reading(
            vec![Op::MatMul {
                w: h.w[0],
                x: h.t[0],
                out: h.t[1],
                rows: tokens,
                act,
            }],
            tokens,
            h.t[1],
            tokens * rows,
        )]
    };
    against_cpu(make, &setup, &passes, &|_, _| {
        mag.iter()
            .map(|m| 2.0 * EPS * m + f64::MIN_POSITIVE)
            .collect()
    })
    .await
}

async fn embed<B, F, Fut>(make: &mut F, dtype: GgmlType) -> Result<(usize, f64), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let mut rng = Rng(0x1234 ^ dtype as u64);
    let (rows, cols) = (50, 256);
    let w = WeightSpec::random(&mut rng, dtype, rows, cols);
    let ids = vec![3u32, 49, 0, 3, 17];
    let n = ids.len();
    let setup = Setup {
        weights: vec![w],
        vectors: vec![vec![POISON; n * cols]],
        cache: None,
    };
    let passes = move |h: &Handles| {
        let (p, b, _) = reading(
            vec![Op::Embed {
                table: h.w[0],
                out: h.t[0],
            }],
            n,
            h.t[0],
            n * cols,
        );
        vec![(p, b, ids.clone())]
    };
    against_cpu(make, &setup, &passes, &|w, _| vec![0.0; w.len()]).await
}

async fn bitlinear<B, F, Fut>(
    make: &mut F,
    dtype: GgmlType,
    tokens: usize,
) -> Result<(usize, f64), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let mut rng = Rng(0x51f1 ^ dtype as u64 ^ (tokens as u64) << 8);
    let (rows, cols) = (45, 512);
    let w = WeightSpec::random(&mut rng, dtype, rows, cols);
    let x = rng.vec(tokens * cols, 3.0);
    let wv = w.values();
    let (xq, s) = crate::cpu::bitlinear::quantize_activations(&x, cols);
    // I2_S: exact integer sums, the same two f32 operations after: equal. The others: block
    // scales make the terms non-integers, summed in any order.
    let exact = dtype == GgmlType::I2_S;
    let mut bound = vec![0f64; tokens * rows];
    for t in 0..tokens {
        for r in 0..rows {
            let m: f64 = wv[r * cols..][..cols]
                .iter()
                .zip(&xq[t * cols..][..cols])
                .map(|(&a, &b)| f64::from(a).abs() * f64::from(b).abs())
                .sum();
            bound[t * rows + r] = if exact {
                0.0
            } else {
                2.0 * EPS * cols as f64 * m / f64::from(s[t]) + f64::MIN_POSITIVE
            };
        }
    }
    let setup = Setup {
        weights: vec![w],
        vectors: vec![x, vec![POISON; tokens * rows]],
        cache: None,
    };
    let passes = move |h: &Handles| {
        vec![reading(
            vec![Op::BitLinear {
                w: h.w[0],
                x: h.t[0],
                out: h.t[1],
                rows: tokens,
            }],
            tokens,
            h.t[1],
            tokens * rows,
        )]
    };
    against_cpu(make, &setup, &passes, &|_, _| bound.clone()).await
}

/// One f32 ulp of each reference value (and the smallest normal for zeros).
fn one_ulp(w: &[f32]) -> Vec<f64> {
    w.iter()
        .map(|&v| f64::from(v).abs() * EPS + f64::from(f32::MIN_POSITIVE))
        .collect()
}

async fn rms_norm<B, F, Fut>(make: &mut F) -> Result<(usize, f64), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let mut rng = Rng(77);
    let (rows, dim) = (5, 2048 + 96);
    let setup = Setup {
        weights: vec![],
        vectors: vec![
            rng.vec(rows * dim, 4.0),
            rng.vec(dim, 1.5),
            vec![POISON; rows * dim],
        ],
        cache: None,
    };
    let passes = move |h: &Handles| {
        vec![reading(
            vec![Op::RmsNorm {
                x: h.t[0],
                weight: h.t[1],
                out: h.t[2],
                rows,
                dim,
                eps: 1e-5,
            }],
            rows,
            h.t[2],
            rows * dim,
        )]
    };
    against_cpu(make, &setup, &passes, &|w, _| one_ulp(w)).await
}

/// A layer's worth of ops in the order a model writes them (residual add, norm, Q/K/V
/// products, RoPE of q and k, attention and its output's product, norm, gate and up, the
/// activation, down), run with the backend's fusions and
/// without: every output must be equal bit for bit (a fusion computes each step as the op's
/// own kernel does; the unfused ops are checked against the CPU by the other checks).
async fn fusions<B, F, Fut>(
    make: &mut F,
    bitnet: bool,
    tokens: usize,
) -> Result<(usize, f64), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let mut rng = Rng(0xf05e ^ tokens as u64 ^ u64::from(bitnet) << 9);
    let (dim, kv, ff) = (512, 128, 1024);
    let (wt, act) = match bitnet {
        true => (GgmlType::I2_S, Activations::Q8),
        false => (GgmlType::Q4_K, Activations::Q8),
    };
    let shapes = [
        (dim, dim),
        (kv, dim),
        (kv, dim),
        (ff, dim),
        (ff, dim),
        (dim, ff),
        (dim, dim),
    ];
    let setup = Setup {
        weights: shapes
            .iter()
            .map(|&(r, c)| WeightSpec::random(&mut rng, wt, r, c))
            .collect(),
        // x, y, two norm weights, outputs xb, q, k, v, xb2, hb, hb2, attention's, BitNet's
        // sub-norm weight and output, then the attention output's product.
        vectors: vec![
            rng.vec(tokens * dim, 2.0),
            rng.vec(tokens * dim, 1.0),
            rng.vec(dim, 1.5),
            rng.vec(dim, 1.5),
            vec![POISON; tokens * dim],
            vec![POISON; tokens * dim],
            vec![POISON; tokens * kv],
            vec![POISON; tokens * kv],
            vec![POISON; tokens * dim],
            vec![POISON; tokens * ff],
            vec![POISON; tokens * ff],
            vec![POISON; tokens * dim],
            rng.vec(ff, 1.5),
            vec![POISON; tokens * ff],
            vec![POISON; tokens * dim],
        ],
        cache: cache(
            1,
            kv / 64,
            64,
            KvType::F32,
            RopeConfig::new(64, 10000.0, RopeStyle::NeoX),
        ),
    };
    let passes = move |h: &Handles| {
        let t = &h.t;
        let product = |w: usize, x: Tensor, out: Tensor, rows: usize| match bitnet {
            true => Op::BitLinear {
                w: h.w[w],
                x,
                out,
                rows,
            },
            false => Op::MatMul {
                w: h.w[w],
                x,
                out,
                rows,
                act,
            },
        };
        let norm = |weight: Tensor| Op::RmsNorm {
            x: t[0],
            weight,
            out: t[4],
            rows: tokens,
            dim,
            eps: 1e-5,
        };
        let mut ops = vec![
            Op::Elementwise {
                f: Elementwise::Add,
                out: t[0],
                first: None,
                second: Some(t[1]),
                len: tokens * dim,
            },
            norm(t[2]),
            product(0, t[4], t[5], tokens),
            product(1, t[4], t[6], tokens),
            product(2, t[4], t[7], tokens),
            Op::Rope {
                x: t[5],
                heads: dim / 64,
                table: 0,
            },
            Op::Rope {
                x: t[6],
                heads: kv / 64,
                table: 0,
            },
            Op::Attention {
                layer: 0,
                q: t[5],
                k: t[6],
                v: t[7],
                out: t[11],
                heads: dim / 64,
                scores: Default::default(),
            },
            product(6, t[11], t[14], tokens),
            norm(t[3]),
            product(3, t[4], t[9], tokens),
            product(4, t[4], t[10], tokens),
            Op::Elementwise {
                f: if bitnet {
                    Elementwise::ReluSquaredMul
                } else {
                    Elementwise::SiluMul
                },
                out: t[9],
                first: None,
                second: Some(t[10]),
                len: tokens * ff,
            },
        ];
        let down_input = if bitnet {
            // BitNet's sub-norm before down.
            ops.push(Op::RmsNorm {
                x: t[9],
                weight: t[12],
                out: t[13],
                rows: tokens,
                dim: ff,
                eps: 1e-5,
            });
            t[13]
        } else {
            t[9]
        };
        ops.push(product(5, down_input, t[8], tokens));
        // One pass per output read back (each pass runs the whole layer again: x keeps
        // growing by y, the same on both sides).
        [
            (t[0], dim),
            (t[4], dim),
            (t[5], dim),
            (t[6], kv),
            (t[7], kv),
            (t[11], dim),
            (t[14], dim),
            (t[9], ff),
            (t[8], dim),
        ]
        .into_iter()
        .map(|(out, width)| reading(ops.clone(), tokens, out, tokens * width))
        .collect()
    };
    let mut fused = make().await.map_err(|e| e.to_string())?;
    let got = execute(&mut fused, &setup, &passes)
        .await
        .map_err(|e| e.to_string())?;
    let mut plain = make().await.map_err(|e| e.to_string())?;
    plain.set_fusions(false);
    let want = execute(&mut plain, &setup, &passes)
        .await
        .map_err(|e| format!("without fusions: {e}"))?;
    compare_passes(&got, &want, &|w, _| vec![0.0; w.len()])
}

fn cache(
    layers: usize,
    heads: usize,
    dim: usize,
    dtype: KvType,
    rope: RopeConfig,
) -> Option<(KvShape, Vec<RopeConfig>)> {
    Some((
        KvShape {
            n_layers: layers,
            max_ctx: 600,
            n_kv_heads: heads,
            head_dim: dim,
            n_seqs: 2,
            dtype,
        },
        vec![rope],
    ))
}

/// RoPE of one configuration; with `linear`, by the second of two tables (the first plain,
/// the second with Gemma 3's global layers' linear scaling, positions divided by 8), so that a
/// backend that rotates by the wrong table fails.
async fn rope<B, F, Fut>(
    make: &mut F,
    style: RopeStyle,
    rot: usize,
    llama3: bool,
    linear: bool,
) -> Result<(usize, f64), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let mut rng = Rng(99);
    let (heads, dim, n) = (3, 64, 6);
    let mut cfg = RopeConfig::new(dim, 500000.0, style);
    cfg.rot_dim = rot;
    if llama3 {
        cfg.llama3 = Some(Llama3Scaling {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        });
    }
    let mut cache = cache(1, heads, dim, KvType::F32, cfg.clone());
    let table = match linear {
        true => {
            if let Some((_, tables)) = &mut cache {
                tables.insert(0, RopeConfig::new(dim, 10000.0, style));
                tables[1].freq_scale = 0.125;
            }
            1
        }
        false => 0,
    };
    let setup = Setup {
        weights: vec![],
        vectors: vec![rng.vec(n * heads * dim, 3.0)],
        cache,
    };
    // Positions 590.. of sequence 1: large angles.
    let passes = move |h: &Handles| {
        let mut p = reading(
            vec![Op::Rope {
                x: h.t[0],
                heads,
                table,
            }],
            n,
            h.t[0],
            n * heads * dim,
        );
        p.1 = Batch {
            spans: vec![Span {
                seq: 1,
                pos0: 590,
                len: n,
            }],
        };
        vec![p]
    };
    against_cpu(make, &setup, &passes, &|w, _| one_ulp(w)).await
}

async fn attention<B, F, Fut>(
    make: &mut F,
    kv: KvType,
    heads: usize,
    kv_heads: usize,
    dim: usize,
    scores: AttentionScores,
) -> Result<(usize, f64), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let mut rng = Rng(0xa77 ^ (heads * 1000 + dim) as u64);
    // A prefill of 300 tokens (longer than one split), then one-token decodes of two
    // sequences in one pass.
    let n0 = 300;
    let (q_row, kv_row) = (heads * dim, kv_heads * dim);
    let setup = Setup {
        weights: vec![],
        vectors: vec![
            rng.vec(n0 * q_row, 1.5),
            rng.vec(n0 * kv_row, 1.5),
            rng.vec(n0 * kv_row, 2.0),
            vec![POISON; n0 * q_row],
        ],
        cache: cache(
            2,
            kv_heads,
            dim,
            kv,
            RopeConfig::new(dim, 10000.0, RopeStyle::NeoX),
        ),
    };
    let passes = move |h: &Handles| {
        let att = |layer| Op::Attention {
            layer,
            q: h.t[0],
            k: h.t[1],
            v: h.t[2],
            out: h.t[3],
            heads,
            scores,
        };
        let prefill = reading(vec![att(1)], n0, h.t[3], n0 * q_row);
        let mut second = reading(vec![att(1)], 40, h.t[3], 40 * q_row);
        second.1 = Batch {
            spans: vec![Span {
                seq: 1,
                pos0: 0,
                len: 40,
            }],
        };
        let mut decode = reading(vec![att(1)], 2, h.t[3], 2 * q_row);
        decode.1 = Batch {
            spans: vec![
                Span {
                    seq: 0,
                    pos0: n0,
                    len: 1,
                },
                Span {
                    seq: 1,
                    pos0: 40,
                    len: 1,
                },
            ],
        };
        vec![prefill, second, decode]
    };
    // The bound of the module docs, from the reference outputs: A <= max |v| per output
    // (softmax weights sum to 1), c <= scale * |q| |k| over the inputs' magnitudes.
    let (qmax, kmax, vmax) = (1.5f64, 1.5f64, 2.0f64);
    let c = qmax * kmax * dim as f64 / (dim as f64).sqrt();
    // A soft cap leaves score errors as they are (its slope is at most 1) and scores at most
    // the cap in size; tanh adds 16 eps of the cap to each.
    let cap = f64::from(scores.softcap);
    let (c_exp, tanh_err) = match cap > 0.0 {
        true => (c.min(cap), cap * 16.0 * EPS),
        false => (c, 0.0),
    };
    // Prefills over an f16 cache may run on tensor cores (the wgpu self-test's cooperative
    // bound): the pre-scaled q rounded to f16 (2^-11 relative, 2^-25 absolute below f16's
    // normal range), sums that may truncate (their eps twice), and each p rounded to f16 where
    // it multiplies V (2^-11 of A, 2^-25 max|v| per key absolute).
    let bound = move |w: &[f32], pass: usize| {
        let keys = [n0, 40, n0 + 1][pass];
        let keys = match scores.window {
            0 => keys,
            w => keys.min(w),
        } as f64;
        let coop = kv == KvType::F16 && pass < 2;
        let (u_q, sum_eps, tiny) = match coop {
            true => (2f64.powi(-11), 2.0, 2f64.powi(-25)),
            false => (0.0, 1.0, 0.0),
        };
        let ds =
            c * (u_q + sum_eps * (dim as f64 + 2.0) * EPS) + dim as f64 * tiny * kmax + tanh_err;
        let rel = (2.0 * ds).exp_m1() + u_q + (3.0 + 6.0 * c_exp + 2.0 * keys + 16.0) * EPS;
        w.iter()
            .map(|&o| vmax * rel + f64::from(o).abs() * EPS + keys * tiny * vmax)
            .collect()
    };
    against_cpu(make, &setup, &passes, &bound).await
}

async fn elementwise<B, F, Fut>(make: &mut F, f: Elementwise) -> Result<(usize, f64), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let mut rng = Rng(5);
    let len = 3000;
    let (a, b) = (rng.vec(len, 8.0), rng.vec(len, 3.0));
    // GELU's tanh: 16 eps relative and 8 |g u| eps absolute (1 + tanh(z) is off by up to 10
    // eps of 1, which is relative where g > 0 and small beside |g u| where g < 0).
    let gelu: Vec<f64> = a
        .iter()
        .zip(&b)
        .map(|(g, u)| 8.0 * f64::from((g * u).abs()) * EPS)
        .collect();
    let setup = Setup {
        weights: vec![],
        vectors: vec![a, b],
        cache: None,
    };
    let passes = move |h: &Handles| {
        vec![reading(
            vec![Op::Elementwise {
                f,
                out: h.t[0],
                first: None,
                second: f.takes_second().then_some(h.t[1]),
                len,
            }],
            1,
            h.t[0],
            len,
        )]
    };
    against_cpu(make, &setup, &passes, &|w, _| match f {
        Elementwise::Add => vec![0.0; w.len()],
        Elementwise::GeluMul => w
            .iter()
            .zip(&gelu)
            .map(|(&w, g)| 16.0 * f64::from(w).abs() * EPS + g)
            .collect(),
        _ => one_ulp(w),
    })
    .await
}

/// Soft caps of 30 and 0.5 over values up to 60 in size: `(4 |want| + 10 cap) eps` (the
/// division, tanh's 8 ulp of 1, the product).
async fn softcap<B, F, Fut>(make: &mut F) -> Result<(usize, f64), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let len = 3000;
    let setup = Setup {
        weights: vec![],
        vectors: vec![Rng(17).vec(len, 60.0), Rng(18).vec(len, 60.0)],
        cache: None,
    };
    let passes = move |h: &Handles| {
        [30.0f32, 0.5]
            .into_iter()
            .enumerate()
            .map(|(i, cap)| {
                let x = h.t[i];
                reading(vec![Op::Softcap { x, len, cap }], 1, x, len)
            })
            .collect()
    };
    against_cpu(make, &setup, &passes, &|w, pass| {
        let cap = [30.0, 0.5][pass];
        w.iter()
            .map(|&w| (4.0 * f64::from(w).abs() + 10.0 * cap) * EPS)
            .collect()
    })
    .await
}

/// A bias added to every row, or every row scaled column by column (rows of an odd length):
/// one f32 addition or product per value, exact.
async fn by_columns<B, F, Fut>(make: &mut F, scale: bool) -> Result<(usize, f64), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let mut rng = Rng(11);
    let (rows, cols) = (5, 100);
    let setup = Setup {
        weights: vec![],
        vectors: vec![rng.vec(rows * cols, 1.0), rng.vec(cols, 1.0)],
        cache: None,
    };
    let passes = move |h: &Handles| {
        let (out, row) = (h.t[0], h.t[1]);
        let op = match scale {
            false => Op::AddBias {
                out,
                bias: row,
                rows,
                cols,
            },
            true => Op::ScaleColumns {
                out,
                scale: row,
                rows,
                cols,
            },
        };
        vec![reading(vec![op], 1, h.t[0], rows * cols)]
    };
    against_cpu(make, &setup, &passes, &|w, _| vec![0.0; w.len()]).await
}

async fn copy_row<B, F, Fut>(make: &mut F) -> Result<(usize, f64), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let mut rng = Rng(6);
    let cols = 100;
    let setup = Setup {
        weights: vec![],
        vectors: vec![rng.vec(5 * cols, 1.0), rng.vec(3 * cols, 1.0)],
        cache: None,
    };
    let passes = move |h: &Handles| {
        vec![reading(
            vec![Op::CopyRow {
                src: h.t[0],
                row: 4,
                cols,
                dst: h.t[1],
                dst_row: 1,
            }],
            1,
            h.t[1],
            3 * cols,
        )]
    };
    against_cpu(make, &setup, &passes, &|w, _| vec![0.0; w.len()]).await
}

/// Top-k of rows with ties, NaNs and infinities: the same ids and values, in order.
async fn topk<B, F, Fut>(make: &mut F, k: usize) -> Result<(usize, f64), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<B, Error>>,
    B: Backend,
{
    let mut rng = Rng(7 + k as u64);
    let (rows, vocab) = (3, 50_000);
    let mut l: Vec<f32> = (0..rows * vocab)
        .map(|_| ((rng.next() % 2000) as f32 - 1000.0) / 8.0)
        .collect();
    for i in [10, 20_000, 49_999, 60_000, 60_001] {
        l[i] = f32::NAN;
    }
    l[100] = f32::INFINITY;
    l[50_100] = f32::INFINITY;
    l[50_101] = f32::INFINITY;
    // Row 2: only a handful of numbers, the rest NaN (fewer numbers than k).
    for v in l[2 * vocab..].iter_mut().skip(3) {
        *v = f32::NAN;
    }
    let setup = Setup {
        weights: vec![],
        vectors: vec![l],
        cache: None,
    };
    let mut b = make().await.map_err(|e| e.to_string())?;
    let mut cpu = CpuBackend::new(1);
    let run = |l: Tensor| Pass {
        tokens: 1,
        ops: vec![Op::Read {
            logits: l,
            rows,
            vocab,
            what: Readback::TopK(k),
        }],
    };
    let passes = |h: &Handles| vec![(run(h.t[0]), Batch::one(0, 1), vec![0u32])];
    let got = execute(&mut b, &setup, &passes)
        .await
        .map_err(|e| e.to_string())?;
    let want = execute(&mut cpu, &setup, &passes)
        .await
        .map_err(|e| e.to_string())?;
    match (&got[0], &want[0]) {
        (Logits::Top(g), Logits::Top(w)) => {
            for (r, (g, w)) in g.iter().zip(w).enumerate() {
                let same = g.len() == w.len()
                    && g.iter()
                        .zip(w)
                        .all(|(a, b)| a.0 == b.0 && a.1.to_bits() == b.1.to_bits());
                if !same {
                    return Err(format!(
                        "row {r}: {:?} where the reference has {:?}",
                        &g[..g.len().min(6)],
                        &w[..w.len().min(6)]
                    ));
                }
            }
            Ok((rows * k, 0.0))
        }
        _ => Err("no top-k read back".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness itself: every check runs (setups load, passes plan and read back) and the
    /// CPU backend agrees with itself exactly.
    #[test]
    fn every_check_runs_on_the_cpu() {
        let results = pollster::block_on(run(|| async { Ok(CpuBackend::new(512)) }, ""));
        assert!(results.len() > 100, "{} checks", results.len());
        for r in &results {
            assert!(r.passed, "{}: {:?}", r.name, r.error);
            assert_eq!(r.worst, 0.0, "{}", r.name);
        }
    }
}

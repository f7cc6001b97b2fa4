//! The attention checks of the ops family (`ops/attention_*`): causal grouped-query attention
//! over a KV cache (f32 and f16) against the CPU twin `crate::cpu::ops::attention`, prefill and
//! decode, in one piece or cut into pieces, with RoPE folded in, writing the output's q8
//! records, and (where the decode combines in its attend) from q, k and v given as products of
//! a norm record. Tolerances as the rest of the family (`super::ops`): each check states its
//! bound.

use super::harness::{
    compare, gpu_err, poisoned, read_f32, submit, upload_f32, Rng, Stats, POISON,
};
use super::harness::{read_u32, rope_bound, wide, EPS};
use crate::cpu::ops as cpu;
use crate::ops::{
    AttentionBuffers, AttentionCall, AttentionOp, KvCache, KvDtype, Position, RopeTable,
};
use crate::q8::{norm_record_bytes, record_bytes};
use crate::GpuContext;
use tritium_core::ops::AttentionScores;

/// Causal GQA attention: the history (positions before pos0) is appended by one op, then the
/// op under test appends the new rows and attends, decode split over the context or not.
///
/// Bound per output element `o[t, h, i]`, with `A = sum_j p_j |v_ji|` (the twin run on |v|),
/// `c = max_j scale * sum_d |q_d k_jd|`, `L` keys, `u` the cache's rounding (below):
/// `A * (e^(2 ds) - 1 + u + (3 + 3 * 2c + 2L + 16) eps) + eps |o|` with
/// `ds = c * (u + (head_dim + 2) eps)` the worst error of a score (q pre-scaled: 1 rounding,
/// the head_dim-term sum, the cache). A score error ds moves every normalized p_j by at most
/// a factor e^(+-2 ds); `exp(s - m)` with `|s - m| <= 2c` is off by (3 + 2|s - m|) ulp plus
/// the subtraction's rounding; the online rescaling, the sums of L terms for l and for each
/// output and the final division add the rest.
///
/// The f16 cache: the reference uses K and V rounded to f16 (to nearest even, as the `half`
/// crate does); WGSL lets `pack2x16float` round to either neighbour, so `u = 2^-10` covers one
/// f16 ulp of difference in every K and V element. f32 cache: `u = 0`.
///
/// On cooperative matrices (a prefill where `AttentionOp::uses_coop`) the pre-scaled q is
/// rounded to f16 (`2^-11` relative, `2^-25` absolute below f16's normal range: each score
/// moves by at most `c 2^-11 + head_dim 2^-25 max|k|`), the hardware's f32 sums may truncate
/// instead of rounding (the score sums' `eps` counted twice), and each `p = e^(s - m)` (`m` a
/// row maximum that may lag the true one by up to the kernel's TAU, so `p <= e^TAU`, far inside
/// f16, and still `l >= 1`) is rounded to f16 before it multiplies V while `l` sums the
/// unrounded ones: `2^-11 A + L 2^-25 max|v|` more per output.
pub(super) async fn attention(ctx: &GpuContext, dtype: KvDtype) -> Result<Stats, String> {
    let mut stats = Stats::default();
    // head_dim 64, 128 and 256: 16, 32 and 64 invocations per workgroup on CPU adapters. The
    // first three prefill by KV head (natively: 3, 4 and 2 query heads per KV head,
    // `AttentionOp::by_kv_head`); six query heads over one KV head take the per-head attend.
    for (n_heads, n_kv, d) in [
        (9usize, 3usize, 64usize),
        (20, 5, 128),
        (4, 2, 256),
        (6, 1, 64),
    ] {
        stats.merge(attention_cases(ctx, dtype, [n_heads, n_kv, d], None, PLAIN, &CASES).await?);
    }
    Ok(stats)
}

/// Scores as they are: every earlier key, no soft cap.
const PLAIN: AttentionScores = AttentionScores {
    window: 0,
    softcap: 0.0,
};

/// Windows of keys and soft-capped scores (Mistral's and Gemma's): windows of 1, 50 and 300
/// keys (one key; tiles and pieces that start inside the window; a window wider than some
/// queries' contexts), a soft cap of 5 (q and k as the plain checks, whose scores reach well
/// past it) alone and with a window. The bound is the plain one over the keys the window
/// leaves: capping moves no score error up (|d/ds cap tanh(s / cap)| <= 1), and a score
/// becomes at most `cap` in size; tanh's own error, `cap * 16 eps` more per score.
pub(super) async fn attention_windowed(ctx: &GpuContext, dtype: KvDtype) -> Result<Stats, String> {
    let cases = [
        (1100, 0, 17, None),
        (1100, 260, 17, Some(14)),
        (1100, 1000, 1, None),
        (1100, 1000, 1, Some(64)),
        (1100, 130, 17, Some(1)),
        (1100, 0, 200, None),
    ];
    let mut stats = Stats::default();
    for (heads, window, softcap) in [
        ([9usize, 3, 64], 50, 0.0),
        ([6, 1, 64], 300, 0.0),
        ([8, 2, 128], 1, 0.0),
        ([9, 3, 64], 0, 5.0),
        ([4, 2, 256], 50, 5.0),
    ] {
        let scores = AttentionScores { window, softcap };
        stats.merge(attention_cases(ctx, dtype, heads, None, scores, &cases).await?);
    }
    Ok(stats)
}

/// Attention with RoPE folded in (q and the new keys rotated by the attention kernel itself),
/// against the CPU's `rope` then `attention`: the bound above with each score's error grown by
/// what the rotation may differ by, `scale * sum_i (rq_i (|k_i| + rk_i) + |q_i| rk_i)` with
/// `rq`, `rk` the per-element RoPE bounds of the rope check (the kernel rotates with rope.wgsl's
/// arithmetic). Configurations: BitNet's (NeoX over 128 of 128), Llama 3.2's (interleaved,
/// Llama-3 frequency scaling) and a partial NeoX rotation (32 of 64: the rest passes through).
pub(super) async fn attention_rope(ctx: &GpuContext, dtype: KvDtype) -> Result<Stats, String> {
    use tritium_core::ops::{Llama3Scaling, RopeConfig, RopeStyle};
    let llama32 = RopeConfig {
        llama3: Some(Llama3Scaling {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        }),
        ..RopeConfig::new(64, 500_000.0, RopeStyle::Interleaved)
    };
    let partial = RopeConfig {
        rot_dim: 32,
        ..RopeConfig::new(64, 10_000.0, RopeStyle::NeoX)
    };
    let mut stats = Stats::default();
    for (heads, cfg) in [
        (
            [20usize, 5, 128],
            RopeConfig::new(128, 500_000.0, RopeStyle::NeoX),
        ),
        ([8, 2, 64], llama32),
        ([4, 1, 64], partial),
    ] {
        stats.merge(attention_cases(ctx, dtype, heads, Some(&cfg), PLAIN, &CASES).await?);
    }
    Ok(stats)
}

/// (max_ctx, pos0, n_tokens, splits) of the checks.
type Case = (u32, usize, usize, Option<u32>);

async fn attention_cases(
    ctx: &GpuContext,
    dtype: KvDtype,
    [n_heads, n_kv, d]: [usize; 3],
    rope: Option<&tritium_core::ops::RopeConfig>,
    scores: AttentionScores,
    cases: &[Case],
) -> Result<Stats, String> {
    let growing = match cases.len() == CASES.len() {
        true => cases.len() - 1,
        false => usize::MAX,
    };
    let table = match rope {
        Some(cfg) => Some(RopeTable::new(ctx, cfg).map_err(gpu_err)?),
        None => None,
    };
    let mut stats = Stats::default();
    for (ci, &(max_ctx, pos0, n_tokens, splits)) in cases.iter().enumerate() {
        let shape = tritium_core::ops::AttentionShape {
            n_heads,
            n_kv_heads: n_kv,
            head_dim: d,
        };
        let mut rng = Rng((ci * 100 + n_heads) as u64 + 1);
        let total = pos0 + n_tokens;
        let mut k = rng.vec(total * n_kv * d, 1.5);
        if ci == growing {
            for (j, row) in k.chunks_mut(n_kv * d).enumerate() {
                row.iter_mut().for_each(|x| *x *= 1.0 + j as f32 / 16.0);
            }
        }
        let v = rng.vec(total * n_kv * d, 1.0);
        let q = rng.vec(n_tokens * n_heads * d, 3.0);
        let Attended {
            out: got,
            records,
            from_norm,
        } = run_attention(
            ctx,
            dtype,
            (max_ctx, pos0, n_tokens, splits),
            shape,
            table.as_ref(),
            scores,
            [&q, &k, &v],
        )
        .await?;

        // What the reference attends with: q and k rotated by the CPU, and how far the
        // kernel's own rotation may be from it (zero without RoPE).
        let (q, k, rq, rk) = match rope {
            Some(cfg) => {
                let (mut qr, mut kr) = (q.clone(), k.clone());
                cpu::rope(&mut qr, n_heads, pos0, cfg);
                cpu::rope(&mut kr, n_kv, 0, cfg);
                let rq = rope_bound(&q, &wide(&qr), cfg);
                let rk = rope_bound(&k, &wide(&kr), cfg);
                (qr, kr, rq, rk)
            }
            None => (
                q,
                k,
                vec![0.0; n_tokens * n_heads * d],
                vec![0.0; total * n_kv * d],
            ),
        };
        let (k_ref, v_ref, u) = match dtype {
            KvDtype::F16 => (to_f16(&k), to_f16(&v), 2f64.powi(-10)),
            KvDtype::F32 => (k.clone(), v.clone(), 0.0),
        };
        let want = wide(&cpu::attention(&q, &k_ref, &v_ref, pos0, shape, scores));
        let coop = scores == PLAIN
            && AttentionOp::uses_coop(ctx, dtype, d as u32, n_tokens as u32, splits);
        let (u_q, sum_eps) = match coop {
            true => (2f64.powi(-11), 2.0),
            false => (0.0, 1.0),
        };
        let tiny = 2f64.powi(-25);
        let max_abs = |x: &[f32]| x.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())));
        let (k_max, v_max) = (max_abs(&k_ref), max_abs(&v_ref));
        let v_abs: Vec<f32> = v_ref.iter().map(|x| x.abs()).collect();
        let a = cpu::attention(&q, &k_ref, &v_abs, pos0, shape, scores);
        let scale = 1.0 / (d as f64).sqrt();
        // `un`: the relative error of q, k and v beyond the reference's (0, or a norm's
        // factor applied in the kernel).
        let bound_with = |un: f64| {
            let mut bound = vec![0.0; want.len()];
            for (row, qh) in q.chunks(d).enumerate() {
                let (t, h) = (row / n_heads, row % n_heads);
                let kvh = h / (n_heads / n_kv);
                let first = scores.first_key(pos0 + t);
                let keys = pos0 + t + 1 - first;
                let rqh = &rq[row * d..][..d];
                let (mut c, mut rot) = (0.0f64, 0.0f64);
                for j in first..pos0 + t + 1 {
                    let at = (j * n_kv + kvh) * d;
                    let (kr, rkj) = (&k_ref[at..][..d], &rk[at..][..d]);
                    let mut dot = 0.0;
                    let mut moved = 0.0;
                    for i in 0..d {
                        let (x, y) = (f64::from(qh[i].abs()), f64::from(kr[i].abs()));
                        dot += x * y;
                        moved += rqh[i] * (y + rkj[i]) + x * rkj[i];
                    }
                    c = c.max(scale * dot);
                    rot = rot.max(scale * moved);
                }
                let q_tiny = if coop { d as f64 * tiny * k_max } else { 0.0 };
                let cap = f64::from(scores.softcap);
                let tanh_err = if cap > 0.0 { cap * 16.0 * EPS } else { 0.0 };
                let ds = c * (u + 2.0 * un + u_q + sum_eps * (d as f64 + 2.0) * EPS)
                    + q_tiny
                    + rot
                    + tanh_err;
                if cap > 0.0 {
                    c = c.min(cap);
                }
                let rel = (2.0 * ds).exp_m1()
                    + u
                    + un
                    + u_q
                    + (3.0 + 6.0 * c + 2.0 * keys as f64 + 16.0) * EPS;
                let abs = if coop {
                    keys as f64 * tiny * v_max
                } else {
                    0.0
                };
                for i in 0..d {
                    let at = row * d + i;
                    bound[at] = f64::from(a[at]) * rel + want[at].abs() * EPS + abs;
                }
            }
            bound
        };
        let roped = rope.map_or(String::new(), |c| {
            format!(", RoPE {:?} {}/{}", c.style, c.rot_dim, c.head_dim)
        });
        let what = format!(
            "attention {n_heads}/{n_kv} heads of {d}, {dtype:?} cache of {max_ctx}, \
             {n_tokens} tokens at {pos0}, splits {splits:?}{roped}{}{}",
            if coop { ", cooperative matrices" } else { "" },
            match scores == PLAIN {
                true => String::new(),
                false => format!(", window {}, soft cap {}", scores.window, scores.softcap),
            }
        );
        stats.merge(compare(&what, &got, &want, &bound_with(0.0))?);
        // From a norm record (q, k, v 8 times larger, the factor 1/8 applied by the kernel):
        // the factor within 2 ulp (inverseSqrt), its product rounded, so 4 eps more on each
        // of q, k and v (`un`); not applied to any one of them, the output is far off.
        if let Some(from_norm) = from_norm {
            let what = format!("{what}, q/k/v from a norm record");
            stats.merge(compare(&what, &from_norm, &want, &bound_with(4.0 * EPS))?);
        }
        // The combine's q8 records of the output: those the CPU makes of the f32 output the
        // kernel wrote (QuantizeQ8's check and tolerances).
        if let Some(records) = records {
            let what = format!("{what}, q8 records");
            super::q8::check_records(&got, &records, n_heads * d, n_tokens, &what, &mut stats)?;
        }
    }
    Ok(stats)
}

// (max_ctx, pos0, n_tokens, splits): splits None lets the op choose (14 pieces here, 26
// or 52 at 4096; one on CPU adapters), Some(64) leaves most pieces empty (a different
// number per token with 17 tokens), Some(1) streams every tile in one workgroup
// (positions 260 and 1000 cross the 256-key tiles).
// (1100, 1080, 17): the last keys' 16-key tiles reach past max_ctx (cooperative matrices).
// (1100, 40, 1, Some(64)): a decode whose keys fit one piece (main_decode's lone piece,
// which writes its output without the combine) while the others hold none.
// The last case's keys grow along the context (row j times 1 + j / 16), so each step of
// keys raises the rows' maxima by far more than the cooperative kernel lets a stale
// maximum stand (its TAU): that kernel's rescaling of O runs at most steps.
const CASES: [Case; 16] = [
    (1100, 0, 17, None),
    (1100, 40, 1, Some(64)),
    (1100, 0, 17, Some(1)),
    (1100, 0, 17, Some(64)),
    (1100, 260, 17, Some(14)),
    (1100, 1, 1, None),
    (1100, 130, 1, None),
    (1100, 1000, 1, None),
    (1100, 1000, 1, Some(1)),
    (1100, 1000, 1, Some(64)),
    (1100, 130, 17, Some(1)),
    (1100, 260, 17, None),
    (4096, 4095, 1, None),
    (1100, 1080, 17, None),
    (1100, 0, 100, None),
    (1100, 0, 200, None),
];

/// Round to f16 and back (nearest even).
fn to_f16(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()
}

/// What [`run_attention`] read back: the output, its q8 records where the op writes them (cut
/// into pieces, [`AttentionOp::quantizes`]), and the output of the same decode from q, k and v
/// given as products of a norm record ([`AttentionOp::takes_norm`]: where it combines in the
/// attend).
struct Attended {
    out: Vec<f32>,
    records: Option<Vec<u8>>,
    from_norm: Option<Vec<f32>>,
}

/// Fill positions `0..pos0` of a fresh cache with the first rows of `k`, `v`, then append the
/// rest and attend for `q`.
async fn run_attention(
    ctx: &GpuContext,
    dtype: KvDtype,
    (max_ctx, pos0, n_tokens, splits): (u32, usize, usize, Option<u32>),
    shape: tritium_core::ops::AttentionShape,
    rope: Option<&RopeTable>,
    scores: AttentionScores,
    [q, k, v]: [&[f32]; 3],
) -> Result<Attended, String> {
    let (n_heads, n_kv, d) = (shape.n_heads, shape.n_kv_heads, shape.head_dim);
    let cache = KvCache::new(ctx, 1, max_ctx, n_kv as u32, d as u32, dtype).map_err(gpu_err)?;
    let position = Position::new(ctx, 0);
    let row = n_kv * d;
    if pos0 > 0 {
        let kb = upload_f32(ctx, "k_hist", &k[..pos0 * row])?;
        let vb = upload_f32(ctx, "v_hist", &v[..pos0 * row])?;
        let q_bytes = (pos0 * n_heads * d * 4) as u64;
        let qb = ctx.storage("q_hist", q_bytes).map_err(gpu_err)?;
        let ob = ctx.storage("o_hist", q_bytes).map_err(gpu_err)?;
        let io = AttentionBuffers {
            q: &qb,
            k: &kb,
            v: &vb,
            out: &ob,
            records: None,
            norm: None,
        };
        let call = AttentionCall {
            layer: 0,
            n_heads: n_heads as u32,
            n_tokens: pos0 as u32,
            splits: None,
            rope,
            combine_in_attend: true,
            scores: PLAIN,
        };
        let hist = AttentionOp::new(ctx, &cache, &position, io, call).map_err(gpu_err)?;
        submit(ctx, |pass| hist.record_append(pass));
    }
    position.set(ctx, pos0 as u32);
    let qb = upload_f32(ctx, "q", q)?;
    let kb = upload_f32(ctx, "k", &k[pos0 * row..])?;
    let vb = upload_f32(ctx, "v", &v[pos0 * row..])?;
    let out = poisoned(ctx, q.len())?;
    let n_splits = AttentionOp::pieces(ctx, &cache, n_tokens as u32, n_heads as u32, splits);
    let record_words = n_tokens * record_bytes((n_heads * d) as u32) as usize / 4;
    let records = match AttentionOp::quantizes(n_splits, d as u32) {
        true => Some(poisoned(ctx, record_words)?),
        false => None,
    };
    let io = || AttentionBuffers {
        q: &qb,
        k: &kb,
        v: &vb,
        out: &out,
        records: records.as_ref(),
        norm: None,
    };
    let call = AttentionCall {
        layer: 0,
        n_heads: n_heads as u32,
        n_tokens: n_tokens as u32,
        splits,
        rope,
        combine_in_attend: true,
        scores,
    };
    let op = AttentionOp::new(ctx, &cache, &position, io(), call).map_err(gpu_err)?;
    // NaN in every piece's partial result, as stale pieces of an earlier, longer pass would
    // be: a piece without keys is not written, and the combine must not read it.
    let partials = op.partials();
    ctx.write(partials, 0, &vec![u32::MAX; (partials.size() / 4) as usize]);
    submit(ctx, |pass| op.record(pass));
    // A decode whose attend combines its pieces itself counts them in counters that the last
    // one sets back to zero: run it a second time on poisoned outputs, which only a reset
    // lets it combine into again.
    let in_attend = n_tokens == 1 && n_splits > 1 && AttentionOp::combines_in_attend(ctx);
    let poison_outputs = || {
        ctx.write(&out, 0, &vec![POISON; q.len()]);
        if let Some(r) = &records {
            ctx.write(r, 0, &vec![POISON; record_words]);
        }
    };
    if in_attend {
        poison_outputs();
        submit(ctx, |pass| op.record(pass));
    }
    let got_records = match &records {
        Some(r) => Some(read_u32(ctx, r, record_words).await?),
        None => None,
    };
    let got = read_f32(ctx, &out, q.len()).await?;
    // And the same decode with the combine in a dispatch of its own (as in the browser):
    // the same arithmetic, so the same bits.
    if in_attend {
        poison_outputs();
        let call = AttentionCall {
            combine_in_attend: false,
            ..call
        };
        let apart = AttentionOp::new(ctx, &cache, &position, io(), call).map_err(gpu_err)?;
        submit(ctx, |pass| apart.record(pass));
        let same = |a: &[u32], b: &[u32]| a.iter().zip(b).position(|(x, y)| x != y);
        let got_apart = read_f32(ctx, &out, q.len()).await?;
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
        if let Some(i) = same(&bits(&got), &bits(&got_apart)) {
            return Err(format!(
                "decode at {pos0}: output {i} is {} combined in the attend, {} apart",
                got[i], got_apart[i]
            ));
        }
        if let (Some(r), Some(want)) = (&records, &got_records) {
            let apart = read_u32(ctx, r, record_words).await?;
            if let Some(i) = same(want, &apart) {
                return Err(format!(
                    "decode at {pos0}: record word {i} differs with the combine apart"
                ));
            }
        }
    }
    // And the same decode with q, k and v 8 times larger, as products of a norm record whose
    // factor is 1/8 (one block of 32 values whose squares sum to 2048, eps 0: 1 / sqrt(2048 /
    // 32)), applied by the kernel as it loads them.
    let from_norm = match in_attend {
        true => {
            let cols = 32u32;
            let mut record = vec![0f32; norm_record_bytes(cols) as usize / 4];
            let sums = record.len() - 8; // the block sums' vec4, then the eps vec4 (0)
            record[sums] = 2048.0;
            let rb = upload_f32(ctx, "norm_record", &record)?;
            let times8 =
                |x: &[f32]| upload_f32(ctx, "x8", &x.iter().map(|v| v * 8.0).collect::<Vec<_>>());
            let (q8, k8, v8) = (
                times8(q)?,
                times8(&k[pos0 * row..])?,
                times8(&v[pos0 * row..])?,
            );
            poison_outputs();
            let io = AttentionBuffers {
                q: &q8,
                k: &k8,
                v: &v8,
                out: &out,
                records: records.as_ref(),
                norm: Some((&rb, cols)),
            };
            let op = AttentionOp::new(ctx, &cache, &position, io, call).map_err(gpu_err)?;
            submit(ctx, |pass| op.record(pass));
            Some(read_f32(ctx, &out, q.len()).await?)
        }
        false => None,
    };
    let records = got_records.map(|r| bytemuck::cast_slice(&r).to_vec());
    Ok(Attended {
        out: got,
        records,
        from_norm,
    })
}

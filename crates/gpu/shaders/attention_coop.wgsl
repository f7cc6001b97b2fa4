// Causal grouped-query attention of a prefill on cooperative matrices (16x16x16 products of
// f16 inputs accumulated in f32; tensor cores on NVIDIA): flash attention over the f16 KV
// cache, after attention.wgsl's append has written the batch's keys and values into it. The
// host picks it (Kernel::AttentionCoop, `AttentionOp::uses_coop`) natively, for several
// tokens, with an f16 cache, HD = head_dim a multiple of 16 up to 128 (a pipeline constant), on
// devices with that cooperative-matrix configuration and 32-wide subgroups.
//
// A workgroup is one subgroup: QB = 16 query tokens (t0 ..) of one query head (the last
// blocks, which see the most keys, first). The keys the block's last query sees are walked
// once, in steps of KB = 64:
//   1. S = Q K^T for the step (16 x 64: four 16x16 matrices, HD / 16 products each), through
//      workgroup memory to the invocations (invocation `lane` owns row lane % 16, keys
//      32 (lane / 16) .. of every step; the two halves of a row share its maximum).
//   2. Each row's maximum m, kept stale while the step's scores stay within TAU of it: only a
//      row whose step maximum exceeds m + TAU takes the new maximum, and O and its sum l are
//      then rescaled by e^(m_old - m_new). O lives in cooperative matrices, which cannot be
//      scaled row by row in place, so a step where any row moved stores O to workgroup memory,
//      scales the rows there and loads it back: the first step sets m, and the later ones
//      rarely move it by more than TAU (only when the scores climb along the context).
//   3. P = exp(S - m) rounded to f16 (0 for keys after the query's position; at most e^TAU,
//      far inside f16), l += the row's sum of the unrounded P, O += P V on the cooperative
//      matrices (HD / 16 accumulators of 16x16 f32).
// The scores are in base 2 (the queries scaled by log2 e as well), so P = 2^(S - m) is one
// instruction, and an invocation takes its 32 scores of a step from workgroup memory once,
// into registers (keys its query does not see as NEG_BIG, whose P is then 0; a step whose keys
// every row sees skips the mask).
// Then out = O / l, through workgroup memory, for the queries that exist. The sums inside each
// product (HD terms for a score, 16 keys for an output) are the hardware's, in f32.
//
// The query rows are rotated (RoPE, when rope_dim > 0: one pair per invocation, with
// rope.wgsl's arithmetic), scaled by `scale` and rounded to f16 into workgroup memory once,
// then held as HD / 16 matrices. Query rows past the batch (in its last block) repeat its last
// query and are not written. Every loop has a fixed trip count but the walk over the steps,
// so the compiler can issue a step's loads together: a 16-key tile past the last key the block
// sees loads the last tile that holds keys instead (finite values, masked out, P = 0), so at
// most 15 rows past the last key are read: the cache holds max_ctx rounded up to 16
// positions (KvCache).
//
// Bindings:
//   0  uniform AttentionParams (attention_params.wgsl)
//   1  uniform PositionParams: the batch's first position
//   2  q: (n_tokens, n_heads, HD) f32, unrotated when rope_dim > 0
//   3  k_cache: (max_ctx rounded up to 16, n_kv_heads, HD) f16, rotated
//   4  v_cache: the same
//   5  out: (n_tokens, n_heads, HD) f32
//   6  freqs: (rope_dim / 2) vec2<u32>, rope.wgsl's table (any buffer without RoPE)

@group(0) @binding(0) var<uniform> p: AttentionParams;
@group(0) @binding(1) var<uniform> position: PositionParams;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> k_cache: array<f16>;
@group(0) @binding(4) var<storage, read> v_cache: array<f16>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read> freqs: array<vec2<u32>>;

// head_dim: a multiple of 16 up to 128 (Kernel::AttentionCoop's constant).
override HD: u32 = 64u;
// Queries per block and keys per step (mirrored by COOP_QUERIES in src/gpu/ops/attention.rs).
const QB: u32 = 16u;
const KB: u32 = 64u;
const NEG_BIG: f32 = -3.0e38;
// How far a step's scores may rise above a row's stale maximum before it is moved (and O
// rescaled): P = e^(s - m) stays below e^8 = 2981 (f16 holds 65504), O and l in f32.
const TAU: f32 = 8.0;
// Scores in base 2: q scaled by log2(e), P = 2^(s - m), the rise allowed TAU / ln 2.
const LOG2E: f32 = 1.4426950408889634;
const TAU2: f32 = TAU * LOG2E;

// The block's query rows (QB x HD, row-major), a step's scores (column-major: query i, key j
// at i + QB j; also the output on its way out) and its probabilities (the same layout).
var<workgroup> q_sh: array<f16, QB * HD>;
var<workgroup> s_sh: array<f32, 1024>; // QB * KB
var<workgroup> p_sh: array<f16, 1024>;
// Whether any row's maximum moved this step (element 0; zero between steps). Four words, not
// one: with the flag in a lone 4-byte workgroup variable (plain or atomic) NVIDIA's driver
// (580, H200) made this kernel's outputs wrong even where no rescaling ran; in a 16-byte
// array, or in spare words after s_sh, they are right. The cause was not found.
var<workgroup> moved_sh: array<atomic<u32>, 4>;

// The query block's HD / 16 A matrices (those past HD stay zero and unused).
struct Queries {
    q0: coop_mat16x16<f16, A>,
    q1: coop_mat16x16<f16, A>,
    q2: coop_mat16x16<f16, A>,
    q3: coop_mat16x16<f16, A>,
    q4: coop_mat16x16<f16, A>,
    q5: coop_mat16x16<f16, A>,
    q6: coop_mat16x16<f16, A>,
    q7: coop_mat16x16<f16, A>,
}

// Keys kj .. kj + 15 of KV head kvh, dimensions c .. c + 15, as K^T (column-major).
fn key_tile(kj: u32, kvh: u32, c: u32) -> coop_mat16x16<f16, B> {
    return coopLoad<coop_mat16x16<f16, B>>(&k_cache[(kj * p.n_kv_heads + kvh) * HD + c],
                                           p.n_kv_heads * HD);
}

// Values of keys kj .. kj + 15, dimensions c .. c + 15 (row-major).
fn value_tile(kj: u32, kvh: u32, c: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&v_cache[(kj * p.n_kv_heads + kvh) * HD + c],
                                            p.n_kv_heads * HD);
}

// S = Q K^T for keys j0 .. j0 + KB - 1 into s_sh (tiles from last_tile on load last_tile).
// Conditions on HD only: an override, uniform, which cooperative operations need (naga takes a
// condition on a function argument or a variable as non-uniform).
fn scores(qm: Queries, j0: u32, last_tile: u32, kvh: u32) {
    for (var kb = 0u; kb < KB / 16u; kb = kb + 1u) {
        let kj = min(j0 + 16u * kb, last_tile);
        var s = coopMultiplyAdd(qm.q0, key_tile(kj, kvh, 0u), coop_mat16x16<f32, C>());
        if (HD > 16u) {
            s = coopMultiplyAdd(qm.q1, key_tile(kj, kvh, 16u), s);
        }
        if (HD > 32u) {
            s = coopMultiplyAdd(qm.q2, key_tile(kj, kvh, 32u), s);
        }
        if (HD > 48u) {
            s = coopMultiplyAdd(qm.q3, key_tile(kj, kvh, 48u), s);
        }
        if (HD > 64u) {
            s = coopMultiplyAdd(qm.q4, key_tile(kj, kvh, 64u), s);
        }
        if (HD > 80u) {
            s = coopMultiplyAdd(qm.q5, key_tile(kj, kvh, 80u), s);
        }
        if (HD > 96u) {
            s = coopMultiplyAdd(qm.q6, key_tile(kj, kvh, 96u), s);
        }
        if (HD > 112u) {
            s = coopMultiplyAdd(qm.q7, key_tile(kj, kvh, 112u), s);
        }
        coopStore(s, &s_sh[256u * kb], QB);
    }
}

// Query matrix c (dimensions 16 c ..) from q_sh.
fn query_tile(c: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&q_sh[16u * c], HD);
}

// s_sh's rows times their factor `alpha` (invocation `lane` scales elements lane, lane + 32,
// ..., all in its row), between barriers: for O's blocks stored there column-major.
fn scale_rows(lane: u32, alpha: f32) {
    workgroupBarrier();
    for (var e = lane; e < 1024u; e = e + 32u) {
        s_sh[e] = s_sh[e] * alpha;
    }
    workgroupBarrier();
}

// O blocks 0 .. 3 of s_sh (dimension chunks c0 ..) to `out` over l: invocation `lane` takes
// elements lane, lane + 32, ... of each 16x16 block, all in its row r.
fn write_out(row: u32, c0: u32, lane: u32, inv_l: f32) {
    for (var e = lane; e < 1024u; e = e + 32u) {
        let c = c0 + e / 256u;
        if (16u * c < HD) {
            out[row + 16u * c + (e % 256u) / QB] = s_sh[e] * inv_l;
        }
    }
}

@compute @workgroup_size(32)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let t0 = (p.n_tokens + QB - 1u) / QB * QB - QB * (wid.x + 1u);
    let h = wid.y;
    // Divisors at least 1 (the pipeline is compiled without division guards: max(.., 1u)
    // marks each as checked, tests/gpu_uniforms.rs); the host passes whole groups of heads.
    let kvh = h / max(p.n_heads / max(p.n_kv_heads, 1u), 1u);
    let pos0 = position.pos0;
    let last_t = min(t0 + QB, p.n_tokens) - 1u;
    // Keys the block's last query sees, the steps over them, the last tile that holds keys.
    let n_keys = min(pos0 + last_t + 1u, p.max_ctx);
    let steps = (n_keys + KB - 1u) / KB;
    let last_tile = (n_keys - 1u) / 16u * 16u;

    // The queries: RoPE pair pr of row i per invocation and round (pairs (2 pr, 2 pr + 1), or
    // NeoX's (pr, pr + rope_dim / 2) within the rotated dimensions), scaled, to f16.
    for (var it = 0u; it < QB * HD / 64u; it = it + 1u) {
        let e = lane + 32u * it;
        let i = e / (HD / 2u);
        let pr = e % (HD / 2u);
        let t = min(t0 + i, last_t);
        let row = (t * p.n_heads + h) * HD;
        let rotated = 2u * pr < p.rope_dim;
        var a = 2u * pr;
        var b = a + 1u;
        if (p.rope_neox == 1u && rotated) {
            a = pr;
            b = pr + p.rope_dim / 2u;
        }
        var va = q[row + a];
        var vb = q[row + b];
        if (rotated) {
            let cs = rope_cos_sin(freqs[pr], pos0 + t);
            let ra = va * cs.x - vb * cs.y;
            vb = va * cs.y + vb * cs.x;
            va = ra;
        }
        q_sh[i * HD + a] = f16(va * (p.scale * LOG2E));
        q_sh[i * HD + b] = f16(vb * (p.scale * LOG2E));
    }
    atomicStore(&moved_sh[0], 0u);
    workgroupBarrier();
    var qm: Queries;
    qm.q0 = query_tile(0u);
    if (HD > 16u) {
        qm.q1 = query_tile(1u);
    }
    if (HD > 32u) {
        qm.q2 = query_tile(2u);
    }
    if (HD > 48u) {
        qm.q3 = query_tile(3u);
    }
    if (HD > 64u) {
        qm.q4 = query_tile(4u);
    }
    if (HD > 80u) {
        qm.q5 = query_tile(5u);
    }
    if (HD > 96u) {
        qm.q6 = query_tile(6u);
    }
    if (HD > 112u) {
        qm.q7 = query_tile(7u);
    }

    // This invocation's row and keys of each step, and the last key its query sees.
    let r = lane % QB;
    let k_lo = (lane / QB) * (KB / 2u);
    let seen = pos0 + min(t0 + r, last_t);

    var m = NEG_BIG;
    var l = 0.0;
    var o0 = coop_mat16x16<f32, C>();
    var o1 = coop_mat16x16<f32, C>();
    var o2 = coop_mat16x16<f32, C>();
    var o3 = coop_mat16x16<f32, C>();
    var o4 = coop_mat16x16<f32, C>();
    var o5 = coop_mat16x16<f32, C>();
    var o6 = coop_mat16x16<f32, C>();
    var o7 = coop_mat16x16<f32, C>();
    for (var st = 0u; st < steps; st = st + 1u) {
        let j0 = st * KB;
        scores(qm, j0, last_tile, kvh);
        workgroupBarrier();
        // The row's scores of the step (keys it does not see at NEG_BIG), in registers, and
        // the step's row maximum (both halves). A step whose keys every row sees (all but the
        // last steps of a block) skips the mask.
        var sv: array<f32, 32>;
        var bm4 = vec4<f32>(NEG_BIG);
        if (j0 + KB <= pos0 + t0 + 1u) {
            for (var k = 0u; k < KB / 2u; k = k + 1u) {
                sv[k] = s_sh[r + QB * (k_lo + k)];
            }
        } else {
            for (var k = 0u; k < KB / 2u; k = k + 1u) {
                sv[k] = select(NEG_BIG, s_sh[r + QB * (k_lo + k)], j0 + k_lo + k <= seen);
            }
        }
        for (var k = 0u; k < KB / 2u; k = k + 4u) {
            bm4 = max(bm4, vec4<f32>(sv[k], sv[k + 1u], sv[k + 2u], sv[k + 3u]));
        }
        var bm = max(max(bm4.x, bm4.y), max(bm4.z, bm4.w));
        bm = max(bm, subgroupShuffleXor(bm, QB));
        let moves = bm > m + TAU2;
        let mn = select(m, bm, moves);
        let alpha = select(1.0, exp2(m - mn), moves);
        l = l * alpha;
        m = mn;
        var sum4 = vec4<f32>(0.0);
        for (var k = 0u; k < KB / 2u; k = k + 4u) {
            let pf = exp2(vec4<f32>(sv[k], sv[k + 1u], sv[k + 2u], sv[k + 3u]) - m);
            sum4 = sum4 + pf;
            let at = r + QB * (k_lo + k);
            p_sh[at] = f16(pf.x);
            p_sh[at + QB] = f16(pf.y);
            p_sh[at + 2u * QB] = f16(pf.z);
            p_sh[at + 3u * QB] = f16(pf.w);
        }
        l = l + ((sum4.x + sum4.y) + (sum4.z + sum4.w));
        // Every invocation ors its row's news in (O is still zero at the first step), so no
        // branch parts the subgroup before the cooperative operations, which need it whole.
        atomicOr(&moved_sh[0], select(0u, 1u, moves && st > 0u));
        // A barrier too: P is written and S read before either is touched again.
        let rescale = workgroupUniformLoad(&moved_sh[0]) != 0u;
        atomicStore(&moved_sh[0], 0u);
        if (rescale) {
            coopStore(o0, &s_sh[0], QB);
            coopStore(o1, &s_sh[256u], QB);
            coopStore(o2, &s_sh[512u], QB);
            coopStore(o3, &s_sh[768u], QB);
            scale_rows(lane, alpha);
            o0 = coopLoad<coop_mat16x16<f32, C>>(&s_sh[0], QB);
            o1 = coopLoad<coop_mat16x16<f32, C>>(&s_sh[256u], QB);
            o2 = coopLoad<coop_mat16x16<f32, C>>(&s_sh[512u], QB);
            o3 = coopLoad<coop_mat16x16<f32, C>>(&s_sh[768u], QB);
            if (HD > 64u) {
                workgroupBarrier();
                coopStore(o4, &s_sh[0], QB);
                coopStore(o5, &s_sh[256u], QB);
                coopStore(o6, &s_sh[512u], QB);
                coopStore(o7, &s_sh[768u], QB);
                scale_rows(lane, alpha);
                o4 = coopLoad<coop_mat16x16<f32, C>>(&s_sh[0], QB);
                o5 = coopLoad<coop_mat16x16<f32, C>>(&s_sh[256u], QB);
                o6 = coopLoad<coop_mat16x16<f32, C>>(&s_sh[512u], QB);
                o7 = coopLoad<coop_mat16x16<f32, C>>(&s_sh[768u], QB);
            }
            workgroupBarrier();
        }
        for (var kb = 0u; kb < KB / 16u; kb = kb + 1u) {
            let kj = min(j0 + 16u * kb, last_tile);
            let pa = coopLoad<coop_mat16x16<f16, A>>(&p_sh[256u * kb], QB);
            o0 = coopMultiplyAdd(pa, value_tile(kj, kvh, 0u), o0);
            if (HD > 16u) {
                o1 = coopMultiplyAdd(pa, value_tile(kj, kvh, 16u), o1);
            }
            if (HD > 32u) {
                o2 = coopMultiplyAdd(pa, value_tile(kj, kvh, 32u), o2);
            }
            if (HD > 48u) {
                o3 = coopMultiplyAdd(pa, value_tile(kj, kvh, 48u), o3);
            }
            if (HD > 64u) {
                o4 = coopMultiplyAdd(pa, value_tile(kj, kvh, 64u), o4);
            }
            if (HD > 80u) {
                o5 = coopMultiplyAdd(pa, value_tile(kj, kvh, 80u), o5);
            }
            if (HD > 96u) {
                o6 = coopMultiplyAdd(pa, value_tile(kj, kvh, 96u), o6);
            }
            if (HD > 112u) {
                o7 = coopMultiplyAdd(pa, value_tile(kj, kvh, 112u), o7);
            }
        }
    }
    // The row's two halves (lanes r and r + 16) share m: their sums add.
    l = l + subgroupShuffleXor(l, QB);

    // out = O / l, four 16x16 blocks at a time through s_sh.
    let inv_l = 1.0 / l;
    let t = t0 + r;
    let row = (min(t, last_t) * p.n_heads + h) * HD;
    coopStore(o0, &s_sh[0], QB);
    coopStore(o1, &s_sh[256u], QB);
    coopStore(o2, &s_sh[512u], QB);
    coopStore(o3, &s_sh[768u], QB);
    workgroupBarrier();
    if (t < p.n_tokens) {
        write_out(row, 0u, lane, inv_l);
    }
    if (HD > 64u) {
        workgroupBarrier();
        coopStore(o4, &s_sh[0], QB);
        coopStore(o5, &s_sh[256u], QB);
        coopStore(o6, &s_sh[512u], QB);
        coopStore(o7, &s_sh[768u], QB);
        workgroupBarrier();
        if (t < p.n_tokens) {
            write_out(row, 4u, lane, inv_l);
        }
    }
}

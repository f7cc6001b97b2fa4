// Causal grouped-query attention over a KV cache, in three modes (AttentionParams.mode):
//
// 0 append:  copy the new K and V rows of n_tokens tokens into the cache at positions
//            pos0 .. pos0 + n_tokens - 1 (rounded to f16 when kv_f16). One thread per
//            16-byte cache slot.
// 1 attend:  one workgroup per (split, query head, token), dispatched (n_splits, n_heads,
//            n_tokens). The query of token t sits at pos0 + t and sees keys 0 ..= pos0 + t
//            (with a window, the last `window` of them: first_key); that range is cut into n_splits contiguous pieces (at least min_split keys each)
//            so a long context is read by many workgroups at once (flash-decoding); pieces
//            past the last key (a cache longer than the text so far) return at once. Each
//            workgroup streams its piece in tiles of TILE keys with an online softmax:
//            scores (one thread per key, q pre-scaled by 1/sqrt(head_dim), soft-capped
//            where softcap is set: capped, in workgroup memory), the tile max (workgroup_max), p = exp(s - m) and their sum
//            (workgroup_sum), then sum p * V with each thread owning one 16-byte slot of the
//            V row (`lanes` threads per slot take alternate keys, four per step, the first
//            step's values loaded before the reductions; their sums are added at the end).
//            With one split it writes the normalized output, otherwise its piece's
//            partial result: acc = sum p * V and (m, l) = (max score, sum p).
// 2 combine: one workgroup per (query head, token), dispatched (n_heads, n_tokens): merge
//            the pieces that hold keys, out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M),
//            the pieces' (m, l) through workgroup memory, the sum over pieces split between
//            groups of threads, each group's first piece loaded with the (m, l) (one round of
//            loads for up to WG / (head_dim / 4) pieces).
//
// Prefill by KV head (entry point main_group, Kernel::AttentionGroup): attend for the 2 to 4
// query heads of one KV head in one workgroup (see attend_group).
//
// Decode with the combine in the attend (entry point main_decode, Kernel::AttentionDecode,
// natively): the last piece of each head to finish combines them, and a head with one piece
// of keys writes its output directly (see main_decode).
//
// Decode (fused == 1, one token): attend also appends, so one dispatch does both. Its
// workgroups take the new key and value (position pos0) from src3 and src2, packed exactly
// as the cache would hold them, instead of from the cache, and the split-0 workgroup of the
// first query head of each KV group writes them into the cache for later passes (nothing in
// this dispatch reads the cache at pos0).
//
// Quantized output (quantize == 1, with n_splits > 1 and head_dim a multiple of 32): the
// combine also writes the int8 activation records of its output (quant/q8.wgsl's layout, for
// the rows of n_heads * head_dim values of each token) into src3, for the integer-dot product
// that reads the attention's output (attn_output); with q8_quarter.wgsl's arithmetic, on the
// f32 values it writes to `out`, so the records are those quantize_q8.wgsl makes of `out`,
// bit for bit, and that product's own quantization dispatch goes.
//
// RoPE (rope_dim > 0): the new keys are rotated as they are appended and each query as it is
// loaded, with rope.wgsl's pairs and arithmetic, so the rope dispatches of q and k and their
// barriers go; the q and k buffers themselves are left as they were.
//
// Norm (decode, norm_cols > 0, Kernel::AttentionDecode only): q, k and v are products of the
// norm record of the residual, and the attend applies the norm's factor to them as it loads
// them (attention_norm.wgsl's qkv_factor; attention_norm_none.wgsl's is 1 for the others).
//
// Query head h reads KV head h / (n_heads / n_kv_heads). head_dim must be a multiple of 8 and
// at most 256, n_splits at most 64, WG a power of two from 16 to 256 at least head_dim / 4
// (so also at least a cache row's 16-byte slots: head_dim / 8 for f16, head_dim / 4 for
// f32). "Minus infinity" is the finite -3e38 throughout, so the arithmetic stays
// right where a compiler assumes there are no infinities.
//
// Bindings:
//   0  uniform AttentionParams
//   1  uniform PositionParams
//   2  src: append: new K (n_tokens, n_kv_heads, head_dim) f32; attend: q (n_tokens, n_heads,
//      head_dim) f32; combine: unused
//   3  src2: append and fused attend: new V (n_tokens, n_kv_heads, head_dim) f32; otherwise
//      unused
//   4  k_cache: (max_ctx, n_kv_heads, head_dim) f16 pairs packed in u32 (kv_f16) or f32 bits,
//      read as vec4<u32>
//   5  v_cache: as k_cache
//   6  out: (n_tokens, n_heads, head_dim) f32
//   7  partials: (n_tokens, n_heads, n_splits, head_dim / 4) vec4 acc, then
//      (n_tokens, n_heads, n_splits) vec4 (m, l, 0, 0)
//   8  freqs: (rope_dim / 2) vec2<u32>, rope.wgsl's table (any buffer without RoPE)
//   9  src3: fused attend: new K (1, n_kv_heads, head_dim) f32 bits; quantized combine: the
//      output's q8 records (n_tokens, record words), written; otherwise unused

// AttentionParams is in attention_params.wgsl.

@group(0) @binding(0) var<uniform> p: AttentionParams;
@group(0) @binding(1) var<uniform> position: PositionParams;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read> src2: array<f32>;
@group(0) @binding(4) var<storage, read_write> k_cache: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> v_cache: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
// Binding 7, `partials`, is declared by attention_partials.wgsl (or, for main_decode,
// attention_partials_coherent.wgsl).
@group(0) @binding(8) var<storage, read> freqs: array<vec2<u32>>;
@group(0) @binding(9) var<storage, read_write> src3: array<u32>;

// Keys per tile: 256, or 4 per invocation in narrower workgroups (CPU adapters). At least 64
// (the combine keeps its pieces' weights in `scores`).
override TILE: u32 = clamp(4u * WG, 64u, 256u);
const NEG_BIG: f32 = -3.0e38;
// lane_acc's length: lanes x head_dim / 4 is WG (f32 cache) or 2 WG (f16), the combine's
// groups x head_dim / 4 at most WG, the fused staging (key at 0, value at WG) WG + head_dim / 4:
// 2 WG, not the 512 of the largest workgroup, and q_sh and fresh_k/v sized by WG up to 64 (the
// largest head), because WebGPU zero-initializes workgroup memory at the start of every
// workgroup, and SwiftShader does it in every group of 4 invocations, element by element (on
// CPU adapters that cost more than the attention itself). Native pipelines skip that and set
// LANE_VEC4S 512 (`Kernel::constants`).
override LANE_VEC4S: u32 = 2u * WG;
// head_dim / 4 (and a row's 16-byte slots) at most: 64 (head_dim 256), and at most WG.
override HEAD_VEC4S: u32 = min(WG, 64u);

var<workgroup> q_sh: array<vec4<f32>, HEAD_VEC4S>; // (head_dim / 4) query, pre-scaled
var<workgroup> scores: array<f32, TILE>;        // scores, then probabilities
var<workgroup> lane_acc: array<vec4<f32>, LANE_VEC4S>; // (lanes, head_dim / 4) sums of p * V
var<workgroup> weights: array<f32, 64>;         // (n_splits) combine: l of each piece
var<workgroup> fresh_k: array<vec4<u32>, HEAD_VEC4S>; // fused attend: the new key's cache slots
var<workgroup> fresh_v: array<vec4<u32>, HEAD_VEC4S>; // and the new value's

// Eight (f16) or four (f32, hi = 0) cache values from one 16-byte slot.
struct Slot {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

fn unpack_slot(w: vec4<u32>) -> Slot {
    if (p.kv_f16 == 1u) {
        return Slot(
            vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)),
            vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)),
        );
    }
    return Slot(bitcast<vec4<f32>>(w), vec4<f32>(0.0));
}

// q . (16-byte slot c of a key row), 0 for c >= slots.
fn slot_dot(w: vec4<u32>, c: u32, slots: u32) -> f32 {
    let kv = unpack_slot(w);
    let cc = min(c, slots - 1u);
    var s: f32;
    if (p.kv_f16 == 1u) {
        s = dot(kv.lo, q_sh[2u * cc]) + dot(kv.hi, q_sh[2u * cc + 1u]);
    } else {
        s = dot(kv.lo, q_sh[cc]);
    }
    return select(0.0, s, c < slots);
}

// Value i of input `which`: 0 src, 1 src2, 2 src3 (uniform per call site).
fn input(which: u32, i: u32) -> f32 {
    if (which == 0u) {
        return src[i];
    }
    if (which == 1u) {
        return src2[i];
    }
    return bitcast<f32>(src3[i]);
}

// Value j of the head row starting at `row` of input `which`, rotated for position pos when
// RoPE is on (rope.wgsl's expressions for the pair j belongs to).
fn roped(which: u32, row: u32, j: u32, pos: u32) -> f32 {
    if (j >= p.rope_dim) {
        return input(which, row + j);
    }
    let half = p.rope_dim / 2u;
    var a = j & ~1u;
    var b = a + 1u;
    var pair = j / 2u;
    if (p.rope_neox == 1u) {
        pair = select(j - half, j, j < half);
        a = pair;
        b = pair + half;
    }
    let cs = rope_cos_sin(freqs[pair], pos);
    let va = input(which, row + a);
    let vb = input(which, row + b);
    if (j == a) {
        return va * cs.x - vb * cs.y;
    }
    return va * cs.y + vb * cs.x;
}

// Four values of a head row from `row + j` of input `which`, rotated when `rotate` and RoPE
// is on.
fn roped4(which: u32, row: u32, j: u32, pos: u32, rotate: bool) -> vec4<f32> {
    if (p.rope_dim == 0u || !rotate) {
        let i = row + j;
        return vec4<f32>(
            input(which, i),
            input(which, i + 1u),
            input(which, i + 2u),
            input(which, i + 3u),
        );
    }
    return vec4<f32>(
        roped(which, row, j, pos),
        roped(which, row, j + 1u, pos),
        roped(which, row, j + 2u, pos),
        roped(which, row, j + 3u, pos),
    );
}

// The cache slot of new values s .. s + per_slot() - 1 of input `which` (a slot never
// straddles two head rows), as the cache holds it: keys (`rotate`) rotated for pos, then
// packed to f16 pairs or kept as f32 bits.
fn new_slot(which: u32, s: u32, pos: u32, rotate: bool) -> vec4<u32> {
    let j = s % max(p.head_dim, 1u);
    let row = s - j;
    let a = roped4(which, row, j, pos, rotate);
    var b = a;
    if (p.kv_f16 == 1u) {
        b = roped4(which, row, j + 4u, pos, rotate);
    }
    return pack_slot(a, b);
}

// A cache slot of values a (then b, f16 only): f16 pairs or f32 bits.
fn pack_slot(a: vec4<f32>, b: vec4<f32>) -> vec4<u32> {
    if (p.kv_f16 == 1u) {
        return vec4<u32>(
            pack2x16float(a.xy),
            pack2x16float(a.zw),
            pack2x16float(b.xy),
            pack2x16float(b.zw),
        );
    }
    return bitcast<vec4<u32>>(a);
}

// Cache values per 16-byte slot.
fn per_slot() -> u32 {
    return select(4u, 8u, p.kv_f16 == 1u);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    if (p.mode == 0u) {
        append(flat_workgroup(wid, nwg) * WG + lid);
    } else if (p.mode == 1u) {
        var r: Attended;
        if (attend(wid, lid, &r)) {
            write_attended(r, wid, lid);
        }
    } else {
        combine(wid, lid);
    }
}

// Slot i of the new rows (n_tokens, n_kv_heads, slots) into the cache at pos0 + token.
fn append(i: u32) {
    let e = per_slot();
    let per_token = p.n_kv_heads * (p.head_dim / max(e, 1u));
    if (i >= p.n_tokens * per_token) {
        return;
    }
    let pos = position.pos0 + i / max(per_token, 1u);
    if (pos >= p.max_ctx) {
        return;
    }
    let at = pos * per_token + i % max(per_token, 1u);
    let s = i * e;
    k_cache[at] = new_slot(0u, s, pos, true);
    v_cache[at] = new_slot(1u, s, pos, false);
}

// A cache slot (f16 pairs or f32 bits) of the values staged in lane_acc from vec4 `i` on.
fn staged_slot(i: u32) -> vec4<u32> {
    var b = lane_acc[i];
    if (p.kv_f16 == 1u) {
        b = lane_acc[i + 1u];
    }
    return pack_slot(lane_acc[i], b);
}

// Value slot `at` of the cache, or the fused attend's new one (slot g) when `fresh` (then the
// cache load goes to slot g of the `spare` row and is dropped).
fn value_at(fresh: bool, at: u32, spare: u32, g: u32) -> Slot {
    let w = v_cache[select(at, spare + g, fresh)];
    return unpack_slot(select(w, fresh_v[g], fresh));
}

// The value slots of keys j, j + lanes, j + 2 lanes, j + 3 lanes of a tile (clamped to
// `last`), slot g of each row from `base`; the key at tile index `fresh_at` (the fused
// decode's new one; anything past the tile otherwise) from fresh_v.
struct Values4 {
    a: Slot,
    b: Slot,
    c: Slot,
    d: Slot,
}

fn values4(j: u32, lanes: u32, last: u32, fused: bool, fresh_at: u32, base: u32, spare_row: u32,
           g: u32) -> Values4 {
    let stride = p.n_kv_heads * (p.head_dim / max(per_slot(), 1u));
    let j1 = min(j + lanes, last);
    let j2 = min(j + 2u * lanes, last);
    let j3 = min(j + 3u * lanes, last);
    return Values4(
        value_at(fused && j == fresh_at, base + j * stride, spare_row, g),
        value_at(fused && j1 == fresh_at, base + j1 * stride, spare_row, g),
        value_at(fused && j2 == fresh_at, base + j2 * stride, spare_row, g),
        value_at(fused && j3 == fresh_at, base + j3 * stride, spare_row, g),
    );
}

// What attend leaves for writing its piece: the sums of p * V of `lanes` lanes in lane_acc
// (rows of head_dim / 4 vec4), the piece's max score m and sum of p, l.
struct Attended {
    lanes: u32,
    m: f32,
    l: f32,
}

// Whether this workgroup's piece holds keys (else it did nothing); if so, its sums are in
// lane_acc and `r` (the caller writes the piece: write_attended, or main_decode's lone piece).
fn attend(wid: vec3<u32>, lid: u32, r: ptr<function, Attended>) -> bool {
    let split = wid.x;
    let head = wid.y;
    let token = wid.z;
    let d = p.head_dim;
    // Query heads per KV head; divisors here at least 1 (max(.., 1u): the pipelines are
    // compiled without division guards, tests/gpu_uniforms.rs).
    let group = max(p.n_heads / max(p.n_kv_heads, 1u), 1u);
    let kvh = head / group;
    // Keys this query sees, and this workgroup's piece of them.
    let first = first_key(token);
    let len = keys_seen(token) - first;
    let piece = piece_keys(len);
    let start = first + min(split * piece, len);
    let end = min(first + len, start + piece);
    // A piece past the keys (a cache far longer than the text so far) has nothing to do and
    // writes nothing: combine reads only the pieces that hold keys. Split 0 always holds some
    // (it also appends, fused). Uniform per workgroup, so returning before the barriers is
    // fine.
    if (start >= end) {
        return false;
    }

    let qbase = (token * p.n_heads + head) * d;
    let fused = p.fused == 1u;
    let newest = position.pos0;
    // The factor of a norm folded into the products of q, k and v (1 otherwise: the values
    // are then exactly as loaded).
    let f = qkv_factor(lid);
    // One value per thread first (each RoPE value costs two loads and an angle): the query,
    // rotated and pre-scaled, into `q_sh`; fused, the new key (rotated) and value into
    // `lane_acc` (free until the loops below).
    for (var i = lid; i < d; i = i + WG) {
        q_sh[i / 4u][i % 4u] = roped(0u, qbase, i, position.pos0 + token) * (p.scale * f);
        if (fused) {
            lane_acc[i / 4u][i % 4u] = roped(2u, kvh * d, i, newest) * f;
            lane_acc[WG + i / 4u][i % 4u] = src2[kvh * d + i] * f;
        }
    }
    workgroupBarrier();

    let e = per_slot();
    let slots = max(d / max(e, 1u), 1u); // 16-byte slots per head row
    let stride = p.n_kv_heads * slots;  // slots per position
    let head_off = kvh * slots;
    let q_per_slot = e / 4u;            // q vec4s per slot: 2 (f16) or 1 (f32)
    let lanes = max(WG / slots, 1u);
    let lane = lid / slots;
    let g = lid % slots;
    // Fused decode: the new token's key and value slots into workgroup memory, where the
    // loops below take them from, and (one workgroup per KV head) into the cache. A fresh
    // key's cache load reads a row this dispatch does not write instead (`spare`), and is
    // dropped.
    let spare = select(0u, 1u, newest == 0u) * stride;
    if (fused && lid < slots) {
        let ks = staged_slot(lid * e / 4u);
        let vs = staged_slot(WG + lid * e / 4u);
        fresh_k[lid] = ks;
        fresh_v[lid] = vs;
        if (split == 0u && head % group == 0u && newest < p.max_ctx) {
            let at = newest * stride + head_off + lid;
            k_cache[at] = ks;
            v_cache[at] = vs;
        }
    }
    // Also: `scores` and `lane_acc` are free again.
    workgroupBarrier();

    var m = NEG_BIG;
    var l = 0.0;
    var acc_lo = vec4<f32>(0.0);
    var acc_hi = vec4<f32>(0.0);
    for (var t0 = start; t0 < end; t0 = t0 + TILE) {
        let n = min(TILE, end - t0);
        // Scores: one thread per key.
        var local_max = NEG_BIG;
        for (var j = lid; j < n; j = j + WG) {
            let fresh = fused && t0 + j == newest;
            let row = select((t0 + j) * stride, spare, fresh) + head_off;
            // Four loads in flight before any is used (the overhang is clamped and dropped).
            let last = slots - 1u;
            var s = 0.0;
            for (var c = 0u; c < slots; c = c + 4u) {
                let c1 = min(c + 1u, last);
                let c2 = min(c + 2u, last);
                let c3 = min(c + 3u, last);
                let w0 = select(k_cache[row + c], fresh_k[c], fresh);
                let w1 = select(k_cache[row + c1], fresh_k[c1], fresh);
                let w2 = select(k_cache[row + c2], fresh_k[c2], fresh);
                let w3 = select(k_cache[row + c3], fresh_k[c3], fresh);
                s = s + ((slot_dot(w0, c, slots) + slot_dot(w1, c + 1u, slots))
                    + (slot_dot(w2, c + 2u, slots) + slot_dot(w3, c + 3u, slots)));
            }
            let c = capped(s);
            scores[j] = c;
            local_max = max(local_max, c);
        }
        // The values of each lane's first step of four keys (a decode piece's all), loaded
        // before the reductions so that their latency runs under them.
        let base = t0 * stride + head_off + g;
        let spare_row = spare + head_off;
        let last = n - 1u;
        let stepping = lane < lanes && lane < n;
        var first: Values4;
        if (stepping) {
            first = values4(lane, lanes, last, fused, newest - t0, base, spare_row, g);
        }
        let m_new = max(m, workgroup_max(local_max, lid));
        var local_sum = 0.0;
        for (var j = lid; j < n; j = j + WG) {
            let pj = exp(scores[j] - m_new);
            scores[j] = pj;
            local_sum = local_sum + pj;
        }
        // Rescale what came before to the new maximum (alpha = 0 on the first tile).
        let alpha = exp(m - m_new);
        l = l * alpha + workgroup_sum(local_sum, lid);
        acc_lo = acc_lo * alpha;
        acc_hi = acc_hi * alpha;
        if (stepping) {
            // Four keys per step, their loads issued together (keys past the tile are
            // clamped to its last one and weighted 0).
            var v = first;
            for (var j = lane; j < n; j = j + 4u * lanes) {
                if (j != lane) {
                    v = values4(j, lanes, last, fused, newest - t0, base, spare_row, g);
                }
                let j1 = min(j + lanes, last);
                let j2 = min(j + 2u * lanes, last);
                let j3 = min(j + 3u * lanes, last);
                let p0 = scores[j];
                let p1 = select(0.0, scores[j1], j + lanes < n);
                let p2 = select(0.0, scores[j2], j + 2u * lanes < n);
                let p3 = select(0.0, scores[j3], j + 3u * lanes < n);
                acc_lo = acc_lo + ((p0 * v.a.lo + p1 * v.b.lo) + (p2 * v.c.lo + p3 * v.d.lo));
                acc_hi = acc_hi + ((p0 * v.a.hi + p1 * v.b.hi) + (p2 * v.c.hi + p3 * v.d.hi));
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    // Each lane's sums to workgroup memory, then one thread per 4 dimensions adds them up.
    put_lane_sums(lane, lanes, g, q_per_slot, Slot(acc_lo, acc_hi));
    workgroupBarrier();
    *r = Attended(lanes, m, l);
    return true;
}

// A lane's sums of p * V (slot g of the head row) into lane_acc, rows of head_dim / 4.
fn put_lane_sums(lane: u32, lanes: u32, g: u32, q_per_slot: u32, a: Slot) {
    let d4 = p.head_dim / 4u;
    if (lane < lanes) {
        lane_acc[lane * d4 + g * q_per_slot] = a.lo;
        if (q_per_slot == 2u) {
            lane_acc[lane * d4 + g * 2u + 1u] = a.hi;
        }
    }
}

// attend's piece (workgroup (split, head, token) of its dispatch) written by write_piece.
fn write_attended(r: Attended, wid: vec3<u32>, lid: u32) {
    let row = wid.z * p.n_heads + wid.y; // (token, head)
    write_piece(row * p.head_dim, row * p.n_splits + wid.x, r.lanes, r.m, r.l, lid);
}

// The sums of `lanes` lanes in lane_acc added up per 4 dimensions: with one piece the head's
// output from `qbase` (over l), else piece `piece_at`'s partial result and its (m, l).
fn write_piece(qbase: u32, piece_at: u32, lanes: u32, m: f32, l: f32, lid: u32) {
    let d4 = p.head_dim / 4u;
    for (var i = lid; i < d4; i = i + WG) {
        if (p.n_splits == 1u) {
            store4(qbase + 4u * i, head_value(i, lanes, l));
        } else {
            var o = vec4<f32>(0.0);
            for (var k = 0u; k < lanes; k = k + 1u) {
                o = o + lane_acc[k * d4 + i];
            }
            partials[piece_at * d4 + i] = o;
        }
    }
    if (p.n_splits > 1u && lid == 0u) {
        partials[ml_base() + piece_at] = vec4<f32>(m, l, 0.0, 0.0);
    }
}

// Prefill by KV head (entry point main_group, its own pipeline): one workgroup per (split,
// KV head, token), dispatched (n_splits, n_kv_heads, n_tokens), attends for the G =
// n_heads / n_kv_heads query heads (2 to 4) that read that KV head, so each key and value row
// is loaded once for all of them: a key's scores are a vec4 (one lane per query head; lanes
// past G are 0 and dropped), the softmax reductions take four at a time, each value slot is
// multiplied into G sums. The queries sit in lane_acc from TILE (after the tile's scores, at
// 0 ..) until the lanes' sums take it over at the end, one head after another. Each head's
// output, or its piece's partial result, is attend's. Not fused (prefill appends first).
@compute @workgroup_size(WG)
fn main_group(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    attend_group(wid, lid);
}

// Query head gi's vec4 c (rotated, pre-scaled) of the group.
fn group_q(gi: u32, c: u32) -> vec4<f32> {
    return lane_acc[TILE + gi * (p.head_dim / 4u) + c];
}

// The group's query heads . (16-byte slot c of a key row), 0 for c >= slots.
fn group_dot(w: vec4<u32>, c: u32, slots: u32) -> vec4<f32> {
    let kv = unpack_slot(w);
    let cc = min(c, slots - 1u);
    var r: vec4<f32>;
    if (p.kv_f16 == 1u) {
        let a = 2u * cc;
        r = vec4<f32>(
            dot(kv.lo, group_q(0u, a)) + dot(kv.hi, group_q(0u, a + 1u)),
            dot(kv.lo, group_q(1u, a)) + dot(kv.hi, group_q(1u, a + 1u)),
            dot(kv.lo, group_q(2u, a)) + dot(kv.hi, group_q(2u, a + 1u)),
            dot(kv.lo, group_q(3u, a)) + dot(kv.hi, group_q(3u, a + 1u)),
        );
    } else {
        r = vec4<f32>(dot(kv.lo, group_q(0u, cc)), dot(kv.lo, group_q(1u, cc)),
                      dot(kv.lo, group_q(2u, cc)), dot(kv.lo, group_q(3u, cc)));
    }
    return select(vec4<f32>(0.0), r, c < slots);
}

// a + p0 v0 + p1 v1 + p2 v2 + p3 v3, slot by slot.
fn slot_fma4(a: Slot, p4: vec4<f32>, v0: Slot, v1: Slot, v2: Slot, v3: Slot) -> Slot {
    return Slot(
        a.lo + ((p4.x * v0.lo + p4.y * v1.lo) + (p4.z * v2.lo + p4.w * v3.lo)),
        a.hi + ((p4.x * v0.hi + p4.y * v1.hi) + (p4.z * v2.hi + p4.w * v3.hi)),
    );
}

fn slot_scale(a: Slot, f: f32) -> Slot {
    return Slot(a.lo * f, a.hi * f);
}

fn attend_group(wid: vec3<u32>, lid: u32) {
    let split = wid.x;
    let kvh = wid.y;
    let token = wid.z;
    let d = p.head_dim;
    let d4 = d / 4u;
    let gs = p.n_heads / max(p.n_kv_heads, 1u);
    let h0 = kvh * gs;
    let first = first_key(token);
    let len = keys_seen(token) - first;
    let piece = piece_keys(len);
    let start = first + min(split * piece, len);
    let end = min(first + len, start + piece);
    if (start >= end) {
        return;
    }
    let pos = position.pos0 + token;
    for (var i = lid; i < gs * d; i = i + WG) {
        let gi = i / max(d, 1u);
        let j = i % max(d, 1u);
        let qbase = (token * p.n_heads + h0 + gi) * d;
        lane_acc[TILE + gi * d4 + j / 4u][j % 4u] = roped(0u, qbase, j, pos) * p.scale;
    }
    workgroupBarrier();

    let e = per_slot();
    let slots = max(d / max(e, 1u), 1u);
    let stride = p.n_kv_heads * slots;
    let head_off = kvh * slots;
    let q_per_slot = e / 4u;
    let lanes = max(WG / slots, 1u);
    let lane = lid / slots;
    let g = lid % slots;
    let live = vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(gs);
    let zero = Slot(vec4<f32>(0.0), vec4<f32>(0.0));
    var m = vec4<f32>(NEG_BIG);
    var l = vec4<f32>(0.0);
    var a0 = zero;
    var a1 = zero;
    var a2 = zero;
    var a3 = zero;
    for (var t0 = start; t0 < end; t0 = t0 + TILE) {
        let n = min(TILE, end - t0);
        // Scores: one thread per key, the G heads' at once.
        var local_max = vec4<f32>(NEG_BIG);
        for (var j = lid; j < n; j = j + WG) {
            let row = (t0 + j) * stride + head_off;
            let last = slots - 1u;
            var s = vec4<f32>(0.0);
            for (var c = 0u; c < slots; c = c + 4u) {
                let w0 = k_cache[row + c];
                let w1 = k_cache[row + min(c + 1u, last)];
                let w2 = k_cache[row + min(c + 2u, last)];
                let w3 = k_cache[row + min(c + 3u, last)];
                s = s + ((group_dot(w0, c, slots) + group_dot(w1, c + 1u, slots))
                    + (group_dot(w2, c + 2u, slots) + group_dot(w3, c + 3u, slots)));
            }
            s = select(vec4<f32>(0.0), vec4<f32>(capped(s.x), capped(s.y), capped(s.z), capped(s.w)), live);
            lane_acc[j] = s;
            local_max = max(local_max, s);
        }
        let m_new = max(m, workgroup_max4(local_max, lid));
        var local_sum = vec4<f32>(0.0);
        for (var j = lid; j < n; j = j + WG) {
            let pj = exp(lane_acc[j] - m_new);
            lane_acc[j] = pj;
            local_sum = local_sum + pj;
        }
        let alpha = exp(m - m_new);
        l = l * alpha + workgroup_sum4(local_sum, lid);
        a0 = slot_scale(a0, alpha.x);
        a1 = slot_scale(a1, alpha.y);
        a2 = slot_scale(a2, alpha.z);
        a3 = slot_scale(a3, alpha.w);
        if (lane < lanes) {
            // Four keys per step, as attend (keys past the tile clamped and weighted 0).
            let base = t0 * stride + head_off + g;
            let last = n - 1u;
            for (var j = lane; j < n; j = j + 4u * lanes) {
                let j1 = min(j + lanes, last);
                let j2 = min(j + 2u * lanes, last);
                let j3 = min(j + 3u * lanes, last);
                let v0 = unpack_slot(v_cache[base + j * stride]);
                let v1 = unpack_slot(v_cache[base + j1 * stride]);
                let v2 = unpack_slot(v_cache[base + j2 * stride]);
                let v3 = unpack_slot(v_cache[base + j3 * stride]);
                let p0 = lane_acc[j];
                let p1 = select(vec4<f32>(0.0), lane_acc[j1], j + lanes < n);
                let p2 = select(vec4<f32>(0.0), lane_acc[j2], j + 2u * lanes < n);
                let p3 = select(vec4<f32>(0.0), lane_acc[j3], j + 3u * lanes < n);
                a0 = slot_fma4(a0, vec4<f32>(p0.x, p1.x, p2.x, p3.x), v0, v1, v2, v3);
                a1 = slot_fma4(a1, vec4<f32>(p0.y, p1.y, p2.y, p3.y), v0, v1, v2, v3);
                a2 = slot_fma4(a2, vec4<f32>(p0.z, p1.z, p2.z, p3.z), v0, v1, v2, v3);
                a3 = slot_fma4(a3, vec4<f32>(p0.w, p1.w, p2.w, p3.w), v0, v1, v2, v3);
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    // Each head in turn: its lanes' sums through lane_acc, then its output or partial result.
    for (var gi = 0u; gi < gs; gi = gi + 1u) {
        let lo = select(select(select(a0.lo, a1.lo, gi == 1u), a2.lo, gi == 2u), a3.lo, gi == 3u);
        let hi = select(select(select(a0.hi, a1.hi, gi == 1u), a2.hi, gi == 2u), a3.hi, gi == 3u);
        put_lane_sums(lane, lanes, g, q_per_slot, Slot(lo, hi));
        workgroupBarrier();
        let head = h0 + gi;
        let piece_at = (token * p.n_heads + head) * p.n_splits + split;
        write_piece((token * p.n_heads + head) * d, piece_at, lanes, m[gi], l[gi], lid);
        workgroupBarrier();
    }
}

// Keys the query of token `token` sees.
fn keys_seen(token: u32) -> u32 {
    return min(position.pos0 + token + 1u, p.max_ctx);
}

// The first key the query of token `token` sees: with a window, the last `window` of them.
fn first_key(token: u32) -> u32 {
    let end = keys_seen(token);
    return select(0u, end - min(p.window, end), p.window > 0u);
}

// A score as the softmax takes it: soft-capped where softcap is set (tanh's argument clamped
// to [-10, 10], where tanh is +-1 in f32 already, so that no implementation sees infinities).
fn capped(s: f32) -> f32 {
    if (p.softcap > 0.0) {
        return p.softcap * tanh(clamp(s / p.softcap, -10.0, 10.0));
    }
    return s;
}

// Keys per piece when `len` keys are cut into at most n_splits pieces of at least min_split.
fn piece_keys(len: u32) -> u32 {
    return max((len + p.n_splits - 1u) / max(p.n_splits, 1u), p.min_split);
}

// Pieces of the context of token `token` that hold keys (the others are not written).
fn pieces_with_keys(token: u32) -> u32 {
    let len = keys_seen(token) - first_key(token);
    return (len + piece_keys(len) - 1u) / max(piece_keys(len), 1u);
}

// Where the (m, l) of the pieces start in `partials`.
fn ml_base() -> u32 {
    return p.n_tokens * p.n_heads * p.n_splits * (p.head_dim / 4u);
}

// The combine (mode 2), the decode entry point that combines in the attend (main_decode)
// and the output helpers they share with the attend are in attention_combine.wgsl.

// The KV cache and attention: storing keys and values, the split attention of decoding (and of
// exact prefills) with its merge, and flash attention on tensor cores for prefills over an f16
// cache.

// ---------------------------------------------------------------------------------------
// The KV cache: per sequence, `max_ctx` positions of `kv_row` values, f32 or f16 (rounded to
// nearest). Store the tokens' k and v at their positions. grid (ntok), block 256.
#define KV_STORE(name, T, CONV)                                                                \
    extern "C" __global__ void kv_store_##name(const float* k, const float* v, T* kc, T* vc,   \
                                               const u32* pos, const u32* seq, u32 kv_row,     \
                                               u32 max_ctx) {                                  \
        u32 t = blockIdx.x;                                                                    \
        u64 at = ((u64)seq[t] * max_ctx + pos[t]) * kv_row;                                    \
        for (u32 i = threadIdx.x; i < kv_row; i += blockDim.x) {                               \
            kc[at + i] = CONV(k[(u64)t * kv_row + i]);                                         \
            vc[at + i] = CONV(v[(u64)t * kv_row + i]);                                         \
        }                                                                                      \
    }
DEV float keep(float v) { return v; }
KV_STORE(f32, float, keep)
KV_STORE(f16, u16, f2h)

// RoPE of the tokens' q (heads) and k (kv_heads) in place, as `rope` computes it, then k and
// v stored as kv_store stores them: two RoPE ops and attention's store in one launch.
// grid (ntok), block 256.
DEV void kv_put(float* p, float v) { *p = v; }
DEV void kv_put(u16* p, float v) { *p = f2h(v); }
template <typename T>
DEV void rope_store(float* q, float* k, const float* v, T* kc, T* vc, const u32* pos,
                    const u32* seq, const double* freqs, u32 heads, u32 kv_heads, u32 head_dim,
                    u32 rot_dim, u32 style, u32 max_ctx) {
    __shared__ double2 cs[ROPE_MAX_HALF];
    u32 t = blockIdx.x;
    u32 half = rot_dim / 2;
    rope_angles(cs, (double)pos[t], freqs, half);
    for (u32 j = threadIdx.x; j < half * (heads + kv_heads); j += blockDim.x) {
        u32 h = j / half;
        float* x = h < heads ? q + ((u64)t * heads + h) * head_dim
                             : k + ((u64)t * kv_heads + h - heads) * head_dim;
        rope_pair(x, j % half, cs[j % half], half, style);
    }
    // The block's writes to k are visible to all its threads past the barrier.
    __syncthreads();
    u32 kv_row = kv_heads * head_dim;
    u64 at = ((u64)seq[t] * max_ctx + pos[t]) * kv_row;
    for (u32 i = threadIdx.x; i < kv_row; i += blockDim.x) {
        kv_put(kc + at + i, k[(u64)t * kv_row + i]);
        kv_put(vc + at + i, v[(u64)t * kv_row + i]);
    }
}
#define ROPE_STORE(name, T)                                                                    \
    extern "C" __global__ void rope_store_##name(                                              \
        float* q, float* k, const float* v, T* kc, T* vc, const u32* pos, const u32* seq,      \
        const double* freqs, u32 heads, u32 kv_heads, u32 head_dim, u32 rot_dim, u32 style,    \
        u32 max_ctx) {                                                                         \
        rope_store<T>(q, k, v, kc, vc, pos, seq, freqs, heads, kv_heads, head_dim, rot_dim,    \
                      style, max_ctx);                                                         \
    }
ROPE_STORE(f32, float)
ROPE_STORE(f16, u16)

DEV float kv_load(const float* p) { return *p; }
DEV float kv_load(const u16* p) { return h2f(*p); }

// Eight consecutive cache values (16-byte aligned) as f32.
DEV void kv_load8(const u16* p, float v[8]) {
    uint4 u = *(const uint4*)p;
    u32 w[4] = {u.x, u.y, u.z, u.w};
    UNROLL for (int i = 0; i < 4; i++) {
        v[2 * i] = h2f((u16)(w[i] & 0xffff));
        v[2 * i + 1] = h2f((u16)(w[i] >> 16));
    }
}
DEV void kv_load8(const float* p, float v[8]) {
    float4 a = ((const float4*)p)[0], b = ((const float4*)p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// Causal attention, split along positions: query (t, h) at position pos[t] attends to
// positions 0 ..= pos[t] of its sequence's cache; split s covers [s * split, (s + 1) * split).
// Each of the block's four warps takes every fourth group of 32 positions: lane j scores
// position j of the group alone (q from shared memory, the key row in 16-byte loads), the group
// joins the warp's online softmax, and the lanes, each holding dimensions l, l + 32, ..., add
// the group's values. The block merges its warps and writes (m, l, acc[head_dim]) to
// part[(t * heads + h) * nsplit + s] (m = -inf: an empty split). head_dim <= 256.
// With a window (window > 0) the query sees only positions pos[t] + 1 - window ..= pos[t]
// (splits before them are empty); with softcap > 0 each score s becomes
// softcap * tanh(s / softcap).
// grid (ntok * heads, nsplit), block 128.
template <typename T>
DEV void attention_part(const float* q, const T* kc, const T* vc, float* part, const u32* pos,
                        const u32* seq, u32 heads, u32 kv_heads, u32 head_dim, u32 max_ctx,
                        u32 split, u32 nsplit, u32 window, float softcap) {
    __shared__ float sm[4], sl[4], sacc[4][256];
    __shared__ float qs[256];
    u32 qh = blockIdx.x, s = blockIdx.y;
    u32 t = qh / heads, h = qh % heads;
    u32 kvh = h / (heads / kv_heads);
    u32 len = pos[t] + 1;
    u32 first = window > 0 && len > window ? len - window : 0;
    u32 start = max(s * split, first), end = min(len, s * split + split);
    u32 warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    float* out = part + ((u64)qh * nsplit + s) * (head_dim + 2);
    if (start >= end) {
        if (threadIdx.x == 0) {
            out[0] = -INFINITY;
            out[1] = 0.0f;
        }
        return;
    }
    u32 kv_row = kv_heads * head_dim;
    const u64 base = (u64)seq[t] * max_ctx * kv_row + (u64)kvh * head_dim;
    const float* qv = q + ((u64)t * heads + h) * head_dim;
    for (u32 d = threadIdx.x; d < head_dim; d += blockDim.x) qs[d] = qv[d];
    __syncthreads();
    float scale = 1.0f / sqrtf((float)head_dim);
    u32 nd = (head_dim + WARP - 1) / WARP;
    bool wide = head_dim % 8 == 0;
    float acc[8];
    UNROLL for (int j = 0; j < 8; j++) acc[j] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (u32 c0 = start + warp * WARP; c0 < end; c0 += 4 * WARP) {
        u32 p = c0 + lane;
        float sc = -INFINITY;
        if (p < end) {
            const T* kr = kc + base + (u64)p * kv_row;
            float dot = 0.0f;
            if (wide) {
                for (u32 d = 0; d < head_dim; d += 8) {
                    float kv[8];
                    kv_load8(kr + d, kv);
                    UNROLL for (int i = 0; i < 8; i++) dot += qs[d + i] * kv[i];
                }
            } else {
                for (u32 d = 0; d < head_dim; d++) dot += qs[d] * kv_load(kr + d);
            }
            sc = dot * scale;
            if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
        }
        // Lane 0's position is inside the split: the group's maximum is a number.
        float mn = fmaxf(m, warp_max(sc));
        float corr = expf(m - mn);
        float e = p < end ? expf(sc - mn) : 0.0f;
        l = l * corr + warp_sum(e);
        UNROLL for (int j = 0; j < 8; j++) acc[j] *= corr;
        u32 nvalid = min((u32)WARP, end - c0);
        for (u32 k = 0; k < nvalid; k++) {
            float ek = __shfl_sync(FULL, e, k);
            const T* vr = vc + base + (u64)(c0 + k) * kv_row;
            UNROLL for (int j = 0; j < 8; j++) {
                u32 d = lane + j * WARP;
                if (j < (int)nd && d < head_dim) acc[j] += ek * kv_load(vr + d);
            }
        }
        m = mn;
    }
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
    UNROLL for (int j = 0; j < 8; j++) {
        u32 d = lane + j * WARP;
        if (j < (int)nd && d < head_dim) sacc[warp][d] = acc[j];
    }
    __syncthreads();
    float M = fmaxf(fmaxf(sm[0], sm[1]), fmaxf(sm[2], sm[3]));
    float f[4];
    float L = 0.0f;
    for (int w = 0; w < 4; w++) {
        f[w] = sm[w] == -INFINITY ? 0.0f : expf(sm[w] - M);
        L += sl[w] * f[w];
    }
    for (u32 d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float a = 0.0f;
        for (int w = 0; w < 4; w++) a += sacc[w][d] * f[w];
        out[2 + d] = a;
    }
    if (threadIdx.x == 0) {
        out[0] = M;
        out[1] = L;
    }
}

extern "C" __global__ void attention_part_f32(const float* q, const float* kc, const float* vc,
                                              float* part, const u32* pos, const u32* seq,
                                              u32 heads, u32 kv_heads, u32 head_dim,
                                              u32 max_ctx, u32 split, u32 nsplit, u32 window,
                                              float softcap) {
    attention_part<float>(q, kc, vc, part, pos, seq, heads, kv_heads, head_dim, max_ctx, split,
                          nsplit, window, softcap);
}

extern "C" __global__ void attention_part_f16(const float* q, const u16* kc, const u16* vc,
                                              float* part, const u32* pos, const u32* seq,
                                              u32 heads, u32 kv_heads, u32 head_dim,
                                              u32 max_ctx, u32 split, u32 nsplit, u32 window,
                                              float softcap) {
    attention_part<u16>(q, kc, vc, part, pos, seq, heads, kv_heads, head_dim, max_ctx, split,
                        nsplit, window, softcap);
}

// The same split attention for the head dimensions a warp's lanes divide evenly (HD = 32 *
// DPL), a block per (token, KV head, up to ATT_HEADS of the group's query heads, split): the
// query heads that share a KV head read its keys and values once. The block's four warps take
// ATT_PPW positions at a time each (a split's positions in rounds of 4 ATT_PPW): the four
// lanes 4j .. 4j + 3 score position j of the warp's ATT_PPW against the block's query heads,
// each over a quarter of the key row (its loads all issued before the sums), the scores join
// each head's online softmax, and lane l, holding dimensions DPL l .. DPL l + DPL - 1, adds
// the ATT_PPW value rows (positions past the split's end read its last row, weighted 0: no
// load waits on a branch). Splits that begin past the token's position write nothing (the
// merge reads only splits that hold positions). grid (ntok * kv_heads * ceil(group /
// ATT_HEADS), nsplit), block 128.
#define ATT_HEADS 4
#define ATT_LPP 4
#define ATT_PPW (WARP / ATT_LPP)

// N consecutive cache values as f32 (p aligned to N elements where N is 2, 4 or 8).
template <int N>
DEV void kv_loadn(const u16* p, float v[N]) {
    if constexpr (N == 2) {
        u32 u = *(const u32*)p;
        v[0] = h2f((u16)(u & 0xffff));
        v[1] = h2f((u16)(u >> 16));
    } else if constexpr (N == 4) {
        uint2 u = *(const uint2*)p;
        v[0] = h2f((u16)(u.x & 0xffff));
        v[1] = h2f((u16)(u.x >> 16));
        v[2] = h2f((u16)(u.y & 0xffff));
        v[3] = h2f((u16)(u.y >> 16));
    } else if constexpr (N == 8) {
        kv_load8(p, v);
    } else {
        UNROLL for (int i = 0; i < N; i++) v[i] = h2f(p[i]);
    }
}
template <int N>
DEV void kv_loadn(const float* p, float v[N]) {
    if constexpr (N == 2) {
        float2 a = *(const float2*)p;
        v[0] = a.x, v[1] = a.y;
    } else if constexpr (N == 4) {
        float4 a = *(const float4*)p;
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    } else if constexpr (N == 8) {
        kv_load8(p, v);
    } else {
        UNROLL for (int i = 0; i < N; i++) v[i] = p[i];
    }
}

template <typename T, int HD>
DEV void attention_group(const float* q, const T* kc, const T* vc, float* part, const u32* pos,
                         const u32* seq, u32 heads, u32 kv_heads, u32 max_ctx, u32 split,
                         u32 nsplit) {
    constexpr int DPL = HD / WARP;
    // A lane's quarter of a key row, and q's quarters in shared memory 16 bytes apart (the
    // quarter-warp phases of its 16-byte reads fall in distinct banks).
    constexpr int KPL = HD / ATT_LPP, QS = ATT_LPP * (KPL + 4);
    __shared__ __align__(16) float qs[ATT_HEADS][QS];
    __shared__ float sm[4][ATT_HEADS], sl[4][ATT_HEADS];
    __shared__ float sacc[4][ATT_HEADS][HD];
    u32 group = heads / kv_heads;
    u32 per_kv = (group + ATT_HEADS - 1) / ATT_HEADS;
    u32 x = blockIdx.x, s = blockIdx.y;
    u32 t = x / (kv_heads * per_kv);
    u32 kvh = x % (kv_heads * per_kv) / per_kv;
    u32 h0 = kvh * group + x % per_kv * ATT_HEADS;
    u32 gb = min((u32)ATT_HEADS, (kvh + 1) * group - h0);
    u32 len = pos[t] + 1;
    u32 start = s * split, end = min(len, start + split);
    if (start >= len) return;
    u32 warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    u32 j = lane / ATT_LPP, u = lane % ATT_LPP;
    u32 kv_row = kv_heads * HD;
    const u64 base = (u64)seq[t] * max_ctx * kv_row + (u64)kvh * HD;
    for (u32 i = threadIdx.x; i < ATT_HEADS * HD; i += blockDim.x) {
        u32 g = i / HD, d = i % HD;
        qs[g][d / KPL * (KPL + 4) + d % KPL] =
            g < gb ? q[((u64)t * heads + h0 + g) * HD + d] : 0.0f;
    }
    __syncthreads();
    const float scale = 1.0f / sqrtf((float)HD);
    float acc[ATT_HEADS][DPL], m[ATT_HEADS], l[ATT_HEADS];
    UNROLL for (int g = 0; g < ATT_HEADS; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        UNROLL for (int i = 0; i < DPL; i++) acc[g][i] = 0.0f;
    }
    for (u32 c0 = start + warp * ATT_PPW; c0 < end; c0 += 4 * ATT_PPW) {
        u32 p = c0 + j;
        bool ok = p < end;
        const T* kr = kc + base + (u64)(ok ? p : end - 1) * kv_row + u * KPL;
        float dot[ATT_HEADS];
        UNROLL for (int g = 0; g < ATT_HEADS; g++) dot[g] = 0.0f;
        UNROLL for (int d = 0; d < KPL; d += 8) {
            float kv[8];
            kv_load8(kr + d, kv);
            UNROLL for (int g = 0; g < ATT_HEADS; g++) {
                if (g < (int)gb) {
                    const float* qq = &qs[g][u * (KPL + 4) + d];
                    float4 a = *(const float4*)qq, b = *(const float4*)(qq + 4);
                    dot[g] += a.x * kv[0] + a.y * kv[1] + a.z * kv[2] + a.w * kv[3] +
                              b.x * kv[4] + b.y * kv[5] + b.z * kv[6] + b.w * kv[7];
                }
            }
        }
        // Position c0 (lanes 0..3) is inside the split: each group maximum is a number.
        float e[ATT_HEADS];
        UNROLL for (int g = 0; g < ATT_HEADS; g++) {
            e[g] = 0.0f;
            if (g < (int)gb) {
                float dq = dot[g] + __shfl_xor_sync(FULL, dot[g], 1);
                dq += __shfl_xor_sync(FULL, dq, 2);
                float sc = ok ? dq * scale : -INFINITY;
                float mn = fmaxf(m[g], warp_max(sc));
                float corr = expf(m[g] - mn);
                e[g] = ok ? expf(sc - mn) : 0.0f;
                l[g] = l[g] * corr + warp_sum(u == 0 ? e[g] : 0.0f);
                UNROLL for (int i = 0; i < DPL; i++) acc[g][i] *= corr;
                m[g] = mn;
            }
        }
        const T* vb = vc + base + lane * DPL;
        float v[ATT_PPW][DPL];
        UNROLL for (int k = 0; k < ATT_PPW; k++)
            kv_loadn<DPL>(vb + (u64)min(c0 + k, end - 1) * kv_row, v[k]);
        UNROLL for (int k = 0; k < ATT_PPW; k++) {
            UNROLL for (int g = 0; g < ATT_HEADS; g++) {
                float ek = __shfl_sync(FULL, e[g], k * ATT_LPP);
                UNROLL for (int i = 0; i < DPL; i++) acc[g][i] += ek * v[k][i];
            }
        }
    }
    if (lane == 0) {
        UNROLL for (int g = 0; g < ATT_HEADS; g++) {
            sm[warp][g] = m[g];
            sl[warp][g] = l[g];
        }
    }
    UNROLL for (int g = 0; g < ATT_HEADS; g++)
        UNROLL for (int i = 0; i < DPL; i++) sacc[warp][g][lane * DPL + i] = acc[g][i];
    __syncthreads();
    for (u32 i = threadIdx.x; i < gb * HD; i += blockDim.x) {
        u32 g = i / HD, d = i % HD;
        float M = fmaxf(fmaxf(sm[0][g], sm[1][g]), fmaxf(sm[2][g], sm[3][g]));
        float a = 0.0f, L = 0.0f;
        for (int w = 0; w < 4; w++) {
            float f = sm[w][g] == -INFINITY ? 0.0f : expf(sm[w][g] - M);
            a += sacc[w][g][d] * f;
            L += sl[w][g] * f;
        }
        float* out = part + (((u64)t * heads + h0 + g) * nsplit + s) * (HD + 2);
        out[2 + d] = a;
        if (d == 0) {
            out[0] = M;
            out[1] = L;
        }
    }
}

#define ATTENTION_GROUP(name, T, HD)                                                           \
    extern "C" __global__ void __launch_bounds__(128)                                          \
        attention_group_##name##_##HD(const float* q, const T* kc, const T* vc, float* part,   \
                                      const u32* pos, const u32* seq, u32 heads, u32 kv_heads, \
                                      u32 max_ctx, u32 split, u32 nsplit) {                    \
        attention_group<T, HD>(q, kc, vc, part, pos, seq, heads, kv_heads, max_ctx, split,     \
                               nsplit);                                                        \
    }
ATTENTION_GROUP(f32, float, 64)
ATTENTION_GROUP(f32, float, 96)
ATTENTION_GROUP(f32, float, 128)
ATTENTION_GROUP(f32, float, 256)
ATTENTION_GROUP(f16, u16, 64)
ATTENTION_GROUP(f16, u16, 96)
ATTENTION_GROUP(f16, u16, 128)
ATTENTION_GROUP(f16, u16, 256)

// out[t, h, :] from the splits that hold positions of token t (the first ceil((pos[t] + 1) /
// split)); with xq given, also quantized in blocks of 32 as quantize_q8 does for the product
// that takes it (head_dim a multiple of 32: a block is one warp's values). grid (ntok * heads),
// block 128.
extern "C" __global__ void attention_merge(const float* part, float* out, const u32* pos,
                                           u32 heads, u32 head_dim, u32 split, u32 nsplit,
                                           i8* xq, float* xd) {
    // Thread s takes split s (nsplit <= blockDim.x): the splits' maxima, weights and sums are
    // one step each, and the outputs' sums read the weights from shared memory.
    __shared__ float f[128], red[4];
    u32 qh = blockIdx.x;
    u32 used = min(nsplit, (pos[qh / heads] + split) / split);
    const float* p = part + (u64)qh * nsplit * (head_dim + 2);
    u32 s = threadIdx.x, warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    float m = s < used ? p[s * (head_dim + 2)] : -INFINITY;
    float M = warp_max(m);
    if (lane == 0) red[warp] = M;
    __syncthreads();
    M = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
    float w = m == -INFINITY ? 0.0f : expf(m - M);
    f[s] = w;
    float L = warp_sum(s < used ? p[s * (head_dim + 2) + 1] * w : 0.0f);
    __syncthreads();
    if (lane == 0) red[warp] = L;
    __syncthreads();
    L = (red[0] + red[1]) + (red[2] + red[3]);
    for (u32 d0 = 0; d0 < head_dim; d0 += blockDim.x) {
        u32 d = d0 + threadIdx.x;
        if (d0 + warp * WARP >= head_dim) break;
        if (d >= head_dim) continue;  // head_dim not a multiple of 32 (and no xq)
        float a = 0.0f;
#pragma unroll 8
        for (u32 k = 0; k < used; k++) a += p[k * (head_dim + 2) + 2 + d] * f[k];
        u64 at = (u64)qh * head_dim + d;
        out[at] = a / L;
        if (xq) q8_block(a / L, xq + at, xd + at / 32, lane);
    }
}

// ---------------------------------------------------------------------------------------
// Flash attention over an f16 cache on tensor cores, for passes of more tokens than a graph
// takes (prefill): the same causal attention as attention_part + attention_merge, with the
// scores' and the outputs' products as mma.sync m16n8k16 (f16 operands, f32 sums). Query rows
// are pre-scaled by log2(e) / sqrt(head_dim) and rounded to f16; the softmax runs in base 2
// with the exact running row maximum; each p = 2^(s - m) <= 1 is rounded to f16 where it
// multiplies V, while l sums the f32 p.
// `tiles`: (first token, tokens) pairs, each inside one span of the batch (consecutive
// positions of one sequence), at most FA_Q tokens. grid (ntiles, heads), block 128: warp w
// takes the tile's query rows 16w .. 16w + 15. Keys in steps of FA_K through shared memory.
#define FA_Q 64
#define FA_K 64

DEV void mma_16816(float c[4], const u32 a[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 f16 matrices from shared memory, transposed (ldmatrix .trans): lanes 8j .. 8j + 7
// give the row addresses of matrix j, which lands in r[j].
DEV void ldmatrix_x4_trans(u32 r[4], const u16* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

DEV u32 pack_h2(float lo, float hi) { return (u32)f2h(lo) | ((u32)f2h(hi) << 16); }

template <int D>
DEV void flash_attention(const float* q, const u16* kc, const u16* vc, float* out,
                         const u32* tiles, const u32* pos, const u32* seq, u32 heads,
                         u32 kv_heads, u32 max_ctx) {
    // Rows padded by 8 halfs (16 bytes): the fragments' loads and ldmatrix's eight rows fall
    // in distinct banks.
    constexpr int S = D + 8;
    __shared__ __align__(16) u16 ks[FA_K * S];
    __shared__ __align__(16) u16 vs[FA_K * S];
    u32 t0 = tiles[2 * blockIdx.x], cnt = tiles[2 * blockIdx.x + 1];
    u32 h = blockIdx.y;
    u32 warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    u32 g = lane >> 2, tq = lane & 3;
    u32 kv_row = kv_heads * D;
    u32 p0 = pos[t0];
    u32 last = p0 + cnt - 1;
    u64 base = (u64)seq[t0] * max_ctx * kv_row + (u64)(h / (heads / kv_heads)) * D;
    const u16* kb = kc + base;
    const u16* vb = vc + base;
    const float scale = 1.4426950408889634f / sqrtf((float)D);

    // This thread's rows: r[0] = 16 warp + g and r[1] = r[0] + 8 of the tile.
    u32 r0 = warp * 16 + g, r1 = r0 + 8;
    bool ok0 = r0 < cnt, ok1 = r1 < cnt;
    u32 qp0 = p0 + r0, qp1 = p0 + r1;
    u32 qa[D / 16][4];
    UNROLL for (int kk = 0; kk < D / 16; kk++) {
        UNROLL for (int half = 0; half < 2; half++) {
            u32 r = half ? r1 : r0;
            bool ok = half ? ok1 : ok0;
            float2 x = make_float2(0.0f, 0.0f), y = x;
            if (ok) {
                const float* qr = q + ((u64)(t0 + r) * heads + h) * D + kk * 16 + 2 * tq;
                x = *(const float2*)qr;
                y = *(const float2*)(qr + 8);
            }
            qa[kk][half] = pack_h2(x.x * scale, x.y * scale);
            qa[kk][2 + half] = pack_h2(y.x * scale, y.y * scale);
        }
    }
    float o[D / 8][4];
    UNROLL for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    // A finite start: rows with every key so far masked keep p = 2^-inf = 0.
    float m0 = -1e30f, m1 = -1e30f, l0 = 0.0f, l1 = 0.0f;

    for (u32 k0 = 0; k0 <= last; k0 += FA_K) {
        __syncthreads();
        for (u32 i = threadIdx.x; i < FA_K * D / 8; i += blockDim.x) {
            u32 r = i / (D / 8), c = i % (D / 8) * 8;
            uint4 kx = make_uint4(0, 0, 0, 0), vx = kx;
            // Positions past the tile's last query are unwritten: zeros (a NaN there would
            // reach the outputs through 0 * NaN).
            if (k0 + r <= last) {
                kx = *(const uint4*)(kb + (u64)(k0 + r) * kv_row + c);
                vx = *(const uint4*)(vb + (u64)(k0 + r) * kv_row + c);
            }
            *(uint4*)(ks + r * S + c) = kx;
            *(uint4*)(vs + r * S + c) = vx;
        }
        __syncthreads();
        // Scores of this warp's 16 rows against the FA_K keys: n-tile j holds keys 8j .. 8j + 7,
        // s[j][0..1] row r0 (keys 8j + 2tq, + 1), s[j][2..3] row r1.
        float s[FA_K / 8][4];
        UNROLL for (int j = 0; j < FA_K / 8; j++) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
            UNROLL for (int kk = 0; kk < D / 16; kk++) {
                const u16* kr = ks + (j * 8 + g) * S + kk * 16 + 2 * tq;
                mma_16816(s[j], qa[kk], *(const u32*)kr, *(const u32*)(kr + 8));
            }
        }
        float mx0 = -INFINITY, mx1 = -INFINITY;
        UNROLL for (int j = 0; j < FA_K / 8; j++) {
            UNROLL for (int e = 0; e < 2; e++) {
                u32 p = k0 + j * 8 + 2 * tq + e;
                if (!ok0 || p > qp0) s[j][e] = -INFINITY;
                if (!ok1 || p > qp1) s[j][2 + e] = -INFINITY;
                mx0 = fmaxf(mx0, s[j][e]);
                mx1 = fmaxf(mx1, s[j][2 + e]);
            }
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(FULL, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(FULL, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(FULL, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(FULL, mx1, 2));
        float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        float c0 = exp2f(m0 - mn0), c1 = exp2f(m1 - mn1);
        m0 = mn0;
        m1 = mn1;
        float sum0 = 0.0f, sum1 = 0.0f;
        UNROLL for (int j = 0; j < FA_K / 8; j++) {
            s[j][0] = exp2f(s[j][0] - mn0);
            s[j][1] = exp2f(s[j][1] - mn0);
            s[j][2] = exp2f(s[j][2] - mn1);
            s[j][3] = exp2f(s[j][3] - mn1);
            sum0 += s[j][0] + s[j][1];
            sum1 += s[j][2] + s[j][3];
        }
        l0 = l0 * c0 + sum0;
        l1 = l1 * c1 + sum1;
        UNROLL for (int n = 0; n < D / 8; n++) {
            o[n][0] *= c0;
            o[n][1] *= c0;
            o[n][2] *= c1;
            o[n][3] *= c1;
        }
        // o += p V: the scores' accumulator layout is the A operand's (keys 16kk .. 16kk + 15
        // are n-tiles 2kk and 2kk + 1); V's B operands come transposed by ldmatrix, two
        // n-tiles of 8 dimensions per load.
        UNROLL for (int kk = 0; kk < FA_K / 16; kk++) {
            u32 pa[4] = {pack_h2(s[2 * kk][0], s[2 * kk][1]), pack_h2(s[2 * kk][2], s[2 * kk][3]),
                         pack_h2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                         pack_h2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            UNROLL for (int np = 0; np < D / 16; np++) {
                u32 b[4];
                ldmatrix_x4_trans(
                    b, vs + (kk * 16 + (lane & 7) + (lane >> 3 & 1) * 8) * S + np * 16 + (lane >> 4) * 8);
                mma_16816(o[2 * np], pa, b[0], b[1]);
                mma_16816(o[2 * np + 1], pa, b[2], b[3]);
            }
        }
    }
    l0 += __shfl_xor_sync(FULL, l0, 1);
    l0 += __shfl_xor_sync(FULL, l0, 2);
    l1 += __shfl_xor_sync(FULL, l1, 1);
    l1 += __shfl_xor_sync(FULL, l1, 2);
    UNROLL for (int n = 0; n < D / 8; n++) {
        if (ok0)
            *(float2*)(out + ((u64)(t0 + r0) * heads + h) * D + n * 8 + 2 * tq) =
                make_float2(o[n][0] / l0, o[n][1] / l0);
        if (ok1)
            *(float2*)(out + ((u64)(t0 + r1) * heads + h) * D + n * 8 + 2 * tq) =
                make_float2(o[n][2] / l1, o[n][3] / l1);
    }
}

#define FLASH(D)                                                                               \
    extern "C" __global__ void __launch_bounds__(128)                                          \
        flash_attention_##D(const float* q, const u16* kc, const u16* vc, float* out,          \
                            const u32* tiles, const u32* pos, const u32* seq, u32 heads,       \
                            u32 kv_heads, u32 max_ctx) {                                       \
        flash_attention<D>(q, kc, vc, out, tiles, pos, seq, heads, kv_heads, max_ctx);         \
    }
FLASH(64)
FLASH(96)
FLASH(128)

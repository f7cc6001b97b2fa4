// The ops, after common.cuh and quant.cuh. Every kernel is `extern "C"`; the ones over packed
// weights are instantiated once per format (FOR_EACH_FORMAT), named `<kernel>_<format>`.
//
// Layouts are row-major (`n` rows of `dim` values: x[row * dim + i]). Weights are rows of
// `row_bytes` bytes of blocks; every row has a whole number of 32-value chunks. Per-token
// positions and sequences come from device arrays (`pos`, `seq`), so a captured graph replays
// for any position.
//
// The kernels are in this order: reduce.cuh, products.cu, this file (norms, RoPE, elementwise
// functions, top-k), attention.cu.

// ---------------------------------------------------------------------------------------
// The residual add, RMSNorm and the quantization of the norm's output for the products that
// follow, in one kernel, each step computed as its own kernel computes it: x = x + y where y is
// given (written back to x), out = RMSNorm(x) = x / sqrt(mean(x^2) + eps) * weight in f64 as the
// CPU reference computes it, then per `mode`: 0 nothing (the RmsNorm op alone), 1 int8 blocks of
// 32 (quantize_q8), 2 BitLinear's per-row absmax (bitlinear_quantize). grid (rows), block 1024.
extern "C" __global__ void norm_fused(float* x, const float* y, const float* w, float* out,
                                      u32 dim, float eps, u32 mode, i8* xq, float* xd) {
    __shared__ double part[32];
    float* row = x + (u64)blockIdx.x * dim;
    const float* add = y ? y + (u64)blockIdx.x * dim : 0;
    float* o = out + (u64)blockIdx.x * dim;
    double ss = 0.0;
    for (u32 i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = row[i];
        if (add) {
            v = v + add[i];
            row[i] = v;
        }
        ss += (double)v * (double)v;
    }
    ss = warp_sum_d(ss);
    if (threadIdx.x % WARP == 0) part[threadIdx.x / WARP] = ss;
    __syncthreads();
    ss = 0.0;
    for (int i = 0; i < (int)(blockDim.x / WARP); i++) ss += part[i];
    double inv = 1.0 / sqrt(ss / (double)dim + (double)eps);
    // Each thread normalizes the values it added (so it reads its own writes).
    float m = 0.0f;
    for (u32 i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = (float)((double)row[i] * inv * (double)w[i]);
        o[i] = v;
        m = fmaxf(m, fabsf(v));
    }
    if (mode == 0) return;
    __syncthreads();
    if (mode == 1) {
        u32 lane = threadIdx.x % WARP;
        for (u32 b = threadIdx.x / WARP; b < dim / 32; b += blockDim.x / WARP) {
            u32 i = b * 32 + lane;
            q8_block(o[i], xq + (u64)blockIdx.x * dim + i,
                     xd + (u64)blockIdx.x * (dim / 32) + b, lane);
        }
        return;
    }
    m = block_max(m);
    float sc = 127.0f / fmaxf(m, 1e-5f);
    for (u32 i = threadIdx.x; i < dim; i += blockDim.x)
        xq[(u64)blockIdx.x * dim + i] = bit_code(o[i], sc);
    if (threadIdx.x == 0) xd[blockIdx.x] = sc;
}

// ---------------------------------------------------------------------------------------
// RoPE in place on x: (ntok, heads, head_dim); token t at position pos[t]. Pair i turns by
// pos * freqs[i] (f64), (a, b) -> (a cos - b sin, a sin + b cos) in f64, as the CPU does.
// rot_dim <= 2 ROPE_MAX_HALF (the host checks).
// style 0: pairs (2i, 2i + 1); 1: (i, i + rot_dim / 2). grid (ntok), block 256.
// The token's angles: cs[i] = (cos, sin) of pos * freqs[i] for the head's `half` pairs, in f64,
// each evaluated once by the block (every head turns its pair i by the same angle). Ends with
// the block's barrier.
#define ROPE_MAX_HALF 128
DEV void rope_angles(double2* cs, double p, const double* freqs, u32 half) {
    for (u32 i = threadIdx.x; i < half; i += blockDim.x) {
        double s, c;
        sincos(p * freqs[i], &s, &c);
        cs[i] = make_double2(c, s);
    }
    __syncthreads();
}

// Pair i of the head at v turned by its angle.
DEV void rope_pair(float* v, u32 i, double2 cs, u32 half, u32 style) {
    u32 ia = style == 0 ? 2 * i : i;
    u32 ib = style == 0 ? 2 * i + 1 : i + half;
    double a = v[ia], b = v[ib];
    // Rounded products, then the sum: no fused multiply-add, as the CPU computes it.
    v[ia] = (float)(__dmul_rn(a, cs.x) - __dmul_rn(b, cs.y));
    v[ib] = (float)(__dmul_rn(a, cs.y) + __dmul_rn(b, cs.x));
}

extern "C" __global__ void rope(float* x, const u32* pos, const double* freqs, u32 heads,
                                u32 head_dim, u32 rot_dim, u32 style) {
    __shared__ double2 cs[ROPE_MAX_HALF];
    u32 t = blockIdx.x;
    u32 half = rot_dim / 2;
    rope_angles(cs, (double)pos[t], freqs, half);
    // A thread per (pair, head).
    for (u32 k = threadIdx.x; k < half * heads; k += blockDim.x)
        rope_pair(x + ((u64)t * heads + k / half) * head_dim, k % half, cs[k % half], half, style);
}

// ---------------------------------------------------------------------------------------
// Elementwise, in f64 where the CPU reference is: 0 add (f32), 1 silu(a) * b,
// 2 max(a, 0)^2, 3 max(a, 0)^2 * b, 4 gelu(a) * b (GELU's tanh form). grid (ceil(len / 256)),
// block 256.
DEV float ew(u32 f, float x, float b) {
    if (f == 0) return x + b;
    if (f == 1) {
        double g = x;
        return (float)(g / (1.0 + exp(-g)) * (double)b);
    }
    if (f == 4) {
        double g = x;
        double z = 0.7978845608028654 * (g + 0.044715 * g * g * g);
        return (float)(0.5 * g * (1.0 + tanh(z)) * (double)b);
    }
    double r = x > 0.0f ? (double)x : 0.0;
    return f == 2 ? (float)(r * r) : (float)(r * r * (double)b);
}

extern "C" __global__ void elementwise(u32 f, float* out, const float* a, const float* b,
                                       u32 len) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= len) return;
    out[i] = ew(f, a[i], f == 2 ? 0.0f : b[i]);
}

// x = cap * tanh(x / cap) in place, in f64 as the CPU reference. grid (ceil(len / 256)),
// block 256.
extern "C" __global__ void softcap(float* x, u32 len, float cap) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= len) return;
    double c = cap;
    x[i] = (float)(c * tanh((double)x[i] / c));
}

// out[r, c] += bias[c] for rows x cols values. grid (ceil(rows * cols / 256)), block 256.
extern "C" __global__ void add_bias(float* out, const float* bias, u32 rows, u32 cols) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    out[i] += bias[i % cols];
}

// out[r, c] *= scale[c] for rows x cols values. grid (ceil(rows * cols / 256)), block 256.
extern "C" __global__ void scale_columns(float* out, const float* scale, u32 rows, u32 cols) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    out[i] *= scale[i % cols];
}

// elementwise, then its output quantized in blocks of 32 as quantize_q8 does (the product
// after it takes int8 activations). grid (ceil(len / 32 / 4)), block 128: a warp per block.
extern "C" __global__ void elementwise_q8(u32 f, float* out, const float* a, const float* b,
                                          u32 len, i8* xq, float* xd) {
    u32 blk = blockIdx.x * 4 + threadIdx.x / WARP;
    u32 lane = threadIdx.x % WARP;
    if (blk >= len / 32) return;
    u32 i = blk * 32 + lane;
    float y = ew(f, a[i], f == 2 ? 0.0f : b[i]);
    out[i] = y;
    q8_block(y, xq + i, xd + blk, lane);
}

// ---------------------------------------------------------------------------------------
// Top-k of each row of `logits` (k <= 64) in the order argmax and top-k select by: larger
// first, equal values by lower index, NaN after every number (NaNs by index).
#define NONE 0xffffffffu
DEV bool before(float a, u32 ia, float b, u32 ib) {
    // A missing candidate (index NONE) comes after every real one.
    if (ia == NONE || ib == NONE) return ib == NONE && ia != NONE;
    bool na = a != a, nb = b != b;
    if (na != nb) return nb;
    if (!na && a != b) return a > b;
    return ia < ib;
}

#define TOPK_MAX 64
#define TOPK_SEG 4096
#define TOPK_PER_THREAD 16

// The block's best (value, index) among the threads' candidates.
DEV void block_best(float& v, u32& i) {
    __shared__ float bv[8];
    __shared__ u32 bi[8];
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(FULL, v, o);
        u32 oi = __shfl_xor_sync(FULL, i, o);
        if (before(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
    __syncthreads();
    if (threadIdx.x % WARP == 0) {
        bv[threadIdx.x / WARP] = v;
        bi[threadIdx.x / WARP] = i;
    }
    __syncthreads();
    v = bv[0];
    i = bi[0];
    for (u32 w = 1; w < blockDim.x / WARP; w++) {
        if (before(bv[w], bi[w], v, i)) {
            v = bv[w];
            i = bi[w];
        }
    }
}

// Stage 1: the best k of each segment of TOPK_SEG values of row blockIdx.y.
// grid (ceil(vocab / TOPK_SEG), rows), block 256. Candidates: (rows, nseg, k); missing ones
// have index 0xffffffff.
extern "C" __global__ void topk_segments(const float* logits, u32 vocab, u32 k, float* cv,
                                         u32* ci) {
    u32 row = blockIdx.y, seg = blockIdx.x, nseg = gridDim.x;
    const float* l = logits + (u64)row * vocab;
    float v[TOPK_PER_THREAD];
    u32 taken = 0;
    u32 base = seg * TOPK_SEG;
    for (int j = 0; j < TOPK_PER_THREAD; j++) {
        u32 i = base + j * blockDim.x + threadIdx.x;
        v[j] = i < vocab ? l[i] : 0.0f;
        if (i >= vocab) taken |= 1u << j;
    }
    for (u32 round = 0; round < k; round++) {
        float bv = 0.0f;
        u32 bi = 0xffffffffu;
        for (int j = 0; j < TOPK_PER_THREAD; j++) {
            u32 i = base + j * blockDim.x + threadIdx.x;
            if (!(taken >> j & 1) && (bi == 0xffffffffu || before(v[j], i, bv, bi))) {
                bv = v[j];
                bi = i;
            }
        }
        // A thread with nothing left offers (-, 0xffffffff): it loses to every real one.
        if (bi == 0xffffffffu) bv = -INFINITY;
        float wv = bv;
        u32 wi = bi;
        block_best(wv, wi);
        if (wi != 0xffffffffu && wi >= base) {
            u32 j = (wi - base) / blockDim.x;
            if ((wi - base) % blockDim.x == threadIdx.x) taken |= 1u << j;
        }
        if (threadIdx.x == 0) {
            u64 at = ((u64)row * nseg + seg) * k + round;
            cv[at] = wv;
            ci[at] = wi;
        }
    }
}

// Stage 2: the best k of each row's candidates; `best` gets the last row's winner (what the
// next chained pass embeds). grid (rows), block 256; nseg * k <= 256 * TOPK_PER_THREAD.
extern "C" __global__ void topk_merge(const float* cv, const u32* ci, u32 nseg, u32 k,
                                      float* out_v, u32* out_i, u32* best) {
    u32 row = blockIdx.x;
    u32 n = nseg * k;
    float v[TOPK_PER_THREAD];
    u32 idx[TOPK_PER_THREAD];
    for (int j = 0; j < TOPK_PER_THREAD; j++) {
        u32 c = j * blockDim.x + threadIdx.x;
        bool ok = c < n && ci[(u64)row * n + c] != 0xffffffffu;
        v[j] = ok ? cv[(u64)row * n + c] : -INFINITY;
        idx[j] = ok ? ci[(u64)row * n + c] : 0xffffffffu;
    }
    for (u32 round = 0; round < k; round++) {
        float bv = -INFINITY;
        u32 bi = 0xffffffffu;
        int bj = -1;
        for (int j = 0; j < TOPK_PER_THREAD; j++) {
            if (idx[j] != 0xffffffffu && (bi == 0xffffffffu || before(v[j], idx[j], bv, bi))) {
                bv = v[j];
                bi = idx[j];
                bj = j;
            }
        }
        float wv = bv;
        u32 wi = bi;
        block_best(wv, wi);
        if (bj >= 0 && wi == bi) idx[bj] = 0xffffffffu;
        if (threadIdx.x == 0) {
            out_v[(u64)row * k + round] = wv;
            out_i[(u64)row * k + round] = wi;
            if (round == 0 && row == gridDim.x - 1) *best = wi;
        }
    }
}

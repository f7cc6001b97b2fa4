// The ops, after common.cuh and quant.cuh. Every kernel is `extern "C"`; the ones over packed
// weights are instantiated once per format (FOR_EACH_FORMAT), named `<kernel>_<format>`.
//
// Layouts are row-major (`n` rows of `dim` values: x[row * dim + i]). Weights are rows of
// `row_bytes` bytes of blocks; every row has a whole number of 32-value chunks. Per-token
// positions and sequences come from device arrays (`pos`, `seq`), so a captured graph replays
// for any position.

#define WARP 32
#define FULL 0xffffffffu
// Loops over small arrays run to a constant bound (token loops break at `ntok`), so that the
// arrays stay in registers instead of local memory.
#define UNROLL _Pragma("unroll")

DEV float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

DEV double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

DEV float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
    return v;
}

// The largest of the block's threads' values (fmaxf: NaNs dropped); every thread calls it.
DEV float block_max(float m) {
    __shared__ float part[32];
    m = warp_max(m);
    if (threadIdx.x % WARP == 0) part[threadIdx.x / WARP] = m;
    __syncthreads();
    m = 0.0f;
    for (int i = 0; i < (int)(blockDim.x / WARP); i++) m = fmaxf(m, part[i]);
    return m;
}

DEV int dp4a(int a, int b, int c) {
    int r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

// sum over the chunk's groups of sc * sum(code * x) + of * sum(x), codes and x as packed int8.
DEV float int_dot(const int q[8], const int x[8], int groups, const float sc[2], const float of[2]) {
    int si0 = 0, sx0 = 0, si1 = 0, sx1 = 0;
    UNROLL for (int i = 0; i < 4; i++) {
        si0 = dp4a(q[i], x[i], si0);
        sx0 = dp4a(0x01010101, x[i], sx0);
    }
    UNROLL for (int i = 4; i < 8; i++) {
        si1 = dp4a(q[i], x[i], si1);
        sx1 = dp4a(0x01010101, x[i], sx1);
    }
    if (groups == 1) return sc[0] * (float)(si0 + si1) + of[0] * (float)(sx0 + sx1);
    return (sc[0] * (float)si0 + of[0] * (float)sx0) + (sc[1] * (float)si1 + of[1] * (float)sx1);
}

// The 32 values of chunk `c` (global index within the row) of a row of format F.
template <typename F>
DEV void row_chunk(const u8* row, u32 c, float out[32]) {
    const u32 per_block = F::BE / 32;
    F::chunk(row + (u64)(c / per_block) * F::BB, c % per_block, out);
}

template <typename F>
DEV int row_int_chunk(const u8* row, u32 c, int q[8], float sc[2], float of[2]) {
    const u32 per_block = F::BE / 32;
    return F::int_chunk(row + (u64)(c / per_block) * F::BB, c % per_block, q, sc, of);
}

// ---------------------------------------------------------------------------------------
// Embedding: out[t, :] = scale * row ids[t] of the table (rows past `vocab` give zeros).
// grid (tokens), block 128.
template <typename F>
DEV void embed(const u8* w, u64 row_bytes, const u32* ids, float* out, u32 cols, u32 vocab,
               float scale) {
    u32 t = blockIdx.x;
    u32 id = ids[t];
    float* y = out + (u64)t * cols;
    for (u32 c = threadIdx.x; c < cols / 32; c += blockDim.x) {
        float v[32];
        if (id < vocab) {
            row_chunk<F>(w + (u64)id * row_bytes, c, v);
        } else {
            for (int i = 0; i < 32; i++) v[i] = 0.0f;
        }
        for (int i = 0; i < 32; i++) y[c * 32 + i] = scale != 1.0f ? v[i] * scale : v[i];
    }
}

// ---------------------------------------------------------------------------------------
// Products of few tokens (`ntok` <= 8). `wpr` (1, 2 or 4) of the block's four warps share a
// weight row: warp w takes row blockIdx.x * (4 / wpr) + w / wpr, and lane l of its part
// (w % wpr) takes chunks (w % wpr) * 32 + l, then every 32 * wpr further. Each warp sums its
// lanes, then the row's warps are added in order through shared memory.
// grid (ceil(rows / (4 / wpr))), block 128.
#define GEMV_MAX_TOKENS 8
struct RowPart {
    u32 r, first, step;
};

DEV RowPart row_part(u32 wpr) {
    u32 w = threadIdx.x / WARP;
    RowPart p;
    p.r = blockIdx.x * (4 / wpr) + w / wpr;
    p.first = (w % wpr) * WARP + threadIdx.x % WARP;
    p.step = WARP * wpr;
    return p;
}

// The row's sum per token into acc of the thread that returns true (lane 0 of the row's first
// warp). Every thread of the block calls it.
DEV bool row_sums(float acc[GEMV_MAX_TOKENS], u32 ntok, u32 wpr) {
    __shared__ float red[4][GEMV_MAX_TOKENS];
    u32 w = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    UNROLL for (int t = 0; t < GEMV_MAX_TOKENS; t++)
        if (t < (int)ntok) acc[t] = warp_sum(acc[t]);
    if (wpr == 1) return lane == 0;
    if (lane == 0) UNROLL for (int t = 0; t < GEMV_MAX_TOKENS; t++) red[w][t] = acc[t];
    __syncthreads();
    if (w % wpr != 0 || lane != 0) return false;
    UNROLL for (int t = 0; t < GEMV_MAX_TOKENS; t++) {
        float s = red[w][t];
        for (u32 k = 1; k < wpr; k++) s += red[w + k][t];
        acc[t] = s;
    }
    return true;
}

// On f32 activations: y[t, r] = scale * W[r, :] . x[t, :].
template <typename F>
DEV void gemv(const u8* w, u64 row_bytes, const float* x, float* y, u32 rows, u32 cols, u32 ntok,
              float scale, RowPart p, bool valid, u32 wpr) {
    u32 r = p.r;
    const u8* row = w + (u64)r * row_bytes;
    float acc[GEMV_MAX_TOKENS];
    for (int t = 0; t < GEMV_MAX_TOKENS; t++) acc[t] = 0.0f;
    // Unrolled: the loads of several chunks are in flight at once.
#pragma unroll 4
    for (u32 c = p.first; valid && c < cols / 32; c += p.step) {
        float v[32];
        row_chunk<F>(row, c, v);
        UNROLL for (int t = 0; t < GEMV_MAX_TOKENS; t++) {
            if (t >= (int)ntok) break;
            const float4* xs = (const float4*)(x + (u64)t * cols + c * 32);
            float s = 0.0f;
            for (int i = 0; i < 8; i++) {
                float4 a = xs[i];
                s += v[4 * i] * a.x + v[4 * i + 1] * a.y + v[4 * i + 2] * a.z + v[4 * i + 3] * a.w;
            }
            acc[t] += s;
        }
    }
    if (row_sums(acc, ntok, wpr) && valid)
        UNROLL for (int t = 0; t < GEMV_MAX_TOKENS; t++)
            if (t < (int)ntok) y[(u64)t * rows + r] = acc[t] * scale;
}

// ---------------------------------------------------------------------------------------
// Int8 activations (Activations::Q8): each token's row quantized in blocks of 32 with
// iscale = 127 / amax (blocks with amax < 1e-30 or not finite: zeros, d = 0), q =
// clamp(round-half-even(x * iscale), -127, 127), d = 1 / iscale.
// grid (cols / 32 / 4, ntok), block 128: one warp per block of 32.
// One block of 32 (a warp, value v in each lane): the lane's code, and the block's d from lane 0.
DEV void q8_block(float v, i8* q_out, float* d_out, u32 lane) {
    float amax = warp_max(fabsf(v));
    // fmaxf drops NaNs; a NaN in the block makes the CPU's fold see it as not finite only when
    // it is the maximum, which fmaxf also ignores, so both treat NaN as absent.
    i8 q = 0;
    float d = 0.0f;
    if (amax >= 1e-30f && amax <= 3.402823466e38f) {
        float iscale = 127.0f / amax;
        float r = rintf(v * iscale);
        // A NaN converts to 0, as the CPU's saturating cast makes it.
        q = r != r ? 0 : (i8)fminf(fmaxf(r, -127.0f), 127.0f);
        d = 1.0f / iscale;
    }
    *q_out = q;
    if (lane == 0) *d_out = d;
}

extern "C" __global__ void quantize_q8(const float* x, i8* xq, float* xd, u32 cols) {
    u32 b = blockIdx.x * 4 + threadIdx.x / WARP;
    u32 lane = threadIdx.x % WARP;
    if (b >= cols / 32) return;
    u64 at = (u64)blockIdx.y * cols + b * 32 + lane;
    q8_block(x[at], xq + at, xd + (u64)blockIdx.y * (cols / 32) + b, lane);
}

// y[t, r] = scale * sum over chunks of d8 * (sc * sum(code * q) + of * sum(q)), per group.
// Rows as `gemv`.
template <typename F>
DEV void gemv_q8(const u8* w, u64 row_bytes, const i8* xq, const float* xd, float* y, u32 rows,
                 u32 cols, u32 ntok, float scale, RowPart p, bool valid, u32 wpr) {
    u32 r = p.r;
    const u8* row = w + (u64)r * row_bytes;
    float acc[GEMV_MAX_TOKENS];
    for (int t = 0; t < GEMV_MAX_TOKENS; t++) acc[t] = 0.0f;
    // Unrolled: the loads of several chunks are in flight at once.
#pragma unroll 4
    for (u32 c = p.first; valid && c < cols / 32; c += p.step) {
        int q[8];
        float sc[2], of[2];
        int groups = row_int_chunk<F>(row, c, q, sc, of);
        UNROLL for (int t = 0; t < GEMV_MAX_TOKENS; t++) {
            if (t >= (int)ntok) break;
            const int4* xs = (const int4*)(xq + (u64)t * cols + c * 32);
            int4 a0 = xs[0], a1 = xs[1];
            int xv[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            float d8 = xd[(u64)t * (cols / 32) + c];
            acc[t] += d8 * int_dot(q, xv, groups, sc, of);
        }
    }
    if (row_sums(acc, ntok, wpr) && valid)
        UNROLL for (int t = 0; t < GEMV_MAX_TOKENS; t++)
            if (t < (int)ntok) y[(u64)t * rows + r] = acc[t] * scale;
}

// ---------------------------------------------------------------------------------------
// BitLinear (ternary weights): per-token int8 absmax quantization as transformers does it:
// s = 127 / max(amax, 1e-5), q = clamp(round-half-even(x * s), -128, 127).
// grid (ntok), block 256.
DEV i8 bit_code(float v, float sc) {
    float r = rintf(v * sc);
    return r != r ? 0 : (i8)fminf(fmaxf(r, -128.0f), 127.0f);
}

extern "C" __global__ void bitlinear_quantize(const float* x, i8* xq, float* s, u32 cols) {
    const float* row = x + (u64)blockIdx.x * cols;
    float m = 0.0f;
    for (u32 i = threadIdx.x; i < cols; i += blockDim.x) m = fmaxf(m, fabsf(row[i]));
    m = block_max(m);
    float sc = 127.0f / fmaxf(m, 1e-5f);
    for (u32 i = threadIdx.x; i < cols; i += blockDim.x)
        xq[(u64)blockIdx.x * cols + i] = bit_code(row[i], sc);
    if (threadIdx.x == 0) s[blockIdx.x] = sc;
}

// y[t, r] = (W[r, :] . q[t, :]) * scale / s[t], the dot as the weight's groups
// (sc * sum(code * q) + of * sum(q)), exact integers for I2_S.
// Rows as `gemv`.
template <typename F>
DEV void bitlinear(const u8* w, u64 row_bytes, const i8* xq, const float* s, float* y, u32 rows,
                   u32 cols, u32 ntok, float scale, RowPart p, bool valid, u32 wpr) {
    u32 r = p.r;
    const u8* row = w + (u64)r * row_bytes;
    float acc[GEMV_MAX_TOKENS];
    for (int t = 0; t < GEMV_MAX_TOKENS; t++) acc[t] = 0.0f;
    // Unrolled: the loads of several chunks are in flight at once.
#pragma unroll 4
    for (u32 c = p.first; valid && c < cols / 32; c += p.step) {
        int q[8];
        float sc[2], of[2];
        int groups = row_int_chunk<F>(row, c, q, sc, of);
        UNROLL for (int t = 0; t < GEMV_MAX_TOKENS; t++) {
            if (t >= (int)ntok) break;
            const int4* xs = (const int4*)(xq + (u64)t * cols + c * 32);
            int4 a0 = xs[0], a1 = xs[1];
            int xv[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            acc[t] += int_dot(q, xv, groups, sc, of);
        }
    }
    if (row_sums(acc, ntok, wpr) && valid)
        UNROLL for (int t = 0; t < GEMV_MAX_TOKENS; t++)
            if (t < (int)ntok) y[(u64)t * rows + r] = acc[t] * scale / s[t];
}

// ---------------------------------------------------------------------------------------
// Weights decoded for tensor-core and cuBLAS products: out[r, :] as f16 (each value rounded
// to the nearest f16) or as f32. grid (ceil(rows * cols / 32 / 128)), block 128: one chunk
// per thread.
template <typename F>
DEV void dequant_f16(const u8* w, u64 row_bytes, u16* out, u32 rows, u32 cols) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u32 per_row = cols / 32;
    if (i >= (u64)rows * per_row) return;
    u32 r = (u32)(i / per_row), c = (u32)(i % per_row);
    float v[32];
    row_chunk<F>(w + (u64)r * row_bytes, c, v);
    u32* o = (u32*)(out + (u64)r * cols + c * 32);
    for (int k = 0; k < 16; k++) o[k] = (u32)f2h(v[2 * k]) | ((u32)f2h(v[2 * k + 1]) << 16);
}

template <typename F>
DEV void dequant_f32(const u8* w, u64 row_bytes, float* out, u32 rows, u32 cols) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u32 per_row = cols / 32;
    if (i >= (u64)rows * per_row) return;
    u32 r = (u32)(i / per_row), c = (u32)(i % per_row);
    float v[32];
    row_chunk<F>(w + (u64)r * row_bytes, c, v);
    float4* o = (float4*)(out + (u64)r * cols + c * 32);
    for (int k = 0; k < 8; k++) o[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
}

// I2_S codes as int8 (-1, 0, 1; code 3: 2), row-major, for the int8 products of BitLinear
// prefills. grid (ceil(rows * cols / 32 / 128)), block 128: one chunk per thread.
extern "C" __global__ void dequant_i8_i2_s(const u8* w, u64 row_bytes, i8* out, u32 rows,
                                           u32 cols) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u32 per_row = cols / 32;
    if (i >= (u64)rows * per_row) return;
    u32 r = (u32)(i / per_row), c = (u32)(i % per_row);
    int q[8];
    float sc[2], of[2];
    row_int_chunk<FMT_I2_S>(w + (u64)r * row_bytes, c, q, sc, of);
    int4* o = (int4*)(out + (u64)r * cols + c * 32);
    o[0] = make_int4(q[0], q[1], q[2], q[3]);
    o[1] = make_int4(q[4], q[5], q[6], q[7]);
}

// BitLinear's result from the int8 product's exact sums: y = (float)sum * scale / s[t], as
// `bitlinear` computes it from the same integers. In place over the int32 sums.
// grid (ceil(rows * ntok / 256)), block 256.
extern "C" __global__ void bitlinear_scale(float* y, const float* s, u32 rows, u32 ntok,
                                           float scale) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (u64)rows * ntok) return;
    int v = ((const int*)y)[i];
    y[i] = (float)v * scale / s[i / rows];
}

#define INSTANTIATE(name, F)                                                                   \
    extern "C" __global__ void embed_##name(const u8* w, u64 rb, const u32* ids, float* out,   \
                                            u32 cols, u32 vocab, float scale) {                \
        embed<F>(w, rb, ids, out, cols, vocab, scale);                                         \
    }                                                                                          \
    extern "C" __global__ void gemv_##name(const u8* w, u64 rb, const float* x, float* y,      \
                                           u32 rows, u32 cols, u32 ntok, float scale,          \
                                           u32 wpr) {                                          \
        RowPart p = row_part(wpr);                                                             \
        gemv<F>(w, rb, x, y, rows, cols, ntok, scale, p, p.r < rows, wpr);                     \
    }                                                                                          \
    extern "C" __global__ void dequant_f16_##name(const u8* w, u64 rb, u16* out, u32 rows,     \
                                                  u32 cols) {                                  \
        dequant_f16<F>(w, rb, out, rows, cols);                                                \
    }                                                                                          \
    extern "C" __global__ void dequant_f32_##name(const u8* w, u64 rb, float* out, u32 rows,   \
                                                  u32 cols) {                                  \
        dequant_f32<F>(w, rb, out, rows, cols);                                                \
    }
FOR_EACH_FORMAT(INSTANTIATE)

// Up to three products of one format and width over the same int8 activations in one launch
// (Q, K and V; gate and up): the grid covers their rows one after the other (rows 0 for an
// absent one).
#define PRODUCTS_PARAMS                                                                        \
    const u8 *w0, u64 rb0, float *y0, u32 rows0, float sc0, const u8 *w1, u64 rb1, float *y1,  \
        u32 rows1, float sc1, const u8 *w2, u64 rb2, float *y2, u32 rows2, float sc2
// The product of the warp's global row (p.r becomes its row there; valid: a row of one).
#define PICK_PRODUCT                                                                           \
    RowPart p = row_part(wpr);                                                                 \
    u32 r = p.r;                                                                               \
    const u8* w = w0;                                                                          \
    u64 rb = rb0;                                                                              \
    float* y = y0;                                                                             \
    u32 rows = rows0;                                                                          \
    float scale = sc0;                                                                         \
    if (r >= rows0) {                                                                          \
        r -= rows0;                                                                            \
        w = w1, rb = rb1, y = y1, rows = rows1, scale = sc1;                                   \
        if (r >= rows1) {                                                                      \
            r -= rows1;                                                                        \
            w = w2, rb = rb2, y = y2, rows = rows2, scale = sc2;                               \
        }                                                                                      \
    }                                                                                          \
    p.r = r;                                                                                   \
    bool valid = r < rows;

#define INSTANTIATE_INT(name, F)                                                               \
    extern "C" __global__ void gemv_q8_##name(const u8* w, u64 rb, const i8* xq,               \
                                              const float* xd, float* y, u32 rows, u32 cols,   \
                                              u32 ntok, float scale, u32 wpr) {                \
        RowPart p = row_part(wpr);                                                             \
        gemv_q8<F>(w, rb, xq, xd, y, rows, cols, ntok, scale, p, p.r < rows, wpr);             \
    }                                                                                          \
    extern "C" __global__ void bitlinear_##name(const u8* w, u64 rb, const i8* xq,             \
                                                const float* s, float* y, u32 rows, u32 cols,  \
                                                u32 ntok, float scale, u32 wpr) {              \
        RowPart p = row_part(wpr);                                                             \
        bitlinear<F>(w, rb, xq, s, y, rows, cols, ntok, scale, p, p.r < rows, wpr);            \
    }                                                                                          \
    extern "C" __global__ void gemv_q8_multi_##name(PRODUCTS_PARAMS, const i8* xq,              \
                                                    const float* xd, u32 cols, u32 ntok,       \
                                                    u32 wpr) {                                 \
        PICK_PRODUCT                                                                           \
        gemv_q8<F>(w, rb, xq, xd, y, rows, cols, ntok, scale, p, valid, wpr);                  \
    }                                                                                          \
    extern "C" __global__ void bitlinear_multi_##name(PRODUCTS_PARAMS, const i8* xq,            \
                                                      const float* s, u32 cols, u32 ntok,      \
                                                      u32 wpr) {                               \
        PICK_PRODUCT                                                                           \
        bitlinear<F>(w, rb, xq, s, y, rows, cols, ntok, scale, p, valid, wpr);                 \
    }
FOR_EACH_INT_FORMAT(INSTANTIATE_INT)

// ---------------------------------------------------------------------------------------
// f16 operands of a product (Activations::F16): each row scaled by the power of two that
// brings its largest magnitude into [1, 2) (exponent clamped to 1 ..= 253; a zero row: 1),
// rounded to f16; `back` the inverse power. grid (ntok), block 256.
extern "C" __global__ void f16_operands(const float* x, u16* xh, float* back, u32 cols) {
    const float* row = x + (u64)blockIdx.x * cols;
    float m = 0.0f;
    for (u32 i = threadIdx.x; i < cols; i += blockDim.x) m = fmaxf(m, fabsf(row[i]));
    m = block_max(m);
    float scale = 1.0f, inv = 1.0f;
    if (m != 0.0f) {
        u32 e = (f2bits(m) >> 23) & 0xff;
        e = e < 1 ? 1 : (e > 253 ? 253 : e);
        scale = bits2f((254 - e) << 23);
        inv = bits2f(e << 23);
    }
    for (u32 i = threadIdx.x; i < cols; i += blockDim.x)
        xh[(u64)blockIdx.x * cols + i] = f2h(row[i] * scale);
    if (threadIdx.x == 0) back[blockIdx.x] = inv;
}

// y[t, r] = y[t, r] * back[t] * scale (back: null for 1). grid (ceil(rows * ntok / 256)).
extern "C" __global__ void scale_rows(float* y, const float* back, u32 rows, u32 ntok,
                                      float scale) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (u64)rows * ntok) return;
    float v = y[i];
    if (back) v = v * back[i / rows];
    y[i] = v * scale;
}

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
// style 0: pairs (2i, 2i + 1); 1: (i, i + rot_dim / 2). grid (ntok), block 256.
extern "C" __global__ void rope(float* x, const u32* pos, const double* freqs, u32 heads,
                                u32 head_dim, u32 rot_dim, u32 style) {
    u32 t = blockIdx.x;
    u32 half = rot_dim / 2;
    double p = (double)pos[t];
    // A thread per (pair, head): each evaluates its pair's angle itself.
    for (u32 k = threadIdx.x; k < half * heads; k += blockDim.x) {
        u32 i = k % half, h = k / half;
        double s, c;
        sincos(p * freqs[i], &s, &c);
        u32 ia = style == 0 ? 2 * i : i;
        u32 ib = style == 0 ? 2 * i + 1 : i + half;
        float* v = x + ((u64)t * heads + h) * head_dim;
        double a = v[ia], b = v[ib];
        // Rounded products, then the sum: no fused multiply-add, as the CPU computes it.
        v[ia] = (float)(__dmul_rn(a, c) - __dmul_rn(b, s));
        v[ib] = (float)(__dmul_rn(a, s) + __dmul_rn(b, c));
    }
}

// ---------------------------------------------------------------------------------------
// Elementwise, in f64 where the CPU reference is: 0 add (f32), 1 silu(a) * b,
// 2 max(a, 0)^2, 3 max(a, 0)^2 * b. grid (ceil(len / 256)), block 256.
DEV float ew(u32 f, float x, float b) {
    if (f == 0) return x + b;
    if (f == 1) {
        double g = x;
        return (float)(g / (1.0 + exp(-g)) * (double)b);
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
// grid (ntok * heads, nsplit), block 128.
template <typename T>
DEV void attention_part(const float* q, const T* kc, const T* vc, float* part, const u32* pos,
                        const u32* seq, u32 heads, u32 kv_heads, u32 head_dim, u32 max_ctx,
                        u32 split, u32 nsplit) {
    __shared__ float sm[4], sl[4], sacc[4][256];
    __shared__ float qs[256];
    u32 qh = blockIdx.x, s = blockIdx.y;
    u32 t = qh / heads, h = qh % heads;
    u32 kvh = h / (heads / kv_heads);
    u32 len = pos[t] + 1;
    u32 start = s * split, end = min(len, start + split);
    u32 warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    float* out = part + ((u64)qh * nsplit + s) * (head_dim + 2);
    if (start >= len) {
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
                                              u32 max_ctx, u32 split, u32 nsplit) {
    attention_part<float>(q, kc, vc, part, pos, seq, heads, kv_heads, head_dim, max_ctx, split,
                          nsplit);
}

extern "C" __global__ void attention_part_f16(const float* q, const u16* kc, const u16* vc,
                                              float* part, const u32* pos, const u32* seq,
                                              u32 heads, u32 kv_heads, u32 head_dim,
                                              u32 max_ctx, u32 split, u32 nsplit) {
    attention_part<u16>(q, kc, vc, part, pos, seq, heads, kv_heads, head_dim, max_ctx, split,
                        nsplit);
}

// out[t, h, :] from the splits' (m, l, acc). grid (ntok * heads), block 128.
extern "C" __global__ void attention_merge(const float* part, float* out, u32 head_dim,
                                           u32 nsplit) {
    u32 qh = blockIdx.x;
    const float* p = part + (u64)qh * nsplit * (head_dim + 2);
    float M = -INFINITY;
    for (u32 s = 0; s < nsplit; s++) M = fmaxf(M, p[s * (head_dim + 2)]);
    float L = 0.0f;
    for (u32 s = 0; s < nsplit; s++) {
        float m = p[s * (head_dim + 2)];
        if (m != -INFINITY) L += p[s * (head_dim + 2) + 1] * expf(m - M);
    }
    for (u32 d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float a = 0.0f;
        for (u32 s = 0; s < nsplit; s++) {
            float m = p[s * (head_dim + 2)];
            if (m != -INFINITY) a += p[s * (head_dim + 2) + 2 + d] * expf(m - M);
        }
        out[(u64)qh * head_dim + d] = a / L;
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

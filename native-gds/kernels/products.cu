// The products and what feeds them: embedding rows, the few-token products (f32, int8 and
// BitLinear, one weight or up to three in one launch), the activations' int8 and f16 forms, and
// the weights decoded for cuBLAS. Kernels over packed weights are instantiated once per format
// (FOR_EACH_FORMAT), named `<kernel>_<format>`.

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
// Blocks of `block` bytes at src into the first bytes of slots of `slot` bytes at dst: Q6_K's
// device layout (224-byte slots) from its file bytes, for weights read again from storage.
// grid (ceil(nblocks / 4)), block 128: a warp per block.
extern "C" __global__ void pad_blocks(const u8* src, u8* dst, u32 nblocks, u32 block, u32 slot) {
    u32 b = blockIdx.x * 4 + threadIdx.x / WARP;
    if (b >= nblocks) return;
    for (u32 i = threadIdx.x % WARP; i < block; i += WARP)
        dst[(u64)b * slot + i] = src[(u64)b * block + i];
}

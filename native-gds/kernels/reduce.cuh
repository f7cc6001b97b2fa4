// Shared by the kernels after common.cuh and quant.cuh: warp and block reductions, the int8
// dot product of a chunk, and a row's chunks by global index.

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

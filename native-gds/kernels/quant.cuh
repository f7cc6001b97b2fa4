// Weight decoders, one struct per GGUF block format, read by the GEMV, embedding and
// dequantize kernels. Each decodes one unit of 32 consecutive values of a block:
//   chunk(b, c, out)         values 32c..32c+31 of the block at b, as f32;
//   int_chunk(b, c, q, s, o) the same values as int8 codes packed 4 per int (value 4i+j is
//                            byte j of q[i]) in G groups (the return value; G == 2: values 0..15
//                            and 16..31), value v of group g being s[g] * code + o[g]; only the
//                            first G entries of s and o are written.
// Both are bit-identical to the CPU reference (crates/core/src/quant/dtypes/*.rs: dequantize and
// INT_FORM): the same f32 products in the same order. chunk() is the int form expanded as the
// CPU's dequantization computes it (`scale * code + offset`, or `scale * code` where the format
// has no offset, so that a -0.0 product stays -0.0).
// Data is decoded as the formula gives; what the CPU rejects is checked by the host at load.

// Static member functions (common.cuh's DEV is `static inline` on the host).
#if ON_DEVICE
#define SDEV static __device__ __forceinline__
// A product the compiler may not fuse with a following add (the CPU never fuses).
DEV float qmul(float a, float b) { return __fmul_rn(a, b); }
#else
#define SDEV static inline
DEV float qmul(float a, float b) { return a * b; }
#endif

// Bytes x - b (mod 256) of a word whose bytes are all below 128, for 0 < b <= 128.
DEV int qbias4(u32 x, u32 b) { return (int)(((x | 0x80808080u) - b * 0x01010101u) ^ 0x80808080u); }

// Bit k of a 4-bit x to bit 0 of byte k.
DEV u32 qspread4(u32 x) { return (x * 0x00204081u) & 0x01010101u; }

// Pack 32 int8 codes 4 per int.
DEV void qpack(const int v[32], int q[8]) {
    for (int i = 0; i < 8; ++i)
        q[i] = (v[4 * i] & 255) | (v[4 * i + 1] & 255) << 8 | (v[4 * i + 2] & 255) << 16 |
               (int)((u32)v[4 * i + 3] << 24);
}

// out = s * code (+ o where the format has an offset), per group.
DEV void qexpand(const int q[8], int G, const float s[2], const float o[2], bool has_offset,
                 float out[32]) {
    for (int v = 0; v < 32; ++v) {
        // Constant indices once unrolled (a runtime index would put s and o in local memory).
        bool second = G == 2 && v >= 16;
        float w = qmul(second ? s[1] : s[0], (float)(i8)(q[v / 4] >> (8 * (v % 4))));
        out[v] = has_offset ? w + (second ? o[1] : o[0]) : w;
    }
}

#define CHUNK_FROM_INT(has_offset)                                                    \
    SDEV void chunk(const u8* b, int c, float out[32]) {                              \
        int q[8];                                                                     \
        float s[2], o[2];                                                             \
        int G = int_chunk(b, c, q, s, o);                                             \
        qexpand(q, G, s, o, has_offset, out);                                         \
    }
#define NO_INT_FORM                                                                   \
    static constexpr bool HAS_INT = false;                                            \
    SDEV int int_chunk(const u8*, int, int*, float*, float*) { return 0; }

// F32, F16, BF16: little-endian elements, units of 32.
struct FMT_F32 {
    static constexpr int BE = 32, BB = 128;
    NO_INT_FORM
    SDEV void chunk(const u8* b, int, float out[32]) {
        u32 w[32];
        for (int i = 0; i < 8; ++i) ld32x4(b + 16 * i, w + 4 * i);
        for (int i = 0; i < 32; ++i) out[i] = bits2f(w[i]);
    }
};
struct FMT_F16 {
    static constexpr int BE = 32, BB = 64;
    NO_INT_FORM
    SDEV void chunk(const u8* b, int, float out[32]) {
        u32 w[16];
        for (int i = 0; i < 4; ++i) ld32x4(b + 16 * i, w + 4 * i);
        for (int i = 0; i < 32; ++i) out[i] = h2f((u16)(w[i / 2] >> 16 * (i % 2)));
    }
};
struct FMT_BF16 {
    static constexpr int BE = 32, BB = 64;
    NO_INT_FORM
    SDEV void chunk(const u8* b, int, float out[32]) {
        u32 w[16];
        for (int i = 0; i < 4; ++i) ld32x4(b + 16 * i, w + 4 * i);
        for (int i = 0; i < 32; ++i) out[i] = bf2f((u16)(w[i / 2] >> 16 * (i % 2)));
    }
};

// Legacy 32-value blocks (c is always 0). Value j is the low nibble of qs[j], 16 + j the high
// nibble; Q5 adds bit j of the little-endian u32 qh as bit 4 of value j.
// Q4_0: d f16 | qs[16]; w = d * (q - 8).
struct FMT_Q4_0 {
    static constexpr int BE = 32, BB = 18;
    static constexpr bool HAS_INT = true;
    SDEV int int_chunk(const u8* b, int, int q[8], float s[2], float o[2]) {
        for (int i = 0; i < 4; ++i) {
            u32 w = ld32(b + 2 + 4 * i);
            q[i] = qbias4(w & 0x0f0f0f0fu, 8);
            q[i + 4] = qbias4(w >> 4 & 0x0f0f0f0fu, 8);
        }
        s[0] = ldf16(b);
        o[0] = 0.0f;
        return 1;
    }
    CHUNK_FROM_INT(false)
};
// ggml's kvalues_iq4nl [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89,
// 113] as int8 bytes, four per word (code 4k + j is byte j of word k); the table's values for
// the four codes in bits 0..3 of the bytes of x, packed likewise.
DEV int qiq4nl4(u32 x) {
    u32 r = 0;
    for (int j = 0; j < 4; ++j) {
        u32 n = x >> (8 * j) & 15u;
        u32 w = n < 8 ? (n < 4 ? 0xbfad9881u : 0xf6eaddcfu) : (n < 12 ? 0x26190d01u : 0x71594535u);
        r |= (w >> (8 * (n & 3u)) & 255u) << (8 * j);
    }
    return (int)r;
}
// IQ4_NL: d f16 | qs[16] (Q4_0's layout); w = d * KVALUES[q], the codes the table's values.
struct FMT_IQ4_NL {
    static constexpr int BE = 32, BB = 18;
    static constexpr bool HAS_INT = true;
    SDEV int int_chunk(const u8* b, int, int q[8], float s[2], float o[2]) {
        for (int i = 0; i < 4; ++i) {
            u32 w = ld32(b + 2 + 4 * i);
            q[i] = qiq4nl4(w & 0x0f0f0f0fu);
            q[i + 4] = qiq4nl4(w >> 4 & 0x0f0f0f0fu);
        }
        s[0] = ldf16(b);
        o[0] = 0.0f;
        return 1;
    }
    CHUNK_FROM_INT(false)
};
// Q4_1: d f16 | m f16 | qs[16]; w = d * q + m.
struct FMT_Q4_1 {
    static constexpr int BE = 32, BB = 20;
    static constexpr bool HAS_INT = true;
    SDEV int int_chunk(const u8* b, int, int q[8], float s[2], float o[2]) {
        for (int i = 0; i < 4; ++i) {
            u32 w = ld32(b + 4 + 4 * i);
            q[i] = (int)(w & 0x0f0f0f0fu);
            q[i + 4] = (int)(w >> 4 & 0x0f0f0f0fu);
        }
        s[0] = ldf16(b);
        o[0] = ldf16(b + 2);
        return 1;
    }
    CHUNK_FROM_INT(true)
};
// Q5_0: d f16 | qh u32 | qs[16]; w = d * (q - 16).
struct FMT_Q5_0 {
    static constexpr int BE = 32, BB = 22;
    static constexpr bool HAS_INT = true;
    SDEV int int_chunk(const u8* b, int, int q[8], float s[2], float o[2]) {
        u32 qh = ld32(b + 2);
        for (int i = 0; i < 4; ++i) {
            u32 w = ld32(b + 6 + 4 * i);
            q[i] = qbias4((w & 0x0f0f0f0fu) | qspread4(qh >> 4 * i & 15) << 4, 16);
            q[i + 4] = qbias4((w >> 4 & 0x0f0f0f0fu) | qspread4(qh >> (16 + 4 * i) & 15) << 4, 16);
        }
        s[0] = ldf16(b);
        o[0] = 0.0f;
        return 1;
    }
    CHUNK_FROM_INT(false)
};
// Q5_1: d f16 | m f16 | qh u32 | qs[16]; w = d * q + m.
struct FMT_Q5_1 {
    static constexpr int BE = 32, BB = 24;
    static constexpr bool HAS_INT = true;
    SDEV int int_chunk(const u8* b, int, int q[8], float s[2], float o[2]) {
        u32 qh = ld32(b + 4);
        for (int i = 0; i < 4; ++i) {
            u32 w = ld32(b + 8 + 4 * i);
            q[i] = (int)((w & 0x0f0f0f0fu) | qspread4(qh >> 4 * i & 15) << 4);
            q[i + 4] = (int)((w >> 4 & 0x0f0f0f0fu) | qspread4(qh >> (16 + 4 * i) & 15) << 4);
        }
        s[0] = ldf16(b);
        o[0] = ldf16(b + 2);
        return 1;
    }
    CHUNK_FROM_INT(true)
};
// Q8_0: d f16 | qs i8[32]; w = q * d.
struct FMT_Q8_0 {
    static constexpr int BE = 32, BB = 34;
    static constexpr bool HAS_INT = true;
    SDEV int int_chunk(const u8* b, int, int q[8], float s[2], float o[2]) {
        for (int i = 0; i < 8; ++i) q[i] = (int)ld32(b + 2 + 4 * i);
        s[0] = ldf16(b);
        o[0] = 0.0f;
        return 1;
    }
    CHUNK_FROM_INT(false)
};

// Q4_K / Q5_K super-blocks: d f16 | dmin f16 | scales[12] | (Q5_K: qh[32]) | qs[128]. Sub-block
// s (values 32s..32s+31) has 6-bit (sc, m) packed as ggml's get_scale_min_k4 and
// w = (d * sc) * q - dmin * m; its 4-bit q are nibble s % 2 of qs[32 (s / 2) + l], and Q5_K's
// fifth bit is bit s of qh[l].
// From the block's first 16 bytes as four words h (d and dmin, then scales 0..3, 4..7, 8..11:
// one 16-byte load, the blocks being 16-byte aligned).
DEV void k4_scale_min(const u32 h[4], int j, float s[2], float o[2]) {
    u32 k = 8 * (j % 4);
    u32 a = h[1] >> k, b = h[2] >> k, c = h[3] >> k;
    u32 ls = j < 4 ? a & 63 : (c & 15) | (a >> 6 & 3) << 4;
    u32 lm = j < 4 ? b & 63 : (c >> 4 & 15) | (b >> 6 & 3) << 4;
    s[0] = h2f((u16)(h[0] & 0xffff)) * (float)ls;
    o[0] = -qmul(h2f((u16)(h[0] >> 16)), (float)lm);
}
struct FMT_Q4_K {
    static constexpr int BE = 256, BB = 144;
    static constexpr bool HAS_INT = true;
    SDEV int int_chunk(const u8* b, int c, int q[8], float s[2], float o[2]) {
        u32 w[8];
        ld32x4(b + 16 + 32 * (c / 2), w);
        ld32x4(b + 32 + 32 * (c / 2), w + 4);
        for (int i = 0; i < 8; ++i) q[i] = (int)(w[i] >> 4 * (c % 2) & 0x0f0f0f0fu);
        u32 h[4];
        ld32x4(b, h);
        k4_scale_min(h, c, s, o);
        return 1;
    }
    CHUNK_FROM_INT(true)
};
struct FMT_Q5_K {
    static constexpr int BE = 256, BB = 176;
    static constexpr bool HAS_INT = true;
    SDEV int int_chunk(const u8* b, int c, int q[8], float s[2], float o[2]) {
        u32 w[8], h[8];
        ld32x4(b + 48 + 32 * (c / 2), w);
        ld32x4(b + 64 + 32 * (c / 2), w + 4);
        ld32x4(b + 16, h);
        ld32x4(b + 32, h + 4);
        for (int i = 0; i < 8; ++i)
            q[i] = (int)((w[i] >> 4 * (c % 2) & 0x0f0f0f0fu) | (h[i] >> c & 0x01010101u) << 4);
        u32 hd[4];
        ld32x4(b, hd);
        k4_scale_min(hd, c, s, o);
        return 1;
    }
    CHUNK_FROM_INT(true)
};

// Q6_K: ql[128] | qh[64] | scales i8[16] | d f16. Value e = 128h + r: low 4 bits are nibble
// r / 64 of ql[64h + r % 64], high 2 bits are bits 2 (r / 32) of qh[32h + r % 32];
// w = (d * scales[e / 16]) * (q - 32), so a unit is two groups of 16.
// On the device each 210-byte block sits in a 224-byte slot (Q6K_SLOT; the CUDA backend pads
// the blocks as it uploads them), so that ql and qh are whole 16-byte words: a unit's codes are
// four 16-byte loads instead of sixteen pairs of 2-byte ones (a block at an odd index of a row
// of 210-byte blocks is only 2-byte aligned).
#define Q6K_SLOT 224
struct FMT_Q6_K {
    static constexpr int BE = 256, BB = Q6K_SLOT;
    static constexpr bool HAS_INT = true;
    SDEV int int_chunk(const u8* b, int c, int q[8], float s[2], float o[2]) {
        int h = c / 4, r = c % 4;  // r: the unit within its half
        u32 l[8], hb[8];
        ld32x4(b + 64 * h + 32 * (r % 2), l);
        ld32x4(b + 64 * h + 32 * (r % 2) + 16, l + 4);
        ld32x4(b + 128 + 32 * h, hb);
        ld32x4(b + 128 + 32 * h + 16, hb + 4);
        for (int i = 0; i < 8; ++i)
            q[i] = qbias4((l[i] >> 4 * (r / 2) & 0x0f0f0f0fu) | (hb[i] >> 2 * r & 0x03030303u) << 4,
                          32);
        float d = ldf16(b + 208);
        u16 sc = ld16(b + 192 + 2 * c);
        s[0] = d * (float)(i8)(sc & 0xff);
        s[1] = d * (float)(i8)(sc >> 8);
        o[0] = o[1] = 0.0f;
        return 2;
    }
    CHUNK_FROM_INT(false)
};

// TQ1_0: qs[48] | qh[4] | d f16; w = d * (t - 1), trits t in base 3, five per byte (four in
// qh), trit n (0 = most significant) of byte x being ((x * 3^n mod 256) * 3) >> 8. Value e:
// e < 160: trit e / 32 of qs[e % 32]; e < 240: trit (e - 160) / 16 of qs[32 + (e - 160) % 16];
// else trit (e - 240) / 4 of qh[(e - 240) % 4]. Every byte decodes to trits 0..2 (bytes above
// 242 are never written, and the CPU decodes them by the same formula).
DEV int tq1_trit(u32 x, int n) {
    u32 p = n == 0 ? 1 : n == 1 ? 3 : n == 2 ? 9 : n == 3 ? 27 : 81;
    return (int)((x * p & 255) * 3 >> 8);
}
struct FMT_TQ1_0 {
    static constexpr int BE = 256, BB = 54;
    static constexpr bool HAS_INT = true;
    SDEV int int_chunk(const u8* b, int c, int q[8], float s[2], float o[2]) {
        int v[32];
        for (int i = 0; i < 32; ++i) {
            int e = 32 * c + i;
            v[i] = (e < 160   ? tq1_trit(b[e % 32], e / 32)
                    : e < 240 ? tq1_trit(b[32 + (e - 160) % 16], (e - 160) / 16)
                              : tq1_trit(b[48 + (e - 240) % 4], (e - 240) / 4)) - 1;
        }
        qpack(v, q);
        s[0] = ldf16(b + 52);
        o[0] = 0.0f;
        return 1;
    }
    CHUNK_FROM_INT(false)
};

// TQ2_0: qs[64] | d f16; value 128h + 32s + m is bits 2s..2s+1 of qs[32h + m], code t,
// w = d * (t - 1) (code 3, never written, gives +2 as on the CPU).
struct FMT_TQ2_0 {
    static constexpr int BE = 256, BB = 66;
    static constexpr bool HAS_INT = true;
    SDEV int int_chunk(const u8* b, int c, int q[8], float s[2], float o[2]) {
        const u8* qs = b + 32 * (c / 4);
        for (int i = 0; i < 8; ++i) q[i] = qbias4(ld32(qs + 4 * i) >> 2 * (c % 4) & 0x03030303u, 1);
        s[0] = ldf16(b + 64);
        o[0] = 0.0f;
        return 1;
    }
    CHUNK_FROM_INT(false)
};

// I2_S (BitNet): qs[32], value 32g + j is bits 6 - 2g..7 - 2g of qs[j], code t, w = t - 1 (the
// per-tensor scale is the caller's). The CPU rejects code 3 at load; here it gives +2.
struct FMT_I2_S {
    static constexpr int BE = 128, BB = 32;
    static constexpr bool HAS_INT = true;
    SDEV int int_chunk(const u8* b, int c, int q[8], float s[2], float o[2]) {
        u32 w[8];
        ld32x4(b, w);
        ld32x4(b + 16, w + 4);
        for (int i = 0; i < 8; ++i) q[i] = qbias4(w[i] >> (6 - 2 * c) & 0x03030303u, 1);
        s[0] = 1.0f;
        o[0] = 0.0f;
        return 1;
    }
    CHUNK_FROM_INT(false)
};

#undef CHUNK_FROM_INT
#undef NO_INT_FORM

// One macro the kernels use to instantiate per format: X(name_suffix, struct)
#define FOR_EACH_INT_FORMAT(X)                                                               \
    X(q4_0, FMT_Q4_0) X(q4_1, FMT_Q4_1) X(q5_0, FMT_Q5_0) X(q5_1, FMT_Q5_1) X(q8_0, FMT_Q8_0) \
    X(q4_k, FMT_Q4_K) X(q5_k, FMT_Q5_K) X(q6_k, FMT_Q6_K) X(tq1_0, FMT_TQ1_0)               \
    X(tq2_0, FMT_TQ2_0) X(i2_s, FMT_I2_S) X(iq4_nl, FMT_IQ4_NL)
#define FOR_EACH_FORMAT(X) X(f32, FMT_F32) X(f16, FMT_F16) X(bf16, FMT_BF16) FOR_EACH_INT_FORMAT(X)

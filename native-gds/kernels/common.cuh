// Shared by every kernel: fixed-width types, f16/bf16 conversions and unaligned little-endian
// loads, written so that the same device functions also compile as host C++ (g++), which is how
// the weight decoders are checked against the CPU reference without a GPU.

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define DEV __device__ __forceinline__
#define ON_DEVICE 1
#define INFINITY __int_as_float(0x7f800000)

// f16 bits to f32 (exact).
DEV float h2f(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// f32 to the nearest f16 (ties to even), as bits.
DEV u16 f2h(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

DEV float bits2f(u32 b) { return __int_as_float((int)b); }
DEV u32 f2bits(float f) { return (u32)__float_as_int(f); }
#else
#include <cstring>
#include <cmath>
#define DEV static inline
#define ON_DEVICE 0

DEV float bits2f(u32 b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}
DEV u32 f2bits(float f) {
    u32 b;
    std::memcpy(&b, &f, 4);
    return b;
}

// Host emulation of the PTX conversions (exact for every f16, including subnormals).
DEV float h2f(u16 h) {
    u32 sign = (u32)(h >> 15) << 31;
    u32 exp = (h >> 10) & 0x1f;
    u32 man = h & 0x3ff;
    if (exp == 0) {
        float v = std::ldexp((float)man, -24);
        return sign ? -v : v;
    }
    if (exp == 31) return bits2f(sign | 0x7f800000u | (man << 13));
    return bits2f(sign | ((exp + 112) << 23) | (man << 13));
}
#endif

// bf16 bits to f32 (exact).
DEV float bf2f(u16 b) { return bits2f((u32)b << 16); }

// Little-endian loads at any byte address (weights are byte-packed blocks). On the device an
// address that is 2- or 4-byte aligned (every field of the GGML blocks is at an even offset)
// takes one or two wide loads instead of bytes.
DEV u16 ld16(const u8* p) {
#if ON_DEVICE
    if (((u64)p & 1) == 0) return *(const u16*)p;
#endif
    return (u16)(p[0] | (p[1] << 8));
}
DEV u32 ld32(const u8* p) {
#if ON_DEVICE
    if (((u64)p & 3) == 0) return *(const u32*)p;
    if (((u64)p & 1) == 0) return (u32)((const u16*)p)[0] | ((u32)((const u16*)p)[1] << 16);
#endif
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}
// Four little-endian words at p: one 16-byte load where p is 16-byte aligned.
DEV void ld32x4(const u8* p, u32 w[4]) {
#if ON_DEVICE
    if (((u64)p & 15) == 0) {
        uint4 v = *(const uint4*)p;
        w[0] = v.x;
        w[1] = v.y;
        w[2] = v.z;
        w[3] = v.w;
        return;
    }
#endif
    for (int i = 0; i < 4; ++i) w[i] = ld32(p + 4 * i);
}
DEV float ldf16(const u8* p) { return h2f(ld16(p)); }
DEV float ldf32(const u8* p) { return bits2f(ld32(p)); }

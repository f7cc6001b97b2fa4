// TQ2_0 against int8 activation records (after quant/q8.wgsl), for matvec_ternary_q8.wgsl. The
// planes are quant/tq2_0.wgsl's (src/gpu/kernels/ternary.rs): 64 code bytes per block, read
// here as 4 vec4, and the f16 scales two per u32.
//
// A unit is one vec4 k (0..4) of a block: bytes 16k .. 16k + 16, i.e. byte 32h + m with
// h = k / 2 and m = 16 (k % 2) + j. Bits 2s..2s+1 of byte j hold the code of element
// 128h + 32s + 16(k % 2) + j, so for each s the vec4 shifted right by 2s and masked is 16
// consecutive codes in the byte order of one activation vec4: index 8h + 2s + k % 2 of the
// block's 16, in activation block 4h + s (one scale each). Per group, with exact integer sums:
// d8 * d * (sum(c x_q) - sum(x_q)) (crate::quant::q8dot, codes c - 1).
//
// Bindings:
//   3  qs: (rows, cols/256, 4) vec4<u32> code bytes of this chunk's rows
//   4  dh: (rows * cols/256 + 1) / 2 u32, f16 block scales

@group(0) @binding(3) var<storage, read> qs: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> dh: array<u32>;

// Units per 256-weight block.
const TQ8_UNITS: u32 = 4u;
// No tail: every weight of a block is in its units.
const TQ8_TAIL: bool = false;

// One unit's raw weights: its 64 codes and its block's scale.
struct TqRaw {
    q: vec4<u32>,
    d: f32,
}

fn tq8_load(b: u32, k: u32) -> TqRaw {
    return TqRaw(qs[4u * b + k], half_to_f32(dh[b >> 1u], (b & 1u) == 1u));
}

// One unit's activations: the four groups (s = 0..3), their sums and their blocks' scales.
struct TqAct {
    a0: vec4<u32>,
    a1: vec4<u32>,
    a2: vec4<u32>,
    a3: vec4<u32>,
    s: vec4<i32>,
    d: vec4<f32>,
}

// Unit k of block `blk` of the row (the activations of every row of the matrix).
fn tq8_act(blk: u32, k: u32) -> TqAct {
    let o = 16u * blk + 8u * (k >> 1u) + (k & 1u);
    let a0 = x[o];
    let a1 = x[o + 2u];
    let a2 = x[o + 4u];
    let a3 = x[o + 6u];
    // tq8_dot's codes are (1, 4, 16, 16) c: so are the sums it subtracts, and the scales are
    // divided back (exactly: powers of two).
    let m = vec4<i32>(1, 4, 16, 16);
    let s = m * vec4<i32>(q8_sum16(a0), q8_sum16(a1), q8_sum16(a2), q8_sum16(a3));
    // The scales of activation blocks 8 blk + 4h .. + 4: one vec4 of the record's scales.
    let d = bitcast<vec4<f32>>(x[p.cols / 16u + 2u * blk + (k >> 1u)])
        * vec4<f32>(1.0, 0.25, 0.0625, 0.0625);
    return TqAct(a0, a1, a2, a3, s, d);
}

// The codes are masked in place where that keeps each byte below 128 (c, 4 c, 16 c for s = 0,
// 1, 2; 16 c after one shift by 2 for s = 3), which saves three of the four shifts; tq8_act
// scales the sums and scales to match. |16 sum(c x_q)| < 2^17, so exact_f32 is exact.
fn tq8_dot(w: TqRaw, k: u32, a: TqAct) -> f32 {
    let i = vec4<i32>(
        q8_dot16(w.q & vec4<u32>(0x03030303u), a.a0),
        q8_dot16(w.q & vec4<u32>(0x0c0c0c0cu), a.a1),
        q8_dot16(w.q & vec4<u32>(0x30303030u), a.a2),
        q8_dot16((w.q >> vec4<u32>(2u)) & vec4<u32>(0x30303030u), a.a3),
    ) - a.s;
    return w.d * dot(a.d, exact_f32(i));
}

// No tail (TQ8_TAIL is false): the matvec never calls these.
struct TqTail {
    unused: u32,
}

fn tq8_tail_act(blk: u32) -> TqTail {
    return TqTail(0u);
}

fn tq8_tail(b: u32, a: TqTail) -> f32 {
    return 0.0;
}

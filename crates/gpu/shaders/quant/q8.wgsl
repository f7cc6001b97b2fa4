// Int8 activation records for the integer-dot decode kernels (MatvecQ8), written by
// quantize_q8.wgsl; layout mirrored in src/gpu/q8.rs. One record per token, viewed as
// vec4<u32>, for rows of `cols` values (a multiple of 32):
//   vec4 0 .. cols/16        the int8 values, 4 per u32 (value 4i + b in byte b of word i)
//   vec4 cols/16 ..          one f32 scale d per block of 32 values (block i in component
//                            i % 4 of vec4 cols/16 + i / 4), zero padded to a whole vec4
// A value is x ~ d * q with q in -127..127 (crate::quant::q8dot). The including kernel declares
// `x: array<vec4<u32>>` (binding 1) and uses token 0, and `y: array<f32>` (binding 2) for
// q8_write_row.

// 1: the products are added to what y holds (Kernel::MatvecQ8Add: a residual add in the
// product's dispatch, the Add kernel's one f32 sum), 0: they replace it.
override ACCUMULATE: u32 = 0u;

fn q8_write_row(i: u32, v: f32) {
    if (ACCUMULATE == 1u) {
        y[i] = y[i] + v;
    } else {
        y[i] = v;
    }
}

// All ones bytes: dot4I8Packed(Q8_ONES, a) is the sum of a's four int8 values.
const Q8_ONES: u32 = 0x01010101u;

// Sum of the four dot4I8Packed products of 16 codes (c: 4 bytes per word, each < 128, or
// signed) and 16 int8 activations.
fn q8_dot16(c: vec4<u32>, a: vec4<u32>) -> i32 {
    return (dot4I8Packed(c.x, a.x) + dot4I8Packed(c.y, a.y))
        + (dot4I8Packed(c.z, a.z) + dot4I8Packed(c.w, a.w));
}

// v as f32, exactly, for |v| < 2^22: v added to the bits of 1.5 * 2^23 is that float plus v,
// and 1.5 * 2^23 is subtracted (two full-rate operations where an int-to-float conversion runs
// at a fraction of the rate on some GPUs).
fn exact_f32(v: vec4<i32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(bitcast<vec4<u32>>(v) + vec4<u32>(0x4b400000u))
        - vec4<f32>(12582912.0);
}

// Sum of the 16 int8 activations in a.
fn q8_sum16(a: vec4<u32>) -> i32 {
    return q8_dot16(vec4<u32>(Q8_ONES), a);
}

// The 16 int8 values starting at value e (a multiple of 16) of token 0.
fn q8_values16(e: u32) -> vec4<u32> {
    return x[e / 16u];
}

// The scale of the block holding value e of token 0, for rows of `cols` values.
fn q8_scale(e: u32, cols: u32) -> f32 {
    let i = e / 32u;
    return bitcast<f32>(x[cols / 16u + i / 4u][i % 4u]);
}

// One group of 16 activations: values, their sum, their block's scale.
struct Q8Group {
    a: vec4<u32>,
    s: i32,
    d: f32,
}

fn q8_group(e: u32, cols: u32) -> Q8Group {
    let a = q8_values16(e);
    return Q8Group(a, q8_sum16(a), q8_scale(e, cols));
}

// One block of 32 activations: values 0..15 and 16..31, their sum, their scale.
struct Q8Block {
    lo: vec4<u32>,
    hi: vec4<u32>,
    s: i32,
    d: f32,
}

// I2_S weights against int8 activation records (helpers for matvec_i2s and matmul_i2s).
//
// Activation records (written by quantize_activations.wgsl; layout mirrored in
// src/gpu/bitlinear.rs), one per token, 16-byte aligned, viewed as vec4<u32>:
//   vec4 0      header: x = bits of the f32 scale s = 127 / max(absmax, 1e-5),
//               y = bits of the i32 sum of the token's int8 values, z = w = 0
//   vec4 1..    the int8 values, 4 per u32 (value 4i + b in byte b of word i), zero padded
//               to a whole vec4
// A token's record is 1 + ceil(cols / 16) vec4s.
//
// I2_S: 128 weights per 32 bytes; byte j of a block holds weights j, 32+j, 64+j, 96+j in bit
// pairs [7:6], [5:4], [3:2], [1:0], code c meaning weight c - 1. So word k (bytes 4k..4k+3)
// shifted right by 6 - 2g and masked with 0x03030303 holds the codes of weights
// 32g + 4k .. 32g + 4k + 3 as bytes, in the same order as the activation word for those
// weights: one dot4I8Packed multiplies 4 codes by 4 activations. The kernels sum c * x and
// subtract the header's sum of x (sum((c - 1) x) = sum(c x) - sum(x)).

// vec4s in the activation record of a token with `cols` values.
fn act_record_vec4s(cols: u32) -> u32 {
    return 1u + (cols + 15u) / 16u;
}

// Sum of the four dot4I8Packed products of 16 codes and 16 activations.
fn dot4x4(c: vec4<u32>, a: vec4<u32>) -> i32 {
    return dot4I8Packed(c.x, a.x) + dot4I8Packed(c.y, a.y) + dot4I8Packed(c.z, a.z)
        + dot4I8Packed(c.w, a.w);
}

// sum(c * x) over the 64 weights of one I2_S vec4 (half a block) whose activations for code
// groups g = 0..3 (shifts 6, 4, 2, 0) are x0..x3. The codes are masked in place where that
// keeps each byte below 128 (16 c for groups 0 and 1, group 0 after one shift by 2; 4 c for
// group 2; c for group 3), which saves three of the four shifts; the exact integer sum is then
// 16 times the wanted one, divided back by one arithmetic shift.
fn i2s_dot64(w: vec4<u32>, x0: vec4<u32>, x1: vec4<u32>, x2: vec4<u32>, x3: vec4<u32>) -> i32 {
    let d0 = dot4x4((w >> vec4<u32>(2u)) & vec4<u32>(0x30303030u), x0);
    let d1 = dot4x4(w & vec4<u32>(0x30303030u), x1);
    let d2 = dot4x4(w & vec4<u32>(0x0c0c0c0cu), x2);
    let d3 = dot4x4(w & vec4<u32>(0x03030303u), x3);
    return (d0 + d1 + 4 * (d2 + 4 * d3)) >> 4u;
}

// Offset (in vec4s, from the first value vec4 of a record) of the activations for code group 0
// of weight vec4 v of a row; groups 1..3 follow at +2, +4, +6. Weight vec4 v is half h = v % 2
// of block b = v / 2; its word i covers weights 128b + 32g + 4(4h + i) .. +3, which are
// activation word 32b + 8g + 4h + i, i.e. component i of vec4 8b + 2g + h.
fn i2s_act_offset(v: u32) -> u32 {
    return (v >> 1u) * 8u + (v & 1u);
}

// The BitLinear output from the integer sum: (sum(c x) - sum(x)) * weight_scale / s.
fn i2s_output(sum_cx: i32, header: vec4<u32>, weight_scale: f32) -> f32 {
    let s = bitcast<f32>(header.x);
    let sum_x = bitcast<i32>(header.y);
    return f32(sum_cx - sum_x) * weight_scale / s;
}

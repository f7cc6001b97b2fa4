// The q8 record arithmetic shared by quantize_q8.wgsl and rms_norm_quantize_q8.wgsl (record
// layout: quant/q8.wgsl; the CPU's: crate::quant::q8dot::quantize_q8). Four invocations hold
// the 32 values of a block, 8 each (two vec4), at local indices 4k .. 4k + 3; the block's
// absmax goes through workgroup memory (max is exact in any order). iscale = 127 / amax
// (scale_for_absmax from activation_quant.wgsl, exact), q = clamp(round_half_even(v *
// iscale), -127, 127), d = 1 / iscale; a block with amax < 1e-30 (or not finite) is all zeros
// with d = 0. WG at most 256.

// One slot per invocation, sized by the workgroup (WebGPU zero-initializes workgroup memory
// at the start of every workgroup, so a CPU adapter's narrow workgroups pay only for theirs).
var<workgroup> q8_amax: array<f32, WG>;

// iscale of the block whose quarter v0, v1 this invocation holds (0: all zeros). Every
// invocation of the workgroup calls it (a barrier); reusing q8_amax needs another barrier.
fn q8_quarter_scale(lid: u32, v0: vec4<f32>, v1: vec4<f32>) -> f32 {
    let a = max(abs(v0), abs(v1));
    q8_amax[lid] = max(max(a.x, a.y), max(a.z, a.w));
    workgroupBarrier();
    let first = lid & ~3u;
    let m = max(max(q8_amax[first], q8_amax[first + 1u]), max(q8_amax[first + 2u], q8_amax[first + 3u]));
    // `m >= 1e-30` is false for NaN; infinity gives iscale 0 from scale_for_absmax.
    var s = 0.0;
    if (m >= 1e-30) {
        s = scale_for_absmax(m);
    }
    return s;
}

// Four values as packed int8 at iscale s (zeros when s is 0).
fn q8_pack4(v: vec4<f32>, s: f32) -> u32 {
    let q = pack4xI8(vec4<i32>(clamp(round(v * s), vec4<f32>(-127.0), vec4<f32>(127.0))));
    return select(0u, q, s != 0.0);
}

// The block's scale word, d = 1 / iscale as f32 bits (0 when s is 0).
fn q8_scale_word(s: f32) -> u32 {
    return bitcast<u32>(select(0.0, 1.0 / s, s != 0.0));
}

// Norm records (Kernel::MatvecQ8AddNorm writes them: q8_add_norm.wgsl; main_silu_norm in
// quantize_q8.wgsl reads them): the q8 record of a row times an RMSNorm's weight, not yet
// divided by the row's RMS, then what that division needs: one f32 per block of 32 holding
// the sum of squares of the row's values in the block (zero padded to a whole vec4), then a
// vec4 whose first word is the norm's eps (written by the host). Layout mirrored by
// norm_record_bytes in src/gpu/q8.rs.

// The vec4 at which the sums of squares of a norm record of `cols` values start (the vec4
// after them holds eps).
fn q8_norm_base(cols: u32) -> u32 {
    return cols / 16u + (cols + 127u) / 128u;
}

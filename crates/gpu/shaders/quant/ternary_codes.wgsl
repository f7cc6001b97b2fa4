// Shared by the TQ1_0 and TQ2_0 decoders: 2-bit fields (codes 0..3 meaning c - 1) to f32
// without int-to-float conversions (slow on some GPUs), one AND and one FMA per weight.

// The exponent bits of 1.0f: OR-ed into a word before code_fields.
const CODE_EXPONENT: u32 = 0x3f800000u;

// Component i: the 2-bit field at bit shift[i] (0..21) of w[i], whose bits 23..29 must be set
// (w | CODE_EXPONENT), as the f32 value c - 1. The masked word is the f32
// 1 + c * 2^(shift - 23); scaling by k = 2^(23 - shift) gives the integer k + c exactly, and
// subtracting k + 1 (exact below 2^24) leaves c - 1.
fn code_fields(w: vec4<u32>, shift: vec4<u32>) -> vec4<f32> {
    let f = bitcast<vec4<f32>>(w & (vec4<u32>(CODE_EXPONENT) | (vec4<u32>(3u) << shift)));
    let k = bitcast<vec4<f32>>((vec4<u32>(150u) - shift) << vec4<u32>(23u));
    return fma(f, k, -(k + 1.0));
}

// Decode helpers shared by the legacy formats (F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
//
// Planes (see src/gpu/kernels/legacy.rs): each field of the blocks (codes, scales, qh) is its
// own plane, and within a plane the chunk's rows are interleaved in groups of 32: element `s`
// of row `r` sits at `interleaved(r, s, per_row, rows)`, so 32 neighbouring rows' element `s`
// are neighbours. Codes are moved in 16-byte slots, so every code load is an aligned
// vec4<u32>, and the invocations of a workgroup, one row each, read consecutive slots.
//
// Every format file (quant/legacy_<format>.wgsl) declares its planes at bindings 3.. and
//   fn decode_block(row: u32, b: u32, cols: u32, rows: u32) -> array<vec4<f32>, 8>
// the weights 32 b .. 32 b + 31 of chunk row `row` of a chunk of `rows` rows of `cols`
// columns (columns at or past `cols` read as 0), in column order: weight 32 b + 4 i + c is
// component c of vector i. The decoded weights equal the CPU reference
// (crate::quant::dequantize) bit for bit: scales are f16 and codes at most 8 bits, so d * q is
// exact in f32, and d * q + m is one rounding whether or not the compiler fuses it. And
//   fn block_dot(row: u32, b: u32, cols: u32, rows: u32, x: array<vec4<f32>, 8>) -> f32
// the same block's sum of w * x (x laid out like decode_block's result), for the matvec: the
// block formats decode there with the float trick below and factor d out where that keeps
// every product an exact multiple of the weight's (Q4_0, Q5_0, Q8_0), so the f32 summation
// bound still holds.
//
// Function-local arrays are only ever indexed with constants: a dynamic index makes
// compilers keep the array in memory instead of registers (about ten times slower).

// Index of element `s` of chunk row `row` in a plane of `per_row` elements per row whose rows
// are interleaved in groups of 32 (the last group may be shorter).
fn interleaved(row: u32, s: u32, per_row: u32, rows: u32) -> u32 {
    let base = row & ~31u;
    let group_rows = min(32u, rows - base);
    return base * per_row + s * group_rows + (row - base);
}

// The f16 at index `i` of a plane of packed halves (two per word, low half first).
fn half_at(word: u32, i: u32) -> f32 {
    return half_to_f32(word, (i & 1u) != 0u);
}

// Low nibbles of the four bytes of `w` (byte 0 first), as floats.
fn nibbles_lo(w: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xfu));
}

// High nibbles of the four bytes of `w` (byte 0 first), as floats.
fn nibbles_hi(w: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> vec4<u32>(4u, 12u, 20u, 28u)) & vec4<u32>(0xfu));
}

// The four bytes of `w` (byte 0 first) as signed 8-bit values, as floats.
fn bytes_i8(w: u32) -> vec4<f32> {
    let s = bitcast<vec4<i32>>(vec4<u32>(w) << vec4<u32>(24u, 16u, 8u, 0u));
    return vec4<f32>(s >> vec4<u32>(24u));
}

// 16 where bit e0 + c of a Q5 block's `qh` is set (bit 4 of the code of element e0 + c).
fn q5_high(qh: u32, e0: u32) -> vec4<f32> {
    let b = (vec4<u32>(qh) >> (vec4<u32>(0u, 1u, 2u, 3u) + vec4<u32>(e0))) & vec4<u32>(1u);
    return vec4<f32>(b * 16u);
}

// Two halves per word, as four floats.
fn halves4(a: u32, b: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
}

// sum of w * x over a block of 32 decoded weights.
fn dot8(w: array<vec4<f32>, 8>, x: array<vec4<f32>, 8>) -> f32 {
    let s0 = dot(w[0], x[0]) + dot(w[1], x[1]);
    let s1 = dot(w[2], x[2]) + dot(w[3], x[3]);
    let s2 = dot(w[4], x[4]) + dot(w[5], x[5]);
    let s3 = dot(w[6], x[6]) + dot(w[7], x[7]);
    return (s0 + s1) + (s2 + s3);
}

// Codes to floats without integer-to-float conversions (a quarter-rate instruction on many
// GPUs, and the bottleneck of a matvec): an integer k < 2^23 OR-ed into the mantissa of
// 2^23 (bits 0x4b000000) is the float 2^23 + k exactly, and subtracting a constant leaves an
// exact small integer. A code may be left in place at bit position p (k = q * 2^p, as long as
// q * 2^p < 2^23), which saves the shift; the product is then scaled by 2^p, and the sums are
// scaled back by 2^-p, both exact (powers of two, far from the f32 range limits for codes
// times activations).
const MAGIC: u32 = 0x4b000000u;

// The four fields `w & mask` (each a code q_i at bit position p_i), as 2^23 + q_i * 2^p_i.
fn magic4(w: u32, mask: vec4<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>((vec4<u32>(w) & mask) | vec4<u32>(MAGIC));
}

// Nibble fields at bit positions 0, 4, 8, 12 of a word, and their scales 2^-p.
const NIBBLE_MASKS = vec4<u32>(0xfu, 0xf0u, 0xf00u, 0xf000u);
const NIBBLE_SCALES = vec4<f32>(1.0, 0.0625, 0.00390625, 0.000244140625);
// Byte fields at bit positions 0, 8, 0, 8 (of a word and of the word shifted right by 16).
const BYTE_MASKS = vec4<u32>(0xffu, 0xff00u, 0xffu, 0xff00u);
const BYTE_SCALES = vec4<f32>(1.0, 0.00390625, 1.0, 0.00390625);

// Spread the low 4 bits of n to bit 4 of each byte (bit i to bit 8 i + 4).
fn spread4_to_bit4(n: u32) -> u32 {
    return ((n & 0xfu) * 0x02040810u) & 0x10101010u;
}

// The 5-bit codes of Q5 elements 4k .. 4k + 3 (lo = true: low nibbles of qs word k) or
// 16 + 4k .. 16 + 4k + 3 (high nibbles), one per byte.
fn q5_bytes(w: u32, qh: u32, k: u32, lo: bool) -> u32 {
    if (lo) {
        return (w & 0x0f0f0f0fu) | spread4_to_bit4(qh >> (4u * k));
    }
    return ((w >> 4u) & 0x0f0f0f0fu) | spread4_to_bit4(qh >> (16u + 4u * k));
}

// acc + (codes - c) * x for four 8-bit codes (one per byte of `bytes`, elements in order)
// taken at bit positions 0, 8, 0, 8 (see BYTE_MASKS); c = 2^23 + offset * (1, 256, 1, 256).
fn bytes_fma(bytes: u32, c: vec4<f32>, x: vec4<f32>, acc: vec4<f32>) -> vec4<f32> {
    let fields = vec4<u32>(bytes, bytes, bytes >> 16u, bytes >> 16u) & BYTE_MASKS;
    return fma(bitcast<vec4<f32>>(fields | vec4<u32>(MAGIC)) - c, x, acc);
}

// The x of a qs word's nibble fields at positions 0, 4, 8, 12 of `w` (elements 4k, 16 + 4k,
// 4k + 1, 16 + 4k + 1) and of `w >> 16` (4k + 2, 16 + 4k + 2, 4k + 3, 16 + 4k + 3), from the
// x of elements 4k .. 4k + 3 (`lo`) and 16 + 4k .. 16 + 4k + 3 (`hi`).
fn nibble_x_low(lo: vec4<f32>, hi: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(lo.x, hi.x, lo.y, hi.y);
}
fn nibble_x_high(lo: vec4<f32>, hi: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(lo.z, hi.z, lo.w, hi.w);
}

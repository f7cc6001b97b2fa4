// IQ4_NL weights, x = d * KVALUES[q] with 4-bit q indexing ggml's kvalues_iq4nl, as Q4_0's two
// planes interleaved by groups of 32 rows (the same block layout and nibble order).
@group(0) @binding(3) var<storage, read> wq: array<vec4<u32>>; // (rows, cols/32) qs, 16 bytes per block
@group(0) @binding(4) var<storage, read> wd: array<u32>;       // (rows, cols/32) f16 d, two per word

// kvalues_iq4nl = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]
// as int8 bytes, four per word: the value of code 4k + c is byte c of component k.
const IQ4NL_TABLE = vec4<u32>(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);

// The table's bytes (0..255, the int8 values' bits) for four codes n (each < 16), picked by
// selects rather than an indexed array (a dynamic index would put the table in memory).
fn iq4nl_lookup(n: vec4<u32>) -> vec4<u32> {
    let bit2 = (n & vec4<u32>(4u)) != vec4<u32>(0u);
    let lo = select(vec4<u32>(IQ4NL_TABLE.x), vec4<u32>(IQ4NL_TABLE.y), bit2);
    let hi = select(vec4<u32>(IQ4NL_TABLE.z), vec4<u32>(IQ4NL_TABLE.w), bit2);
    let w = select(lo, hi, (n & vec4<u32>(8u)) != vec4<u32>(0u));
    return (w >> ((n & vec4<u32>(3u)) * 8u)) & vec4<u32>(0xffu);
}

// The int8 values of the low (shift 0) or high (shift 4) nibbles of the four bytes of w,
// packed one per byte in the same order: elements 4k .. 4k + 3 (low) or 16 + 4k .. (high)
// of a block whose qs word k is w.
fn iq4nl_word(w: u32, shift: u32) -> u32 {
    let n = (vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(shift))) & vec4<u32>(0xfu);
    let b = iq4nl_lookup(n);
    return b.x | (b.y << 8u) | (b.z << 16u) | (b.w << 24u);
}

// The block's 32 values as 8 words of int8 bytes, element order (words 0..3 the low nibbles
// of qs words 0..3, words 4..7 their high nibbles), as Q8_0's two code slots.
struct Iq4nlCodes {
    lo: vec4<u32>,
    hi: vec4<u32>,
}

fn iq4nl_codes(q: vec4<u32>) -> Iq4nlCodes {
    return Iq4nlCodes(
        vec4<u32>(iq4nl_word(q.x, 0u), iq4nl_word(q.y, 0u), iq4nl_word(q.z, 0u), iq4nl_word(q.w, 0u)),
        vec4<u32>(iq4nl_word(q.x, 4u), iq4nl_word(q.y, 4u), iq4nl_word(q.z, 4u), iq4nl_word(q.w, 4u)));
}

// d * KVALUES[q] is exact in f32 (an f16 times an 8-bit integer): the CPU's value.
fn decode_block(row: u32, b: u32, cols: u32, rows: u32) -> array<vec4<f32>, 8> {
    let i = interleaved(row, b, cols / 32u, rows);
    let c = iq4nl_codes(wq[i]);
    let d = half_at(wd[i >> 1u], i);
    return array<vec4<f32>, 8>(
        bytes_i8(c.lo.x) * d, bytes_i8(c.lo.y) * d, bytes_i8(c.lo.z) * d, bytes_i8(c.lo.w) * d,
        bytes_i8(c.hi.x) * d, bytes_i8(c.hi.y) * d, bytes_i8(c.hi.z) * d, bytes_i8(c.hi.w) * d);
}

// sum over the block of w * x as d * sum KVALUES[q] * x (each product the weight's up to the
// exact factor d, as for Q4_0 and Q8_0). The int8 values are biased to v + 128 (an xor) for
// the float trick of legacy_blocks.wgsl, as Q8_0's codes are.
fn block_dot(row: u32, b: u32, cols: u32, rows: u32, x: array<vec4<f32>, 8>) -> f32 {
    let i = interleaved(row, b, cols / 32u, rows);
    let codes = iq4nl_codes(wq[i]);
    let lo = codes.lo ^ vec4<u32>(0x80808080u);
    let hi = codes.hi ^ vec4<u32>(0x80808080u);
    let d = half_at(wd[i >> 1u], i);
    // 2^23 + 128 * 2^p for the byte fields at p = 0, 8.
    let c = vec4<f32>(8388736.0, 8421376.0, 8388736.0, 8421376.0);
    var acc = vec4<f32>();
    acc = bytes_fma(lo.x, c, x[0], acc);
    acc = bytes_fma(lo.y, c, x[1], acc);
    acc = bytes_fma(lo.z, c, x[2], acc);
    acc = bytes_fma(lo.w, c, x[3], acc);
    acc = bytes_fma(hi.x, c, x[4], acc);
    acc = bytes_fma(hi.y, c, x[5], acc);
    acc = bytes_fma(hi.z, c, x[6], acc);
    acc = bytes_fma(hi.w, c, x[7], acc);
    return d * dot(acc, BYTE_SCALES);
}

// TQ2_0 weights (upstream ggml, 66 bytes per 256 weights) for matvec_ternary / matmul_ternary,
// repacked losslessly into two planes (src/gpu/kernels/ternary.rs):
//   qs: each block's 64 code bytes, as 16 u32 words
//   dh: each block's f16 scale d, two per u32 (block 2i in the low half)
// Element 128h + 32s + m of a block is bits 2s..2s+1 of qs byte 32h + m, code c meaning
// d * (c - 1) (code 3, never written, means +2 as in ggml). So bits 8b + 2s of word j hold the
// code of element 128(j / 8) + 32s + 4(j % 8) + b: for each s, the four bytes of a word are
// four consecutive weights, one vec4 of x, and consecutive words meet consecutive vec4s.
// Reads the activations from the kernel's `x: array<vec4<f32>>`.
//
// Bindings:
//   3  qs: (rows, cols/256, 16) u32 code words of this chunk's rows
//   4  dh: (rows * cols/256 + 1) / 2 u32, f16 block scales

@group(0) @binding(3) var<storage, read> qs: array<u32>;
@group(0) @binding(4) var<storage, read> dh: array<u32>;

// Words per block.
const TQ_WORDS: u32 = 16u;

// Word j of block `block` (blocks numbered row-major within the chunk).
fn tq_word(block: u32, j: u32) -> u32 {
    return qs[block * TQ_WORDS + j];
}

fn tq_scale(block: u32) -> f32 {
    return half_to_f32(dh[block >> 1u], (block & 1u) == 1u);
}

// sum over the 16 weights of word j (value w) of (c - 1) * x; `xo` is the index of the block's
// first activation vec4. Bytes 0, 1 are read in place, bytes 2, 3 after a shift by 16.
fn tq_word_dot(w: u32, j: u32, xo: u32) -> f32 {
    let o = xo + 32u * (j >> 3u) + (j & 7u);
    let lo = w | CODE_EXPONENT;
    let hi = (w >> 16u) | CODE_EXPONENT;
    let f = vec4<u32>(lo, lo, hi, hi);
    var acc = 0.0;
    for (var s = 0u; s < 4u; s = s + 1u) {
        let shift = vec4<u32>(0u, 8u, 0u, 8u) + 2u * s;
        acc = acc + dot(code_fields(f, shift), x[o + 8u * s]);
    }
    return acc;
}

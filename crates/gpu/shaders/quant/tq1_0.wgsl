// TQ1_0 weights (upstream ggml, 54 bytes per 256 weights) for matvec_ternary / matmul_ternary,
// repacked losslessly into three planes (src/gpu/kernels/ternary.rs):
//   qsh: each block's 48 qs bytes (5 trits each), 12 u32 words
//   dh:  each block's f16 scale d, two per u32 (block 2i in the low half)
//   qh:  each block's 4 qh bytes (4 trits each), one u32 word
// A byte q holds trits t0..t4 as ceil(256 (81 t0 + 27 t1 + 9 t2 + 3 t3 + t4) / 243); trit n is
// ((q * 3^n mod 256) * 3) >> 8, and weight = d * (t - 1). Element order:
//   qs[m], m < 32:       element 32n + m        (trit n)
//   qs[32 + m], m < 16:  element 160 + 16n + m
//   qh[m], m < 4:        element 240 + 4n + m   (n < 4)
// so trit n of the 4 bytes of word j is 4 consecutive weights (one vec4 of x) at
// 32n + 4j (j < 8), 160 + 16n + 4(j - 8) (j < 12), 240 + 4n (j = 12).
// Trits are computed two bytes at a time in 16-bit lanes (no carry crosses a lane:
// 255 * 81 < 2^16 and 255 * 3 < 2^16) and turned into f32 by code_fields. Reads the
// activations from the kernel's `x: array<vec4<f32>>`.
//
// Bindings:
//   3  qsh: (rows, cols/256, 12) u32 qs words of this chunk's rows
//   4  dh:  (rows * cols/256 + 1) / 2 u32, f16 block scales
//   5  qh:  (rows, cols/256) u32 qh words

@group(0) @binding(3) var<storage, read> qsh: array<u32>;
@group(0) @binding(4) var<storage, read> dh: array<u32>;
@group(0) @binding(5) var<storage, read> qh: array<u32>;

// Words per block: TQ_QS_WORDS of qs (plane qsh), then the qh word (plane qh).
const TQ_WORDS: u32 = 13u;
const TQ_QS_WORDS: u32 = 12u;

// Word j of a block: its qs words j < TQ_QS_WORDS, then its qh word.
fn tq_word(block: u32, j: u32) -> u32 {
    if (j < TQ_QS_WORDS) {
        return qsh[block * TQ_QS_WORDS + j];
    }
    return qh[block];
}

fn tq_scale(block: u32) -> f32 {
    return half_to_f32(dh[block >> 1u], (block & 1u) == 1u);
}

// sum over the weights of word j (value w) of (t - 1) * x; `xo` is the index of the block's
// first activation vec4. After ((q * 3^n mod 256) * 3) >> 8 in 16-bit lanes, the trit of the
// lane's low byte sits at bit 0 and that of the next lane at bit 16 (junk at bits 8..15).
fn tq_word_dot(w: u32, j: u32, xo: u32) -> f32 {
    var o = xo + 60u;
    var step = 1u;
    var trits = 4u;
    if (j < 8u) {
        o = xo + j;
        step = 8u;
        trits = 5u;
    } else if (j < TQ_QS_WORDS) {
        o = xo + 32u + j;
        step = 4u;
        trits = 5u;
    }
    let k = 0x00ff00ffu;
    let even = w & k;
    let odd = (w >> 8u) & k;
    let shift = vec4<u32>(0u, 0u, 16u, 16u);
    var acc = 0.0;
    var pw = 1u;
    for (var n = 0u; n < trits; n = n + 1u) {
        let te = (((((even * pw) & k) * 3u) >> 8u)) | CODE_EXPONENT;
        let to = (((((odd * pw) & k) * 3u) >> 8u)) | CODE_EXPONENT;
        acc = acc + dot(code_fields(vec4<u32>(te, to, te, to), shift), x[o + step * n]);
        pw = pw * 3u;
    }
    return acc;
}

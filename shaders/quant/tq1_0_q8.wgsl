// TQ1_0 against int8 activation records (after quant/q8.wgsl), for matvec_ternary_q8.wgsl. The
// planes are quant/tq1_0.wgsl's (src/gpu/kernels/ternary.rs): 13 trit words per block (qs
// then qh) and the f16 scales two per u32.
//
// A unit is four trit words of a block: k = 0, 1 the words 4k .. 4k + 4 (qs[16k ..
// 16k + 16]: element 32n + 16k + j is trit n of byte j), k = 2 the words 8 .. 12 (qs[32 ..
// 48]: element 160 + 16n + j) and the qh word 12 (element 240 + 4n + b is trit n of byte b).
// So trit n of the unit's four words is 16 consecutive codes in the byte order of one
// activation vec4, and trit n of the qh word is the four codes of activation word n of the
// block's last vec4. Trits are taken two bytes at a time in 16-bit lanes, as quant/tq1_0.wgsl
// does: m(0) = q, t(n) = (3 m(n)) >> 8, m(n + 1) = 3 m(n) mod 256 (no carry crosses a lane:
// 3 * 255 < 2^16). Per activation block, with exact integer sums:
// d8 * d * (sum(t x_q) - sum(x_q)) (crate::quant::q8dot, codes t - 1).
//
// Bindings:
//   3  qsh: (rows, cols/256, 13) u32 trit words of this chunk's rows
//   4  dh:  (rows * cols/256 + 1) / 2 u32, f16 block scales

@group(0) @binding(3) var<storage, read> qsh: array<u32>;
@group(0) @binding(4) var<storage, read> dh: array<u32>;

// Units per 256-weight block.
const TQ8_UNITS: u32 = 3u;

// One unit's raw weights: four trit words, the qh word (used by unit 2), the block's scale.
struct TqRaw {
    q: vec4<u32>,
    h: u32,
    d: f32,
}

fn tq8_load(b: u32, k: u32) -> TqRaw {
    let o = 13u * b;
    let w = o + 4u * k;
    return TqRaw(vec4<u32>(qsh[w], qsh[w + 1u], qsh[w + 2u], qsh[w + 3u]), qsh[o + 12u],
                 half_to_f32(dh[b >> 1u], (b & 1u) == 1u));
}

// One unit's activations: the five groups of trits 0..4 and the qh group (unit 2), the sums of
// each and the scale of each one's activation block.
struct TqAct {
    a0: vec4<u32>,
    a1: vec4<u32>,
    a2: vec4<u32>,
    a3: vec4<u32>,
    a4: vec4<u32>,
    ah: vec4<u32>,
    s: vec4<i32>,
    s4: i32,
    sh: i32,
    d: vec4<f32>,
    d4: f32,
    dh: f32,
}

fn tq8_act(blk: u32, k: u32) -> TqAct {
    // Trit n's group: vec4 2n + k (k < 2: elements 32n + 16k ..) or 10 + n (k = 2: elements
    // 160 + 16n ..) of the block's 16.
    let first = 16u * blk + select(k, 10u, k == 2u);
    let step = select(2u, 1u, k == 2u);
    let a0 = x[first];
    let a1 = x[first + step];
    let a2 = x[first + 2u * step];
    let a3 = x[first + 3u * step];
    let a4 = x[first + 4u * step];
    let ah = x[16u * blk + 15u];
    // Activation blocks 8 blk .. + 4 and + 4 .. + 8: trit n's is n (k < 2) or 5 + n / 2 (k = 2);
    // the qh group's is 7.
    let sc = p.cols / 16u + 2u * blk;
    let d0 = bitcast<vec4<f32>>(x[sc]);
    let d1 = bitcast<vec4<f32>>(x[sc + 1u]);
    let lo = k < 2u;
    let d = select(vec4<f32>(d1.y, d1.y, d1.z, d1.z), d0, lo);
    let d4 = select(d1.w, d1.x, lo);
    let s = vec4<i32>(q8_sum16(a0), q8_sum16(a1), q8_sum16(a2), q8_sum16(a3));
    return TqAct(a0, a1, a2, a3, a4, ah, s, q8_sum16(a4), q8_sum16(ah), d, d4, d1.w);
}

// Trit n of the 16 bytes of q against the activations g, for the lanes of step n (the even
// and odd bytes of q as m(n), see above): (sum(t x_q), the lanes of step n + 1).
struct TqStep {
    dot: i32,
    even: vec4<u32>,
    odd: vec4<u32>,
}

fn tq8_step(even: vec4<u32>, odd: vec4<u32>, g: vec4<u32>) -> TqStep {
    let lanes = vec4<u32>(0x00ff00ffu);
    let trit = vec4<u32>(0x00030003u);
    let e = even * 3u;
    let o = odd * 3u;
    let c = ((e >> vec4<u32>(8u)) & trit) | ((o & vec4<u32>(0x03000300u)));
    return TqStep(q8_dot16(c, g), e & lanes, o & lanes);
}

// Trit n of the four bytes of the qh word against activation word g (lanes as above).
fn tq8_qh_step(m: vec2<u32>, g: u32) -> vec3<u32> {
    let t = m * 3u;
    let c = ((t.x >> 8u) & 0x00030003u) | (t.y & 0x03000300u);
    return vec3<u32>(bitcast<u32>(dot4I8Packed(c, g)), t & vec2<u32>(0x00ff00ffu));
}

fn tq8_dot(w: TqRaw, k: u32, a: TqAct) -> f32 {
    let lanes = vec4<u32>(0x00ff00ffu);
    let s0 = tq8_step(w.q & lanes, (w.q >> vec4<u32>(8u)) & lanes, a.a0);
    let s1 = tq8_step(s0.even, s0.odd, a.a1);
    let s2 = tq8_step(s1.even, s1.odd, a.a2);
    let s3 = tq8_step(s2.even, s2.odd, a.a3);
    let s4 = tq8_step(s3.even, s3.odd, a.a4);
    let i = vec4<i32>(s0.dot, s1.dot, s2.dot, s3.dot) - a.s;
    var sum = dot(a.d, exact_f32(i)) + a.d4 * exact_f32(vec4<i32>(s4.dot - a.s4)).x;
    if (k == 2u) {
        // The qh word: trit n of its four bytes against activation word n of the last vec4.
        let h0 = tq8_qh_step(vec2<u32>(w.h & 0x00ff00ffu, (w.h >> 8u) & 0x00ff00ffu), a.ah.x);
        let h1 = tq8_qh_step(h0.yz, a.ah.y);
        let h2 = tq8_qh_step(h1.yz, a.ah.z);
        let h3 = tq8_qh_step(h2.yz, a.ah.w);
        let ih = bitcast<i32>(h0.x) + bitcast<i32>(h1.x) + bitcast<i32>(h2.x) + bitcast<i32>(h3.x);
        sum = sum + a.dh * exact_f32(vec4<i32>(ih - a.sh)).x;
    }
    return w.d * sum;
}

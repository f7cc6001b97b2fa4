// TQ1_0 against int8 activation records (after quant/q8.wgsl), for matvec_ternary_q8.wgsl. The
// planes are quant/tq1_0.wgsl's (src/gpu/kernels/ternary.rs): each block's 48 qs bytes (three
// aligned vec4), the f16 scales two per u32, each block's qh word.
//
// A unit is one qs vec4 of a block: k = 0, 1 the words 4k .. 4k + 4 (qs[16k .. 16k + 16]:
// element 32n + 16k + j is trit n of byte j), k = 2 the words 8 .. 12 (qs[32 .. 48]: element
// 160 + 16n + j). So trit n of the unit's four words is 16 consecutive codes in the byte order
// of one activation vec4. The qh word (element 240 + 4n + b is trit n of byte b: trit n of its
// four bytes against activation word n of the block's last vec4) is the matvec's tail, one per
// block (tq8_tail), so that every unit does the same work: taken with the unit whose k is 2,
// it would make the other threads of a subgroup wait for it. In their own plane the qh words
// of a row's blocks are consecutive, so the threads of a row load them together.
//
// Trits are taken two bytes at a time in 16-bit lanes, as quant/tq1_0.wgsl does: m(0) = q,
// t(n) = (3 m(n)) >> 8, m(n + 1) = 3 m(n) mod 256 (no carry crosses a lane: 3 * 255 < 2^16).
// The lanes of 3 m(n) hold t(n) in their high byte (3 m < 768), so dot4I8Packed takes it
// there: against activations "spaced" into bytes 1 and 3 (tq8_act, once per unit for all of a
// thread's rows), the low bytes are multiplied by 0. Per activation block, with exact integer
// sums: d8 * d * (sum(t x_q) - sum(x_q)) (crate::quant::q8dot, codes t - 1).
//
// Bindings:
//   3  qsh: (rows, cols/256, 3) vec4<u32> qs words of this chunk's rows
//   4  dh:  (rows * cols/256 + 1) / 2 u32, f16 block scales
//   5  qh:  (rows, cols/256) u32 qh words

@group(0) @binding(3) var<storage, read> qsh: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> dh: array<u32>;
@group(0) @binding(5) var<storage, read> qh: array<u32>;

// Units per 256-weight block.
const TQ8_UNITS: u32 = 3u;
// The matvec takes each block's qh word after its units (tq8_tail_act, tq8_tail).
const TQ8_TAIL: bool = true;

// One unit's raw weights: four trit words, the block's scale.
struct TqRaw {
    q: vec4<u32>,
    d: f32,
}

fn tq8_load(b: u32, k: u32) -> TqRaw {
    return TqRaw(qsh[3u * b + k], half_to_f32(dh[b >> 1u], (b & 1u) == 1u));
}

// One unit's activations: trit n's group of 16, spaced for the even bytes of the codes (e:
// bytes 0, 2 moved to 1, 3) and the odd ones (o: bytes 1, 3 in place), the sums of each group
// and the scale of each one's activation block.
struct TqAct {
    e0: vec4<u32>,
    o0: vec4<u32>,
    e1: vec4<u32>,
    o1: vec4<u32>,
    e2: vec4<u32>,
    o2: vec4<u32>,
    e3: vec4<u32>,
    o3: vec4<u32>,
    e4: vec4<u32>,
    o4: vec4<u32>,
    s: vec4<i32>,
    s4: i32,
    d: vec4<f32>,
    d4: f32,
}

fn tq8_even(g: vec4<u32>) -> vec4<u32> {
    return (g << vec4<u32>(8u)) & vec4<u32>(0xff00ff00u);
}

fn tq8_odd(g: vec4<u32>) -> vec4<u32> {
    return g & vec4<u32>(0xff00ff00u);
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
    // Activation blocks 8 blk .. + 4 and + 4 .. + 8: trit n's is n (k < 2) or 5 + n / 2 (k = 2).
    let sc = p.cols / 16u + 2u * blk;
    let d0 = bitcast<vec4<f32>>(x[sc]);
    let d1 = bitcast<vec4<f32>>(x[sc + 1u]);
    let lo = k < 2u;
    let d = select(vec4<f32>(d1.y, d1.y, d1.z, d1.z), d0, lo);
    let d4 = select(d1.w, d1.x, lo);
    let s = vec4<i32>(q8_sum16(a0), q8_sum16(a1), q8_sum16(a2), q8_sum16(a3));
    return TqAct(tq8_even(a0), tq8_odd(a0), tq8_even(a1), tq8_odd(a1), tq8_even(a2),
                 tq8_odd(a2), tq8_even(a3), tq8_odd(a3), tq8_even(a4), tq8_odd(a4), s,
                 q8_sum16(a4), d, d4);
}

// Trit n of the 16 bytes of a unit against its spaced activations, for the lanes m(n) of its
// even and odd bytes: (sum(t x_q), the lanes m(n + 1)).
struct TqStep {
    dot: i32,
    even: vec4<u32>,
    odd: vec4<u32>,
}

fn tq8_step(even: vec4<u32>, odd: vec4<u32>, ge: vec4<u32>, go: vec4<u32>) -> TqStep {
    let lanes = vec4<u32>(0x00ff00ffu);
    let e = even * 3u;
    let o = odd * 3u;
    return TqStep(q8_dot16(e, ge) + q8_dot16(o, go), e & lanes, o & lanes);
}

fn tq8_dot(w: TqRaw, k: u32, a: TqAct) -> f32 {
    let lanes = vec4<u32>(0x00ff00ffu);
    let s0 = tq8_step(w.q & lanes, (w.q >> vec4<u32>(8u)) & lanes, a.e0, a.o0);
    let s1 = tq8_step(s0.even, s0.odd, a.e1, a.o1);
    let s2 = tq8_step(s1.even, s1.odd, a.e2, a.o2);
    let s3 = tq8_step(s2.even, s2.odd, a.e3, a.o3);
    let s4 = tq8_step(s3.even, s3.odd, a.e4, a.o4);
    let i = vec4<i32>(s0.dot, s1.dot, s2.dot, s3.dot) - a.s;
    return w.d * (dot(a.d, exact_f32(i)) + a.d4 * exact_f32(vec4<i32>(s4.dot - a.s4)).x);
}

// The activations of a block's qh word: the block's last vec4, its sum, its block's scale.
struct TqTail {
    a: vec4<u32>,
    s: i32,
    d: f32,
}

fn tq8_tail_act(blk: u32) -> TqTail {
    let a = x[16u * blk + 15u];
    return TqTail(a, q8_sum16(a), bitcast<f32>(x[p.cols / 16u + 2u * blk + 1u].w));
}

// Trit n of the four bytes of the qh word against activation word g (lanes m(n) as above, the
// trits gathered into the four bytes of one word): (sum(t x_q), the lanes m(n + 1)).
fn tq8_qh_step(m: vec2<u32>, g: u32) -> vec3<u32> {
    let t = m * 3u;
    let c = ((t.x >> 8u) & 0x00030003u) | (t.y & 0x03000300u);
    return vec3<u32>(bitcast<u32>(dot4I8Packed(c, g)), t & vec2<u32>(0x00ff00ffu));
}

// Block b's (of the chunk) qh word: its 16 weights against their activations.
fn tq8_tail(b: u32, a: TqTail) -> f32 {
    let h = qh[b];
    let h0 = tq8_qh_step(vec2<u32>(h & 0x00ff00ffu, (h >> 8u) & 0x00ff00ffu), a.a.x);
    let h1 = tq8_qh_step(h0.yz, a.a.y);
    let h2 = tq8_qh_step(h1.yz, a.a.z);
    let h3 = tq8_qh_step(h2.yz, a.a.w);
    let ih = bitcast<i32>(h0.x) + bitcast<i32>(h1.x) + bitcast<i32>(h2.x) + bitcast<i32>(h3.x);
    let d = half_to_f32(dh[b >> 1u], (b & 1u) == 1u);
    return d * a.d * exact_f32(vec4<i32>(ih - a.s)).x;
}

// Q4_K against int8 activations (after quant/q4_k.wgsl and quant/q8.wgsl): unit u's low
// nibbles (group A) and high nibbles (group B) are 16 codes each, in the byte order of the
// activation words, so q8_dot16 takes them masked in place. Per group, with the integer sums
// exact: d8 * ((d*sc) * sum(q x_q) - (dmin*m) * sum(x_q)) (crate::quant::q8dot).
//
// With SPAN 2 the matvec takes a sub-block pair (units 2 p and 2 p + 1: 64 weights, one header
// word of scales and mins) per step, so the header is loaded and unpacked once per 64 weights
// and row instead of once per 32; both units' group A lies in one activation block (sub-block
// 2 p), as does their group B, so each group's two integer sums are added before its scales are
// applied.
struct Kq8Raw {
    h: vec4<u32>,
    q0: vec4<u32>,
    q1: vec4<u32>,
}

// Units u .. u + SPAN of chunk block b (q1 is q0 for SPAN 1).
fn kq8_load(b: u32, u: u32) -> Kq8Raw {
    let q0 = wq[9u * b + 1u + u];
    var q1 = q0;
    if (SPAN == 2u) {
        q1 = wq[9u * b + 2u + u];
    }
    return Kq8Raw(wq[9u * b], q0, q1);
}

fn kq8_dot_span(w: Kq8Raw, u: u32, v: Q8Span) -> f32 {
    let s = k4_unit_scales(w.h, u);
    let m = vec4<u32>(0x0f0f0f0fu);
    var ia = q8_dot16(w.q0 & m, v.u0.a.a);
    var ib = q8_dot16((w.q0 >> vec4<u32>(4u)) & m, v.u0.b.a);
    var sa = v.u0.a.s;
    var sb = v.u0.b.s;
    if (SPAN == 2u) {
        ia = ia + q8_dot16(w.q1 & m, v.u1.a.a);
        ib = ib + q8_dot16((w.q1 >> vec4<u32>(4u)) & m, v.u1.b.a);
        sa = sa + v.u1.a.s;
        sb = sb + v.u1.b.s;
    }
    // |sums| < 2^17: exact_f32 is exact (and cheaper than f32() on NVIDIA).
    let i = exact_f32(vec4<i32>(ia, ib, sa, sb));
    return v.u0.a.d * (s.x * i.x - s.y * i.z) + v.u0.b.d * (s.z * i.y - s.w * i.w);
}

// Q5_K against int8 activations (after quant/q5_k.wgsl and quant/q8.wgsl): the 5-bit codes
// (the nibbles with the fifth bits of the unit's qh word on top, q5k_codes) go into q8_dot16
// as they are (0..31, bytes below 128). Per group, with the integer sums exact:
// d8 * ((d*sc) * sum(q x_q) - (dmin*m) * sum(x_q)).
//
// With SPAN 2, as for Q4_K, the matvec takes a sub-block pair (units 2 p, 2 p + 1: one header
// word, the two qh words of one vec4) per step, each group's two integer sums added before its
// scales apply. The host takes SPAN 1 for Q5_K at every size (faster with this layout:
// kquants::matvec_q8_span); the self-tests run both.
struct Kq8Raw {
    h: vec4<u32>,
    qh: vec2<u32>,
    q0: vec4<u32>,
    q1: vec4<u32>,
}

// Units u .. u + SPAN of chunk block b (the second unit's words repeat the first's for SPAN 1;
// with SPAN 2, u is even and both qh words are in one vec4). The one qh word of SPAN 1 is
// loaded alone: a vec4 value indexed by a runtime u % 4 goes through local memory, which
// halves the kernel's speed.
fn kq8_load(b: u32, u: u32) -> Kq8Raw {
    let q0 = wq[11u * b + 3u + u];
    var qh: vec2<u32>;
    var q1 = q0;
    if (SPAN == 2u) {
        let qv = wq[11u * b + 1u + u / 4u];
        qh = select(qv.zw, qv.xy, u % 4u == 0u);
        q1 = wq[11u * b + 4u + u];
    } else {
        qh = vec2<u32>(wq[11u * b + 1u + u / 4u][u % 4u]);
    }
    return Kq8Raw(wq[11u * b], qh, q0, q1);
}

fn kq8_dot_span(w: Kq8Raw, u: u32, v: Q8Span) -> f32 {
    let s = k4_unit_scales_cvt(w.h, u);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let h0 = q5k_high(w.qh.x);
    var ia = q8_dot16((w.q0 & m4) | h0.lo, v.u0.a.a);
    var ib = q8_dot16(((w.q0 >> vec4<u32>(4u)) & m4) | h0.hi, v.u0.b.a);
    var sa = v.u0.a.s;
    var sb = v.u0.b.s;
    if (SPAN == 2u) {
        let h1 = q5k_high(w.qh.y);
        ia = ia + q8_dot16((w.q1 & m4) | h1.lo, v.u1.a.a);
        ib = ib + q8_dot16(((w.q1 >> vec4<u32>(4u)) & m4) | h1.hi, v.u1.b.a);
        sa = sa + v.u1.a.s;
        sb = sb + v.u1.b.s;
    }
    // |sums| < 2^19: exact_f32 is exact (and cheaper than f32() on NVIDIA).
    let i = exact_f32(vec4<i32>(ia, ib, sa, sb));
    return v.u0.a.d * (s.x * i.x - s.y * i.z) + v.u0.b.d * (s.z * i.y - s.w * i.w);
}

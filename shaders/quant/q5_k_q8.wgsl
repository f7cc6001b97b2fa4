// Q5_K against int8 activations (after quant/q5_k.wgsl and quant/q8.wgsl). A code is its
// nibble plus 16 times its fifth bit, so sum(q x_q) = sum(nibble x_q) + 16 sum(bit x_q): the
// nibbles go into q8_dot16 masked as Q4_K's, and the fifth bits masked in place in the qh
// bytes (bit t = 2 (u / 2) for group A, t + 1 for group B), so each qh byte is 0 or 2^t. That
// dot product is 2^t sum(bit x_q), a multiple of 2^t, so 16 sum(bit x_q) comes back exactly by
// shifts; for bit 7 the byte 0x80 is -128 to dot4I8Packed and the sum is negated. Per group,
// with the integer sums exact: d8 * ((d*sc) * sum(q x_q) - (dmin*m) * sum(x_q)).
//
// With SPAN 2, as for Q4_K, the matvec takes a sub-block pair (units 2 p, 2 p + 1: one header
// word, both qh vec4) per step, each group's two integer sums added before its scales apply.
struct Kq8Raw {
    h: vec4<u32>,
    qh0: vec4<u32>,
    qh1: vec4<u32>,
    q0: vec4<u32>,
    q1: vec4<u32>,
}

// Units u .. u + SPAN of chunk block b (the second unit's words repeat the first's for SPAN 1).
fn kq8_load(b: u32, u: u32) -> Kq8Raw {
    let qh0 = wq[11u * b + 1u + u % 2u];
    let q0 = wq[11u * b + 3u + u];
    var qh1 = qh0;
    var q1 = q0;
    if (SPAN == 2u) {
        qh1 = wq[11u * b + 2u];
        q1 = wq[11u * b + 4u + u];
    }
    return Kq8Raw(wq[11u * b], qh0, qh1, q0, q1);
}

fn kq8_dot_span(w: Kq8Raw, u: u32, v: Q8Span) -> f32 {
    let s = k4_unit_scales(w.h, u);
    let t = 2u * (u / 2u);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let ma = vec4<u32>(0x01010101u << t);
    let mb = vec4<u32>(0x02020202u << t);
    var ha = q8_dot16(w.qh0 & ma, v.u0.a.a);
    var hb = q8_dot16(w.qh0 & mb, v.u0.b.a);
    var ia = q8_dot16(w.q0 & m4, v.u0.a.a);
    var ib = q8_dot16((w.q0 >> vec4<u32>(4u)) & m4, v.u0.b.a);
    var sa = v.u0.a.s;
    var sb = v.u0.b.s;
    if (SPAN == 2u) {
        ha = ha + q8_dot16(w.qh1 & ma, v.u1.a.a);
        hb = hb + q8_dot16(w.qh1 & mb, v.u1.b.a);
        ia = ia + q8_dot16(w.q1 & m4, v.u1.a.a);
        ib = ib + q8_dot16((w.q1 >> vec4<u32>(4u)) & m4, v.u1.b.a);
        sa = sa + v.u1.a.s;
        sb = sb + v.u1.b.s;
    }
    let fa = (ha << 4u) >> t;
    let fb = select(hb << 4u, -(hb << 4u), t == 6u) >> (t + 1u);
    // |sums| < 2^19: exact_f32 is exact (and cheaper than f32() on NVIDIA).
    let i = exact_f32(vec4<i32>(ia + fa, ib + fb, sa, sb));
    return v.u0.a.d * (s.x * i.x - s.y * i.z) + v.u0.b.d * (s.z * i.y - s.w * i.w);
}

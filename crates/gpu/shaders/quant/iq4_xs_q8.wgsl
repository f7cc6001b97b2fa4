// IQ4_XS against int8 activations (after quant/iq4_xs.wgsl and quant/q8.wgsl): a unit's codes
// mapped through the table are packed int8 (iq4xs_codes), and its groups A and B lie in one
// activation block with one weight scale: d8 * ((d * (ls - 32)) * sum(KVALUES[q] x_q)), the
// integer sum exact (|sum| <= 32 * 127 * 127 < 2^22). With SPAN 2 the matvec's step is two
// units, each decoded as alone.
struct Kq8Raw {
    a: KqRaw,
    b: KqRaw,
}

fn kq8_load(b: u32, u: u32) -> Kq8Raw {
    let a = kq_load(b, u);
    var c = a;
    if (SPAN == 2u) {
        c = kq_load(b, u + 1u);
    }
    return Kq8Raw(a, c);
}

fn iq4xs8_unit(w: KqRaw, u: u32, v: Q8Unit) -> f32 {
    let s = iq4xs_unit_scale(w.h, u);
    let c = iq4xs_codes(w.q);
    let i = q8_dot16(c.lo, v.a.a) + q8_dot16(c.hi, v.b.a);
    return v.a.d * (s * f32(i));
}

fn kq8_dot_span(w: Kq8Raw, u: u32, v: Q8Span) -> f32 {
    let d = iq4xs8_unit(w.a, u, v.u0);
    if (SPAN == 2u) {
        return d + iq4xs8_unit(w.b, u + 1u, v.u1);
    }
    return d;
}

// Q6_K against int8 activations (after quant/q6_k.wgsl and quant/q8.wgsl): the 6-bit codes
// q (0..63, bytes below 128) go into q8_dot16 unbiased and the bias comes off the integer sum:
// sum((q - 32) x_q) = sum(q x_q) - 32 sum(x_q). Per group: d8 * (d*sc) * that (exact integer).
// With SPAN 2 the matvec's step is two units, each decoded as alone.
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

fn q6k8_unit(w: KqRaw, u: u32, v: Q8Unit) -> f32 {
    let s = q6k_unit_scales(w, u);
    let c = q6k_codes(w, u);
    let ia = q8_dot16(c.lo, v.a.a) - 32i * v.a.s;
    let ib = q8_dot16(c.hi, v.b.a) - 32i * v.b.s;
    return v.a.d * (s.x * f32(ia)) + v.b.d * (s.y * f32(ib));
}

fn kq8_dot_span(w: Kq8Raw, u: u32, v: Q8Span) -> f32 {
    let d = q6k8_unit(w.a, u, v.u0);
    if (SPAN == 2u) {
        return d + q6k8_unit(w.b, u + 1u, v.u1);
    }
    return d;
}

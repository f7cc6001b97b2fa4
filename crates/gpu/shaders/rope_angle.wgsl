// The angle of a RoPE pair, shared by rope.wgsl and attention.wgsl (which rotates q and the
// new keys itself when RoPE is folded into it).
//
// The angle pos * inv_freq[i] is formed exactly in fixed point: the CPU stores inv_freq / 2pi
// as a 64-bit binary fraction (hi, lo), so turns = pos * (hi, lo) mod 1 is a u32 product plus
// the high half of another. Its top two bits give the quadrant and the rest an angle within
// [-pi/4, pi/4) where short polynomials give sin and cos to a few ulp. So the result does not
// depend on how a device evaluates sin/cos of large arguments (WGSL only promises 2^-11 in
// [-pi, pi]), at any position.

// The high 32 bits of the 64-bit product a * b, from 16-bit halves.
fn mul_hi(a: u32, b: u32) -> u32 {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = ((a0 * b0) >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
}

// (cos, sin) of the angle turns * 2pi / 2^32.
fn cos_sin_turns(turns: u32) -> vec2<f32> {
    let quadrant = (turns + 0x20000000u) >> 30u;
    let rest = bitcast<i32>(turns - (quadrant << 30u)); // in [-2^29, 2^29)
    let a = f32(rest) * 1.4629180792671596e-9; // 2pi / 2^32
    let a2 = a * a;
    let s = a * (1.0 + a2 * (-1.6666667e-1 + a2 * (8.3333333e-3 + a2 * (-1.9841270e-4
        + a2 * 2.7557319e-6))));
    let c = 1.0 + a2 * (-0.5 + a2 * (4.1666667e-2 + a2 * (-1.3888889e-3 + a2 * (2.4801587e-5
        + a2 * -2.7557319e-7))));
    switch quadrant {
        case 0u: { return vec2<f32>(c, s); }
        case 1u: { return vec2<f32>(-s, c); }
        case 2u: { return vec2<f32>(-c, -s); }
        default: { return vec2<f32>(s, -c); }
    }
}

// (cos, sin) of position `pos` times the pair frequency `f` (hi, lo).
fn rope_cos_sin(f: vec2<u32>, pos: u32) -> vec2<f32> {
    return cos_sin_turns(pos * f.x + mul_hi(pos, f.y));
}

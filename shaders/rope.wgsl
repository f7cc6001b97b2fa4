// Rotary position embedding, in place on q or k laid out (n_tokens, n_heads, head_dim); token
// t sits at position pos0 + t. One thread per rotated pair: interleaved pairs (2i, 2i+1) or
// NeoX pairs (i, i + rot_dim/2); dimensions from rot_dim on pass through.
//
// The angle pos * inv_freq[i] is formed exactly in fixed point: the CPU stores inv_freq / 2pi
// as a 64-bit binary fraction (hi, lo), so turns = pos * (hi, lo) mod 1 is a u32 product plus
// the high half of another. Its top two bits give the quadrant and the rest an angle within
// [-pi/4, pi/4) where short polynomials give sin and cos to a few ulp. So the result does not
// depend on how a device evaluates sin/cos of large arguments (WGSL only promises 2^-11 in
// [-pi, pi]), at any position.
//
// Bindings:
//   0  uniform RopeParams
//   1  uniform PositionParams
//   2  x: (n_tokens, n_heads, head_dim) f32, rotated in place
//   3  freqs: (rot_dim / 2) vec2<u32>, inv_freq / 2pi as a 64-bit fraction (hi, lo)

struct RopeParams {
    n_tokens: u32,
    n_heads: u32,
    head_dim: u32,
    rot_dim: u32,
    neox: u32, // 1: pairs (i, i + rot_dim/2); 0: pairs (2i, 2i+1)
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> p: RopeParams;
@group(0) @binding(1) var<uniform> position: PositionParams;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read> freqs: array<vec2<u32>>;

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

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let half = p.rot_dim / 2u;
    let i = flat_workgroup(wid, nwg) * WG + lid;
    if (i >= p.n_tokens * p.n_heads * half) {
        return;
    }
    let pair = i % half;
    let row = i / half; // token * n_heads + head
    let pos = position.pos0 + row / p.n_heads;
    let f = freqs[pair];
    let cs = cos_sin_turns(pos * f.x + mul_hi(pos, f.y));
    var ia = 2u * pair;
    var ib = 2u * pair + 1u;
    if (p.neox == 1u) {
        ia = pair;
        ib = pair + half;
    }
    let base = row * p.head_dim;
    let va = x[base + ia];
    let vb = x[base + ib];
    x[base + ia] = va * cs.x - vb * cs.y;
    x[base + ib] = va * cs.y + vb * cs.x;
}

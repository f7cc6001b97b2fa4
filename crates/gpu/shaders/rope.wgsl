// Rotary position embedding, in place on q or k laid out (n_tokens, n_heads, head_dim); token
// t sits at position pos0 + t. One thread per rotated pair: interleaved pairs (2i, 2i+1) or
// NeoX pairs (i, i + rot_dim/2); dimensions from rot_dim on pass through.
//
// The angles come from rope_angle.wgsl (exact fixed-point turns, then short polynomials).
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
    let pair = i % max(half, 1u);
    let row = i / max(half, 1u); // token * n_heads + head
    let pos = position.pos0 + row / max(p.n_heads, 1u);
    let cs = rope_cos_sin(freqs[pair], pos);
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

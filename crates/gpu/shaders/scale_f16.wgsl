// Activations to f16 tiles (f16_tiles.wgsl), the input operand of the cooperative-matrix
// matmul (matmul_f16_coop.wgsl): one workgroup per token finds the token's largest |x| and
// writes x times the power of two that brings it into [1, 2) (1 for an all-zero token), so
// f16 neither overflows (65504) nor loses a large-valued token's small values to its
// subnormals, and the power's inverse, by which the matmul scales its sums back exactly.
//
// Bindings:
//   0  uniform MatmulParams: cols, n_tokens, x_stride
//   1  x: (n_tokens, x_stride) f32 as vec4
//   2  xh: (n_tokens, cols) f16 in tiles, 4 halves a vec2<u32>
//   3  inv: (n_tokens) f32, each token's inverse scale

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> xh: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read_write> inv: array<f32>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = flat_workgroup(wid, nwg);
    if (t >= p.n_tokens) {
        return;
    }
    let base = t * p.x_stride / 4u;
    let n = p.cols / 4u;
    var m = 0.0;
    for (var i = lid; i < n; i = i + WG) {
        let v = abs(x[base + i]);
        m = max(m, max(max(v.x, v.y), max(v.z, v.w)));
    }
    m = workgroup_max(m, lid);
    var s = vec2<f32>(1.0);
    if (m > 0.0) {
        let e = clamp((bitcast<u32>(m) >> 23u) & 0xffu, 1u, 253u);
        s = vec2<f32>(bitcast<f32>((254u - e) << 23u), bitcast<f32>(e << 23u));
    }
    for (var i = lid; i < n; i = i + WG) {
        let v = x[base + i] * s.x;
        xh[f16_tile(t, 4u * i, p.cols) / 4u] = vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw));
    }
    if (lid == 0u) {
        inv[t] = s.y;
    }
}

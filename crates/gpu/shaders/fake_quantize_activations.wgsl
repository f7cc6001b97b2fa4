// BitLinear activation quantization as f32 ("fake quantization"), per token, for the weight
// formats whose kernels take f32 activations (TQ1_0, TQ2_0 in matvec_ternary/matmul_ternary):
//   s = 127 / max(max|x|, 1e-5),  q = clamp(round_half_even(x * s), -128, 127),  y = q / s
// so that W . y = (W . q) / s, BitLinear's output before the weight scale (applied by the
// matmul kernels from MatmulParams.weight_scale). s and q come from activation_quant.wgsl
// (prepended), the same helpers as quantize_activations.wgsl: s and q equal the CPU's exactly;
// only the final `q / s` is a WGSL division (within 2.5 ulp of the exact quotient).
// One workgroup per token: an absmax reduction over the row, then one pass writing y.
//
// Bindings:
//   0  uniform FakeQuantParams
//   1  x: (n_tokens, x_stride) f32, cols % 4 == 0 values used per token
//   2  y: (n_tokens, y_stride) f32, the first cols values of each token's row written

struct FakeQuantParams {
    n_tokens: u32, // tokens
    cols: u32,     // values per token (a multiple of 4)
    x_stride: u32, // input row length: x[t * x_stride + col] (a multiple of 4)
    y_stride: u32, // output row length: y[t * y_stride + col] (a multiple of 4)
}

@group(0) @binding(0) var<uniform> p: FakeQuantParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = flat_workgroup(wid, nwg);
    // Uniform per workgroup, so the reduction below stays in uniform control flow.
    if (t >= p.n_tokens) {
        return;
    }
    let words = p.cols / 4u;
    let xbase = t * (p.x_stride / 4u);
    let s = token_scale(xbase, words, lid);
    let ybase = t * (p.y_stride / 4u);
    for (var i = lid; i < words; i = i + WG) {
        y[ybase + i] = vec4<f32>(quantize4(x[xbase + i], s)) / s;
    }
}

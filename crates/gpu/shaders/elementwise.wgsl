// The driver of the element-wise kernels (ReLU², SiLU- and GELU-gated products, residual add,
// products by columns, soft caps): one
// thread per element, out[i] = apply(first, b[i]), where `first` is a[i], or out[i] itself
// when in_place is set. Each kernel's own file defines `apply`.
//
// Bindings:
//   0  uniform ElementwiseParams
//   1  a: (n) f32   first operand (unused when in_place; then any other read buffer)
//   2  out: (n) f32
//   3  b: (n) f32   second operand (unused by plain ReLU²; then any other read buffer); with
//                   cols set, (cols) f32 repeated over rows of cols (a bias)

struct ElementwiseParams {
    n: u32,
    in_place: u32, // 1: the first operand is `out` itself
    gated: u32,    // ReLU² only: 1 multiplies by b
    cols: u32,     // 0: b has n values; else b[i % cols]
    scalar: f32,   // softcap.wgsl's cap
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> p: ElementwiseParams;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = flat_workgroup(wid, nwg) * WG + lid;
    if (i >= p.n) {
        return;
    }
    var first: f32;
    if (p.in_place == 1u) {
        first = out[i];
    } else {
        first = a[i];
    }
    var bi = i;
    if (p.cols != 0u) {
        bi = i % max(p.cols, 1u);
    }
    out[i] = apply(first, b[bi]);
}

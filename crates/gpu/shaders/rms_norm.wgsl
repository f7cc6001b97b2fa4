// RMSNorm: y = x / sqrt(mean(x^2) + eps) * w over each row. One workgroup per row: the
// threads stride along the row summing squares, reduce with workgroup_sum, then scale. Each
// thread takes four strided elements per step, their loads issued together (a single row
// is latency-bound: decode normalizes one token).
//
// Bindings:
//   0  uniform RmsNormParams
//   1  x: (n_rows, dim) f32
//   2  y: (n_rows, dim) f32
//   3  w: (dim) f32

struct RmsNormParams {
    n_rows: u32,
    dim: u32,
    eps: f32,
    pad0: u32,
}

@group(0) @binding(0) var<uniform> p: RmsNormParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<f32>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = flat_workgroup(wid, nwg);
    if (row >= p.n_rows) {
        return;
    }
    let base = row * p.dim;
    let n = p.dim;
    var ss = 0.0;
    for (var i = lid; i < n; i = i + 4u * WG) {
        let v0 = x[base + i];
        let v1 = select(0.0, x[base + min(i + WG, n - 1u)], i + WG < n);
        let v2 = select(0.0, x[base + min(i + 2u * WG, n - 1u)], i + 2u * WG < n);
        let v3 = select(0.0, x[base + min(i + 3u * WG, n - 1u)], i + 3u * WG < n);
        ss = ss + ((v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3));
    }
    let total = workgroup_sum(ss, lid);
    let inv = inverseSqrt(total / f32(n) + p.eps);
    for (var i = lid; i < n; i = i + 4u * WG) {
        let i1 = min(i + WG, n - 1u);
        let i2 = min(i + 2u * WG, n - 1u);
        let i3 = min(i + 3u * WG, n - 1u);
        let a0 = x[base + i] * w[i];
        let a1 = x[base + i1] * w[i1];
        let a2 = x[base + i2] * w[i2];
        let a3 = x[base + i3] * w[i3];
        y[base + i] = a0 * inv;
        if (i + WG < n) {
            y[base + i1] = a1 * inv;
        }
        if (i + 2u * WG < n) {
            y[base + i2] = a2 * inv;
        }
        if (i + 3u * WG < n) {
            y[base + i3] = a3 * inv;
        }
    }
}

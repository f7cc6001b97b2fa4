// y = W x for one token (decode), W in a legacy format (F32, F16, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0; the format's block_dot is prepended from quant/legacy_<format>.wgsl).
//
// Algorithm: a workgroup owns ROW_LANES consecutive rows and is cut into WG / ROW_LANES
// column slices. Invocation (slice, lane) accumulates row `lane` over the blocks slice,
// slice + WG / ROW_LANES, ... Since the planes interleave rows by groups of 32, the lanes of
// a slice read neighbouring 16-byte slots (coalesced vec4<u32> loads) and all use the same
// 32 values of x, which the workgroup stages in workgroup memory 4 X_VEC4S columns at a time
// (so x costs neither bandwidth nor more than 8 vector loads per block). The slices' partial
// sums are added in workgroup memory. Many slices per workgroup keep enough loads in flight
// on short matrices (576 rows) and long rows (6912 columns) alike. WG: a multiple of
// ROW_LANES, at most 256 (default 256: 8 slices).
//
// Bindings:
//   0  uniform MatmulParams
//   1  x: (n_tokens, x_stride) f32; token 0 is read
//   2  y: (n_tokens, y_stride) f32; y[row_offset + row] written for this chunk's rows
//   3.. the weight planes of this chunk's rows (see the format file)

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// Rows per workgroup (a power of two, at most 32 and at most WG). Mirrored by
// MATVEC_ROWS_PER_WORKGROUP in src/gpu/kernels/legacy.rs.
const ROW_LANES: u32 = 32u;
// vec4s of x staged at a time: by default 2 per invocation (2048 columns at WG 256, 256 at
// 32), sized by WG as `partial` is, because WebGPU zero-initializes workgroup memory at the
// start of every workgroup, which on SwiftShader (32-wide workgroups here) cost as much as the
// work itself with arrays of the 256-invocation maximum. Native pipelines, which skip that,
// set 512 (`Kernel::constants`).
override X_VEC4S: u32 = 2u * WG;

// Partial sums: (WG / ROW_LANES slices, ROW_LANES rows).
var<workgroup> partial: array<f32, WG>;
// x[c0 .. c0 + 4 X_VEC4S] of the current chunk.
var<workgroup> xs: array<vec4<f32>, X_VEC4S>;

// x[c .. c + 4], 0 past `cols`.
fn x4(c: u32, cols: u32) -> vec4<f32> {
    if (c + 4u <= cols) {
        return vec4<f32>(x[c], x[c + 1u], x[c + 2u], x[c + 3u]);
    }
    var v = vec4<f32>();
    if (c < cols) { v.x = x[c]; }
    if (c + 1u < cols) { v.y = x[c + 1u]; }
    if (c + 2u < cols) { v.z = x[c + 2u]; }
    return v;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let first = flat_workgroup(wid, nwg) * ROW_LANES;
    if (first >= p.rows) {
        return;
    }
    let lane = lid % ROW_LANES;
    let slice = lid / ROW_LANES;
    let slices = WG / ROW_LANES;
    let row = first + lane;

    var acc = 0.0;
    let x_chunk = 4u * X_VEC4S;
    for (var c0 = 0u; c0 < p.cols; c0 = c0 + x_chunk) {
        let n = min(x_chunk, p.cols - c0);
        for (var i = lid; 4u * i < n; i = i + WG) {
            xs[i] = x4(c0 + 4u * i, p.cols);
        }
        workgroupBarrier();
        if (row < p.rows) {
            let b0 = c0 / 32u;
            for (var b = slice; 32u * b < n; b = b + slices) {
                let o = 8u * b;
                let xv = array<vec4<f32>, 8>(xs[o], xs[o + 1u], xs[o + 2u], xs[o + 3u],
                                             xs[o + 4u], xs[o + 5u], xs[o + 6u], xs[o + 7u]);
                acc = acc + block_dot(row, b0 + b, p.cols, p.rows, xv);
            }
        }
        workgroupBarrier();
    }
    partial[lid] = acc;
    workgroupBarrier();
    if (slice == 0u && row < p.rows) {
        var total = 0.0;
        for (var s = 0u; s < slices; s = s + 1u) {
            total = total + partial[s * ROW_LANES + lane];
        }
        y[p.row_offset + row] = total;
    }
}

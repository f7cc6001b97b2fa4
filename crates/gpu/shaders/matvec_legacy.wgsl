// y = W x for one token (decode), W in a legacy format (F32, F16, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0; the format's block_dot is prepended from quant/legacy_<format>.wgsl).
//
// Algorithm: a workgroup owns ROWS consecutive rows. With WG >= 32 they are ROW_LANES (32) and
// the workgroup is cut into WG / 32 column slices and invocation (slice, lane) accumulates row `lane` over the blocks
// slice, slice + WG / 32, ...; since the planes interleave rows by groups of 32, the lanes of a
// slice read neighbouring 16-byte slots (coalesced vec4<u32> loads) and all use the same 32
// values of x, which the workgroup stages in workgroup memory 4 X_VEC4S columns at a time (so
// x costs neither bandwidth nor more than 8 vector loads per block). The slices' partial sums
// are added in workgroup memory. Many slices per workgroup keep enough loads in flight on
// short matrices (576 rows) and long rows (6912 columns) alike. With WG < 32 (CPU adapters:
// see `SOFTWARE_MATVEC_WG` in src/gpu/matmul.rs) a workgroup owns 16 WG rows and each
// invocation accumulates 16 of them (lid, lid + WG, ...) with the same staged x: fewer
// workgroups, each x value read from workgroup memory once for 16 rows. WG: a power of two
// from 4 to 32, or a multiple of 32 up to 256 (default 256: 8 slices).
//
// Bindings:
//   0  uniform MatmulParams
//   1  x: (n_tokens, x_stride) f32; token 0 is read
//   2  y: (n_tokens, y_stride) f32; y[row_offset + row] written (or added to: ACCUMULATE)
//      for this chunk's rows
//   3.. the weight planes of this chunk's rows (see the format file)

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// Rows per workgroup: ROW_LANES (a power of two, at most 32), or with WG < 32 16 per
// invocation. Mirrored by `matvec_rows_per_workgroup` in src/gpu/kernels/legacy.rs.
const ROW_LANES: u32 = 32u;
override ROWS: u32 = select(ROW_LANES, 16u * WG, WG < ROW_LANES);
// Column slices (WG >= 32), and rows per invocation (at most MAX_RPI).
override SLICES: u32 = max(WG / ROW_LANES, 1u);
override RPI: u32 = ROWS / min(WG, ROW_LANES);
const MAX_RPI: u32 = 16u;
// vec4s of x staged at a time: 2 per invocation, at least 64 (256 columns), sized by WG as
// `partial` is, because WebGPU zero-initializes workgroup memory at the start of every
// workgroup, and SwiftShader does it in every group of 4 invocations, element by element: its
// cost grows with the workgroup size times the arrays' size (with 32-wide workgroups and
// arrays of the 256-invocation maximum it cost as much as the work). Native pipelines, which
// skip that, set 512 (`Kernel::constants`).
override X_VEC4S: u32 = max(2u * WG, 64u);

// Partial sums of the slices: (SLICES, ROW_LANES rows).
var<workgroup> partial: array<f32, WG>;
// x[c0 .. c0 + 4 X_VEC4S] of the current chunk.
var<workgroup> xs: array<vec4<f32>, X_VEC4S>;

// 1: y += W x (Kernel::MatvecAdd, a residual add in the product's dispatch).
override ACCUMULATE: u32 = 0u;

fn store(i: u32, v: f32) {
    if (ACCUMULATE == 1u) {
        y[i] = y[i] + v;
    } else {
        y[i] = v;
    }
}

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
    let first = flat_workgroup(wid, nwg) * ROWS;
    if (first >= p.rows) {
        return;
    }
    // Two loops rather than one with a loop over rows: a loop over RPI == 1 row inside the
    // slices' loop makes the 256-wide GPU kernel 10-15% slower.
    if (RPI == 1u) {
        slices(first, lid);
    } else {
        rows(first, lid);
    }
}

// Stages x[c0 .. c0 + n] in `xs` (between barriers: the caller's next barrier ends its use).
fn stage_x(c0: u32, n: u32, lid: u32) {
    for (var i = lid; 4u * i < n; i = i + WG) {
        xs[i] = x4(c0 + 4u * i, p.cols);
    }
    workgroupBarrier();
}

// x's block b of the staged chunk.
fn staged_block(b: u32) -> array<vec4<f32>, 8> {
    let o = 8u * b;
    return array<vec4<f32>, 8>(xs[o], xs[o + 1u], xs[o + 2u], xs[o + 3u],
                               xs[o + 4u], xs[o + 5u], xs[o + 6u], xs[o + 7u]);
}

// WG >= 32: one row per invocation, SLICES column slices.
fn slices(first: u32, lid: u32) {
    let lane = lid % ROW_LANES;
    let slice = lid / ROW_LANES;
    let row = first + lane;
    var acc = 0.0;
    let x_chunk = 4u * X_VEC4S;
    for (var c0 = 0u; c0 < p.cols; c0 = c0 + x_chunk) {
        let n = min(x_chunk, p.cols - c0);
        stage_x(c0, n, lid);
        if (row < p.rows) {
            let b0 = c0 / 32u;
            for (var b = slice; 32u * b < n; b = b + SLICES) {
                acc = acc + block_dot(row, b0 + b, p.cols, p.rows, staged_block(b));
            }
        }
        workgroupBarrier();
    }
    partial[lid] = acc;
    workgroupBarrier();
    if (slice == 0u && row < p.rows) {
        var total = 0.0;
        for (var s = 0u; s < SLICES; s = s + 1u) {
            total = total + partial[s * ROW_LANES + lane];
        }
        store(p.row_offset + row, total);
    }
}

// WG < 32: one slice, RPI rows per invocation (lid, lid + WG, ...).
fn rows(first: u32, lid: u32) {
    var acc: array<f32, MAX_RPI>;
    let x_chunk = 4u * X_VEC4S;
    for (var c0 = 0u; c0 < p.cols; c0 = c0 + x_chunk) {
        let n = min(x_chunk, p.cols - c0);
        stage_x(c0, n, lid);
        let b0 = c0 / 32u;
        for (var b = 0u; 32u * b < n; b = b + 1u) {
            let xv = staged_block(b);
            for (var k = 0u; k < RPI; k = k + 1u) {
                let row = first + lid + k * WG;
                if (row < p.rows) {
                    acc[k] = acc[k] + block_dot(row, b0 + b, p.cols, p.rows, xv);
                }
            }
        }
        workgroupBarrier();
    }
    for (var k = 0u; k < RPI; k = k + 1u) {
        let row = first + lid + k * WG;
        if (row < p.rows) {
            store(p.row_offset + row, acc[k]);
        }
    }
}

// y = W x for one token, W in a legacy block format (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; the
// format's block_dot_q8 is prepended from quant/legacy_<format>_q8.wgsl), x as int8 activation
// records (quant/q8.wgsl): integer dot products (dot4I8Packed) per block of 32, the block's
// f32 scales applied once to its exact integer sum (crate::quant::q8dot).
//
// The mapping is matvec_legacy.wgsl's: a workgroup owns ROW_LANES consecutive rows and is cut
// into WG / ROW_LANES column slices; invocation (slice, lane) accumulates row `lane` over the
// blocks slice, slice + WG / ROW_LANES, ... The planes interleave rows by groups of 32, so the
// lanes of a slice read neighbouring 16-byte slots, and all use the same block of x: the
// workgroup stages X_CHUNK values of x in workgroup memory (two vec4 per block) with each
// block's sum (computed once) and scale. The slices' partial sums are added in workgroup
// memory. WG: a multiple of ROW_LANES, at most 256 (default 256: 8 slices).
//
// Bindings:
//   0  uniform MatmulParams (cols a multiple of 32)
//   1  x: (n_tokens, cols/16 + ceil(cols/128)) vec4<u32> activation records; token 0 used
//   2  y: (n_tokens, y_stride) f32; y[row_offset + row] written (or added to: ACCUMULATE)
//      for this chunk's rows
//   3.. the weight planes of this chunk's rows (see the format file)

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// Rows per workgroup. Mirrored by MATVEC_ROWS_PER_WORKGROUP in src/gpu/kernels/legacy.rs.
const ROW_LANES: u32 = 32u;
// Values of x staged at a time (a multiple of 32).
const X_CHUNK: u32 = 4096u;

// Partial sums: (WG / ROW_LANES slices, ROW_LANES rows), WG <= 256.
var<workgroup> partial: array<f32, 256>;
// The values of blocks c0 / 32 .. + X_CHUNK / 32 of the current chunk (two vec4 per block),
// their sums and scales.
var<workgroup> xs: array<vec4<u32>, 256>;
var<workgroup> xsum: array<i32, 128>;
var<workgroup> xd: array<f32, 128>;

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
    let total = q8_block_rows(first, lid);
    let row = first + lid;
    if (lid < ROW_LANES && row < p.rows) {
        q8_write_row(p.row_offset + row, total);
    }
}

// The products of rows first .. first + ROW_LANES - 1 (of this chunk): invocation `lane` of
// slice 0 (lid < ROW_LANES) gets row first + lane's; the others get 0. Call from every
// invocation of the workgroup (barriers).
fn q8_block_rows(first: u32, lid: u32) -> f32 {
    let lane = lid % ROW_LANES;
    let slice = lid / ROW_LANES;
    let slices = max(WG / ROW_LANES, 1u);
    let row = first + lane;
    var acc = 0.0;
    for (var c0 = 0u; c0 < p.cols; c0 = c0 + X_CHUNK) {
        let nblocks = min(X_CHUNK, p.cols - c0) / 32u;
        let b0 = c0 / 32u;
        for (var i = lid; i < nblocks; i = i + WG) {
            let lo = x[2u * (b0 + i)];
            let hi = x[2u * (b0 + i) + 1u];
            xs[2u * i] = lo;
            xs[2u * i + 1u] = hi;
            xsum[i] = q8_sum16(lo) + q8_sum16(hi);
            xd[i] = q8_scale(32u * (b0 + i), p.cols);
        }
        workgroupBarrier();
        if (row < p.rows) {
            for (var b = slice; b < nblocks; b = b + slices) {
                let a = Q8Block(xs[2u * b], xs[2u * b + 1u], xsum[b], xd[b]);
                acc = acc + block_dot_q8(row, b0 + b, p.cols, p.rows, a);
            }
        }
        workgroupBarrier();
    }
    partial[lid] = acc;
    workgroupBarrier();
    var total = 0.0;
    if (slice == 0u) {
        for (var s = 0u; s < slices; s = s + 1u) {
            total = total + partial[s * ROW_LANES + lane];
        }
    }
    return total;
}

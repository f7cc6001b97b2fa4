// y = W x for one token, W in a K-quant format (its decode helpers are prepended).
//
// A workgroup computes ROWS consecutive rows. Each thread takes units (32 weights of one
// super-block: one vec4 of 4-bit quants, see quant/kquants.wgsl) strided by the thread count;
// for each it issues the loads of all its rows first (so ROWS loads per thread are in flight
// together), loads the unit's 32 x values once and applies them to every row, with the
// scale and min of each 16 weights applied once to their sum. When a row has fewer units
// than there are threads (short rows), the threads split into 2 or 4 groups, each on a share
// of the rows, instead of idling. The per-thread row sums are reduced as one vec4 per thread
// by a tree in workgroup memory (one tree for all ROWS rows, rather than ROWS reductions).
// WG must be a power of two, at most 256.
//
// Bindings:
//   0  uniform MatmulParams
//   1  x: (n_tokens, x_stride) f32 as vec4 (x_stride = cols, a multiple of 256); token 0 used
//   2  y: (n_tokens, y_stride) f32, rows row_offset .. row_offset + rows written
//   3.. weight planes, declared by the format file

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// Rows per workgroup (one vec4 of accumulators). Mirrored by MATVEC_ROWS in
// src/gpu/kernels/kquants.rs.
const ROWS: u32 = 4u;

// Per-thread row sums for the final tree: (WG) vec4, one lane per row.
var<workgroup> partial: array<vec4<f32>, 256>;

fn x16(i: u32) -> V16 {
    return V16(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row0 = flat_workgroup(wid, nwg) * ROWS;
    if (row0 >= p.rows) {
        return;
    }
    let nb = p.cols / KQ_BLOCK;
    let units = nb * KQ_UNITS;
    // Thread groups: as many (up to ROWS) as keep every group's threads at most half idle.
    var groups = 1u;
    while (groups < ROWS && 2u * groups * units <= WG) {
        groups = groups * 2u;
    }
    let per_group = WG / groups;
    let n_rows = ROWS / groups;
    let first = row0 + (lid / per_group) * n_rows; // this thread's rows: first .. + n_rows
    let lane = lid % per_group;
    let r = vec4<u32>(first) + vec4<u32>(0u, 1u, 2u, 3u);
    let valid = (vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(n_rows)) & (r < vec4<u32>(p.rows));
    // First block of each row (invalid rows read row 0 of the chunk and are dropped).
    let rb = select(vec4<u32>(0u), r * nb, valid);

    var acc = vec4<f32>(0.0);
    for (var u = lane; u < units; u = u + per_group) {
        let blk = u / KQ_UNITS;
        let uu = u % KQ_UNITS;
        let w0 = kq_load(rb.x + blk, uu);
        let w1 = kq_load(rb.y + blk, uu);
        let w2 = kq_load(rb.z + blk, uu);
        let w3 = kq_load(rb.w + blk, uu);
        let o = kq_unit_offsets(uu);
        let xv = (blk * KQ_BLOCK) / 4u;
        let xa = x16(xv + o.x / 4u);
        let xb = x16(xv + o.y / 4u);
        let sx = vec2<f32>(sum16(xa), sum16(xb));
        acc = acc + vec4<f32>(kq_dot(w0, uu, xa, xb, sx), kq_dot(w1, uu, xa, xb, sx),
                              kq_dot(w2, uu, xa, xb, sx), kq_dot(w3, uu, xa, xb, sx));
    }

    // Sum each group's accumulators over its threads.
    partial[lid] = select(vec4<f32>(0.0), acc, valid);
    workgroupBarrier();
    for (var s = per_group / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            partial[lid] = partial[lid] + partial[lid + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u) {
        let total = partial[lid];
        for (var k = 0u; k < n_rows; k = k + 1u) {
            if (valid[k]) {
                y[p.row_offset + first + k] = total[k];
            }
        }
    }
}

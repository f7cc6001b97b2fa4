// y = W x for one token, W in a K-quant format (its decode helpers are prepended).
//
// A workgroup computes ROWS consecutive rows. Each thread takes units (32 weights of one
// super-block: one vec4 of 4-bit quants, see quant/kquants.wgsl) strided by the thread count,
// two units per iteration: it issues the loads of both units for all its rows first (2 ROWS
// sets of 16-byte loads in flight together), then loads each unit's 32 x values once, pre-scaled
// by KQ_XS so the decode needs no shifts, and applies them to every row, with the scale and min
// of each 16 weights applied once to their sum. When a row has fewer units than there are
// threads (short rows), the threads split into 2 or 4 groups, each on a share of the rows,
// instead of idling. Each thread places its row sums in the lanes of a vec4 (one lane per row
// of the workgroup) and one workgroup_sum4 adds them all (a vec4 subgroupAdd and one barrier
// where subgroups exist). WG must be a power of two, at most 256.
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

fn x16(i: u32) -> V16 {
    return V16(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
}

// One unit's x: groups A and B pre-scaled by KQ_XS, and their unscaled sums (for the mins).
struct KqX {
    a: V16,
    b: V16,
    s: vec2<f32>,
}

fn x_unit(blk: u32, uu: u32) -> KqX {
    let o = kq_unit_offsets(uu);
    let xv = blk * (KQ_BLOCK / 4u);
    let xa = x16(xv + o.x / 4u);
    let xb = x16(xv + o.y / 4u);
    return KqX(V16(xa.a * KQ_XS, xa.b * KQ_XS, xa.c * KQ_XS, xa.d * KQ_XS),
               V16(xb.a * KQ_XS, xb.b * KQ_XS, xb.c * KQ_XS, xb.d * KQ_XS),
               vec2<f32>(sum16(xa), sum16(xb)));
}

fn dot4(w0: KqRaw, w1: KqRaw, w2: KqRaw, w3: KqRaw, uu: u32, v: KqX) -> vec4<f32> {
    return vec4<f32>(kq_dot(w0, uu, v.a, v.b, v.s), kq_dot(w1, uu, v.a, v.b, v.s),
                     kq_dot(w2, uu, v.a, v.b, v.s), kq_dot(w3, uu, v.a, v.b, v.s));
}

// Lane i of v (i < 4), 0 for i >= 4, without dynamic indexing.
fn pick(v: vec4<f32>, i: u32) -> f32 {
    let e = select(select(select(v.x, v.y, i == 1u), v.z, i == 2u), v.w, i == 3u);
    return select(0.0, e, i < 4u);
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
    let per_group = max(WG / max(groups, 1u), 1u);
    let n_rows = ROWS / max(groups, 1u);
    let g = lid / per_group;
    let first = row0 + g * n_rows; // this thread's rows: first .. + n_rows
    let lane = lid % per_group;
    let r = vec4<u32>(first) + vec4<u32>(0u, 1u, 2u, 3u);
    let valid = (vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(n_rows)) & (r < vec4<u32>(p.rows));
    // First block of each row (invalid rows read row 0 of the chunk and are dropped).
    let rb = select(vec4<u32>(0u), r * nb, valid);

    var acc = vec4<f32>(0.0);
    var u = lane;
    for (; u + per_group < units; u = u + 2u * per_group) {
        let u2 = u + per_group;
        let blk = u / KQ_UNITS;
        let uu = u % KQ_UNITS;
        let blk2 = u2 / KQ_UNITS;
        let uu2 = u2 % KQ_UNITS;
        let w0 = kq_load(rb.x + blk, uu);
        let w1 = kq_load(rb.y + blk, uu);
        let w2 = kq_load(rb.z + blk, uu);
        let w3 = kq_load(rb.w + blk, uu);
        let v0 = kq_load(rb.x + blk2, uu2);
        let v1 = kq_load(rb.y + blk2, uu2);
        let v2 = kq_load(rb.z + blk2, uu2);
        let v3 = kq_load(rb.w + blk2, uu2);
        acc = acc + dot4(w0, w1, w2, w3, uu, x_unit(blk, uu));
        acc = acc + dot4(v0, v1, v2, v3, uu2, x_unit(blk2, uu2));
    }
    if (u < units) {
        let blk = u / KQ_UNITS;
        let uu = u % KQ_UNITS;
        let w0 = kq_load(rb.x + blk, uu);
        let w1 = kq_load(rb.y + blk, uu);
        let w2 = kq_load(rb.z + blk, uu);
        let w3 = kq_load(rb.w + blk, uu);
        acc = acc + dot4(w0, w1, w2, w3, uu, x_unit(blk, uu));
    }

    // Row k of this thread's rows goes to lane g * n_rows + k; one sum covers every group.
    let own = select(vec4<f32>(0.0), acc, valid);
    let src = vec4<u32>(0u, 1u, 2u, 3u) - vec4<u32>(g * n_rows);
    let placed = vec4<f32>(pick(own, src.x), pick(own, src.y), pick(own, src.z), pick(own, src.w));
    let total = workgroup_sum4(placed, lid);
    if (lid == 0u) {
        let out = p.row_offset + row0;
        if (row0 < p.rows) {
            y[out] = total.x;
        }
        if (row0 + 1u < p.rows) {
            y[out + 1u] = total.y;
        }
        if (row0 + 2u < p.rows) {
            y[out + 2u] = total.z;
        }
        if (row0 + 3u < p.rows) {
            y[out + 3u] = total.w;
        }
    }
}

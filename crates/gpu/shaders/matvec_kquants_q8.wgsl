// y = W x for one token, W in a K-quant format, x as int8 activation records (quant/q8.wgsl):
// integer dot products (dot4I8Packed) of 16 codes by 16 activations, each group's f32 scales
// applied once to its exact integer sum (the format's kq8_dot_span, after its decode file).
//
// A workgroup computes ROWS consecutive rows. A step is SPAN consecutive units of a block (a
// unit is 32 weights, 16 codes of group A and 16 of group B; with SPAN 2 a step of Q4_K or
// Q5_K is a sub-block pair, whose scales share one header word, unpacked once for both units:
// the host's choice for large matrices, kquants::matvec_q8_span); each thread takes steps
// strided by the thread count, two per iteration with the loads of both steps for all its rows
// issued first; each step's activations (per unit two vec4 of int8, their sums and scales) are
// loaded once and applied to every row. Short rows split the workgroup into 2 or 4 thread
// groups. The rows are reduced together by one workgroup_sum4. WG must be a power of two, at
// most 256.
//
// Bindings:
//   0  uniform MatmulParams (cols a multiple of 256)
//   1  x: (n_tokens, cols/16 + ceil(cols/128)) vec4<u32> activation records; token 0 used
//   2  y: (n_tokens, y_stride) f32, rows row_offset .. row_offset + rows written (or added
//      to: ACCUMULATE)
//   3.. weight planes, declared by the format file

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// Units per step: 1 or 2 (a pipeline constant).
override SPAN: u32 = 1u;

// Rows per workgroup (one vec4 of accumulators). Mirrored by MATVEC_ROWS in
// src/gpu/kernels/kquants.rs.
const ROWS: u32 = 4u;

// One unit's activations: group A, group B.
struct Q8Unit {
    a: Q8Group,
    b: Q8Group,
}

fn q8_unit(blk: u32, uu: u32) -> Q8Unit {
    let o = kq_unit_offsets(uu) + vec2<u32>(blk * KQ_BLOCK);
    return Q8Unit(q8_group(o.x, p.cols), q8_group(o.y, p.cols));
}

// One step's activations: units uu and (SPAN 2) uu + 1.
struct Q8Span {
    u0: Q8Unit,
    u1: Q8Unit,
}

fn q8_span(blk: u32, uu: u32) -> Q8Span {
    let u0 = q8_unit(blk, uu);
    if (SPAN == 1u) {
        return Q8Span(u0, u0);
    }
    return Q8Span(u0, q8_unit(blk, uu + 1u));
}

fn dot4(w0: Kq8Raw, w1: Kq8Raw, w2: Kq8Raw, w3: Kq8Raw, uu: u32, v: Q8Span) -> vec4<f32> {
    return vec4<f32>(kq8_dot_span(w0, uu, v), kq8_dot_span(w1, uu, v),
                     kq8_dot_span(w2, uu, v), kq8_dot_span(w3, uu, v));
}

// Lane i of v (i < 4), 0 for i >= 4, without dynamic indexing.
fn pick(v: vec4<f32>, i: u32) -> f32 {
    let e = select(select(select(v.x, v.y, i == 1u), v.z, i == 2u), v.w, i == 3u);
    return select(0.0, e, i < 4u);
}

// Where a workgroup's threads work: ROWS rows from row0 (of `rows`), split into `groups`
// thread groups of `per_group` threads, each taking `n_rows` rows; `rb` is the first block of
// each of this thread's rows (invalid rows read row 0 of the chunk and are dropped).
struct Q8Layout {
    g: u32,
    n_rows: u32,
    lane: u32,
    per_group: u32,
    steps: u32,
    valid: vec4<bool>,
    rb: vec4<u32>,
}

fn q8_layout(row0: u32, rows: u32, lid: u32) -> Q8Layout {
    let nb = p.cols / KQ_BLOCK;
    let steps = nb * (KQ_UNITS / SPAN);
    // Thread groups: as many (up to ROWS) as keep every group's threads at most half idle.
    var groups = 1u;
    while (groups < ROWS && 2u * groups * steps <= WG) {
        groups = groups * 2u;
    }
    let per_group = max(WG / max(groups, 1u), 1u);
    let n_rows = ROWS / max(groups, 1u);
    let g = lid / per_group;
    let first = row0 + g * n_rows; // this thread's rows: first .. + n_rows
    let r = vec4<u32>(first) + vec4<u32>(0u, 1u, 2u, 3u);
    let valid = (vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(n_rows)) & (r < vec4<u32>(rows));
    return Q8Layout(g, n_rows, lid % per_group, per_group, steps, valid,
                    select(vec4<u32>(0u), r * nb, valid));
}

// This thread's sums for its rows (lanes past n_rows hold garbage: q8_total drops them).
fn q8_rows(l: Q8Layout) -> vec4<f32> {
    let rb = l.rb;
    let per_group = l.per_group;
    let steps = l.steps;
    let per_block = KQ_UNITS / SPAN;
    var acc = vec4<f32>(0.0);
    var s = l.lane;
    for (; s + per_group < steps; s = s + 2u * per_group) {
        let s2 = s + per_group;
        let blk = s / per_block;
        let uu = (s % per_block) * SPAN;
        let blk2 = s2 / per_block;
        let uu2 = (s2 % per_block) * SPAN;
        let w0 = kq8_load(rb.x + blk, uu);
        let w1 = kq8_load(rb.y + blk, uu);
        let w2 = kq8_load(rb.z + blk, uu);
        let w3 = kq8_load(rb.w + blk, uu);
        let v0 = kq8_load(rb.x + blk2, uu2);
        let v1 = kq8_load(rb.y + blk2, uu2);
        let v2 = kq8_load(rb.z + blk2, uu2);
        let v3 = kq8_load(rb.w + blk2, uu2);
        acc = acc + dot4(w0, w1, w2, w3, uu, q8_span(blk, uu));
        acc = acc + dot4(v0, v1, v2, v3, uu2, q8_span(blk2, uu2));
    }
    if (s < steps) {
        let blk = s / per_block;
        let uu = (s % per_block) * SPAN;
        let w0 = kq8_load(rb.x + blk, uu);
        let w1 = kq8_load(rb.y + blk, uu);
        let w2 = kq8_load(rb.z + blk, uu);
        let w3 = kq8_load(rb.w + blk, uu);
        acc = acc + dot4(w0, w1, w2, w3, uu, q8_span(blk, uu));
    }
    return acc;
}

// The workgroup's ROWS sums: row k of a thread's rows goes to lane g * n_rows + k; one sum
// covers every group.
fn q8_total(l: Q8Layout, acc: vec4<f32>, lid: u32) -> vec4<f32> {
    let own = select(vec4<f32>(0.0), acc, l.valid);
    let src = vec4<u32>(0u, 1u, 2u, 3u) - vec4<u32>(l.g * l.n_rows);
    let placed = vec4<f32>(pick(own, src.x), pick(own, src.y), pick(own, src.z), pick(own, src.w));
    return workgroup_sum4(placed, lid);
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
    let l = q8_layout(row0, p.rows, lid);
    let total = q8_total(l, q8_rows(l), lid);
    if (lid == 0u) {
        let out = p.row_offset + row0;
        if (row0 < p.rows) {
            q8_write_row(out, total.x);
        }
        if (row0 + 1u < p.rows) {
            q8_write_row(out + 1u, total.y);
        }
        if (row0 + 2u < p.rows) {
            q8_write_row(out + 2u, total.z);
        }
        if (row0 + 3u < p.rows) {
            q8_write_row(out + 3u, total.w);
        }
    }
}

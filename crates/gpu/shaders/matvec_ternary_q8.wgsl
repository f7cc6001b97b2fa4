// y = W x for one token, W in a ternary block format (TQ1_0 or TQ2_0: the format file before
// this one supplies TQ8_UNITS, TqRaw, tq8_load, TqAct, tq8_act, tq8_dot, the per-block tail
// TQ8_TAIL, TqTail, tq8_tail_act, tq8_tail and the weight bindings 3..), x as int8 activation
// records (quant/q8.wgsl): integer dot products
// (dot4I8Packed) of the codes by the activations, each activation block's and weight block's
// f32 scales applied once to the exact integer sum, y times the per-tensor weight_scale (1
// unless the model gives one, as upstream BitNet GGUFs do in a separate tensor). For BitLinear
// the records hold the token's int8 values with one scale for every block (QuantizeActivationsQ8).
//
// TPR threads share each row and every thread serves RPT rows (as matvec_i2s.wgsl): the threads
// of a row take consecutive units (one 16-byte load of codes each), each thread loads a unit's
// activations once for its RPT rows. The TPR partial sums of a row are added in workgroup
// memory. Rows of a workgroup: WG / TPR * RPT; thread group g serves rows g, g + WG/TPR, ...
// WG must be a multiple of TPR.
//
// Bindings:
//   0  uniform MatmulParams (cols a multiple of 256)
//   1  x: (n_tokens, cols/16 + ceil(cols/128)) vec4<u32> activation records; token 0 used
//   2  y: (n_tokens, y_stride) f32, rows row_offset .. row_offset + rows written (or added
//      to: ACCUMULATE)
//   3.. weight planes, declared by the format file

// Threads per row (divides WG) and rows per thread (1..4). src/gpu/kernels/ternary.rs mirrors
// both to size the dispatch.
override TPR: u32 = 16u;
override RPT: u32 = 2u;

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

var<workgroup> row_partial: array<vec4<f32>, 256>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let groups = WG / TPR;
    let row0 = flat_workgroup(wid, nwg) * groups * RPT + lid / TPR;
    let lane = lid % TPR;
    let nb = p.cols / 256u;
    let units = nb * TQ8_UNITS;
    // Rows past the end read the last row (in bounds) and are not written.
    let last = p.rows - 1u;
    let b0 = min(row0, last) * nb;
    let b1 = min(row0 + groups, last) * nb;
    let b2 = min(row0 + 2u * groups, last) * nb;
    let b3 = min(row0 + 3u * groups, last) * nb;
    var acc = vec4<f32>();
    for (var v = lane; v < units; v = v + TPR) {
        let blk = v / TQ8_UNITS;
        let k = v % TQ8_UNITS;
        let w0 = tq8_load(b0 + blk, k);
        var w1 = w0;
        var w2 = w0;
        var w3 = w0;
        if (RPT > 1u) {
            w1 = tq8_load(b1 + blk, k);
        }
        if (RPT > 2u) {
            w2 = tq8_load(b2 + blk, k);
        }
        if (RPT > 3u) {
            w3 = tq8_load(b3 + blk, k);
        }
        let a = tq8_act(blk, k);
        acc.x = acc.x + tq8_dot(w0, k, a);
        if (RPT > 1u) {
            acc.y = acc.y + tq8_dot(w1, k, a);
        }
        if (RPT > 2u) {
            acc.z = acc.z + tq8_dot(w2, k, a);
        }
        if (RPT > 3u) {
            acc.w = acc.w + tq8_dot(w3, k, a);
        }
    }
    // The format's per-block tail (TQ1_0's qh word), taken apart from the units so that every
    // thread of a subgroup does the same work in the loop above.
    if (TQ8_TAIL) {
        for (var blk = lane; blk < nb; blk = blk + TPR) {
            let a = tq8_tail_act(blk);
            acc.x = acc.x + tq8_tail(b0 + blk, a);
            if (RPT > 1u) {
                acc.y = acc.y + tq8_tail(b1 + blk, a);
            }
            if (RPT > 2u) {
                acc.z = acc.z + tq8_tail(b2 + blk, a);
            }
            if (RPT > 3u) {
                acc.w = acc.w + tq8_tail(b3 + blk, a);
            }
        }
    }
    row_partial[lid] = acc;
    workgroupBarrier();
    if (lane == 0u) {
        var total = vec4<f32>();
        for (var i = 0u; i < TPR; i = i + 1u) {
            total = total + row_partial[lid + i];
        }
        for (var k = 0u; k < RPT; k = k + 1u) {
            let row = row0 + k * groups;
            if (row < p.rows) {
                q8_write_row(p.row_offset + row, total[k] * p.weight_scale);
            }
        }
    }
}

// y = BitLinear(W, x) for one token, W in I2_S, x an int8 activation record (quant/i2s.wgsl).
// TPR threads share each row and every thread serves RPT rows: the threads of a row read
// consecutive 16-byte vec4s of it (coalesced), each thread loads the 4 activation vec4s of a
// weight vec4 once for its RPT rows, and multiplies 64 codes by 64 int8 activations per vec4
// with dot4I8Packed into an i32. The TPR partial sums of a row are added in workgroup memory
// and the scale applied once: (sum(c x) - sum(x)) * weight_scale / s.
// Rows of a workgroup: WG / TPR * RPT; thread group g serves rows g, g + WG/TPR, ...
//
// Bindings:
//   0  uniform MatmulParams (x_stride = cols)
//   1  x: (n_tokens, 1 + cols/16) vec4<u32> activation records; token 0 is used
//   2  y: (n_tokens, y_stride) f32, rows row_offset .. row_offset + rows written
//   3  w: (rows, cols/64) vec4<u32> I2_S codes of this chunk's rows

// Threads per row (divides WG) and rows per thread (1..4). src/gpu/kernels/ternary.rs mirrors
// both to size the dispatch.
override TPR: u32 = 16u;
override RPT: u32 = 2u;

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<vec4<u32>>;

var<workgroup> row_partial: array<vec4<i32>, 256>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let groups = WG / TPR;
    let row0 = flat_workgroup(wid, nwg) * groups * RPT + lid / TPR;
    let lane = lid % TPR;
    let per_row = p.cols / 64u;
    // Rows past the end read the last row (in bounds) and are not written.
    let last = p.rows - 1u;
    let w0 = min(row0, last) * per_row;
    let w1 = min(row0 + groups, last) * per_row;
    let w2 = min(row0 + 2u * groups, last) * per_row;
    let w3 = min(row0 + 3u * groups, last) * per_row;
    var acc = vec4<i32>();
    for (var v = lane; v < per_row; v = v + TPR) {
        let o = 1u + i2s_act_offset(v);
        let x0 = x[o];
        let x1 = x[o + 2u];
        let x2 = x[o + 4u];
        let x3 = x[o + 6u];
        acc.x = acc.x + i2s_dot64(w[w0 + v], x0, x1, x2, x3);
        if (RPT > 1u) {
            acc.y = acc.y + i2s_dot64(w[w1 + v], x0, x1, x2, x3);
        }
        if (RPT > 2u) {
            acc.z = acc.z + i2s_dot64(w[w2 + v], x0, x1, x2, x3);
        }
        if (RPT > 3u) {
            acc.w = acc.w + i2s_dot64(w[w3 + v], x0, x1, x2, x3);
        }
    }
    row_partial[lid] = acc;
    workgroupBarrier();
    if (lane == 0u) {
        var total = vec4<i32>();
        for (var i = 0u; i < TPR; i = i + 1u) {
            total = total + row_partial[lid + i];
        }
        let header = x[0];
        for (var k = 0u; k < RPT; k = k + 1u) {
            let row = row0 + k * groups;
            if (row < p.rows) {
                y[p.row_offset + row] = i2s_output(total[k], header, p.weight_scale);
            }
        }
    }
}

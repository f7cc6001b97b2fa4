// RMSNorm, BitLinear's int8 activation quantization and I2_S products for one token, in one
// dispatch (decode). Every workgroup normalizes and quantizes the whole input row itself, into
// workgroup memory, with the arithmetic of rms_norm_quantize.wgsl (the same normed values, the
// same scale from scale_for_absmax, the same int8 values), then computes its rows as
// matvec_i2s.wgsl does, reading the int8 values from workgroup memory. The input and the norm's
// weight are read twice by every workgroup (from cache: 16 x dim bytes each), in exchange for
// the norm's own dispatch and the full barrier between the two, which cost more at decode's
// sizes.
//
// MODE (a pipeline constant):
//   0  up to three weights over consecutive ranges of rows (q, k, v): rows [0, rows0) are w0's
//      into y0, the next rows1 are w1's into y1, the next rows2 w2's into y2. rows0 and rows1
//      are multiples of the rows per workgroup, so each workgroup serves one weight.
//   1  the gated FFN: y0[r] = relu(w0 x)[r]^2 * (w1 x)[r] (relu_squared.wgsl's arithmetic),
//      rows0 rows of both weights.
//   2  the residual: y0[r] = y0[r] + (w0 x)[r] (add.wgsl's arithmetic).
//
// Bindings:
//   0        uniform NormBitLinearParams
//   1        x: (dim) f32 as vec4, the row to normalize (named `x` for token_scale's sake)
//   2        nw: (dim) f32 as vec4, the norm's weight
//   3, 4, 5  w0, w1, w2: I2_S codes, (rows, dim / 64) vec4<u32> (an unused one: any buffer)
//   6, 7, 8  y0, y1, y2: f32 outputs (an unused one: any other buffer)

struct NormBitLinearParams {
    dim: u32, // a multiple of 128, at most 16 * XQ_VEC4S
    eps: f32,
    rows0: u32,
    rows1: u32,
    rows2: u32,
    scale0: f32, // per-tensor weight scales
    scale1: f32,
    scale2: f32,
}

override MODE: u32 = 0u;
// Threads per row and rows per thread, as in matvec_i2s.wgsl (src/gpu/bitlinear.rs mirrors
// both to size the dispatch).
override TPR: u32 = 16u;
override RPT: u32 = 2u;

// The int8 values of the normed row (the record layout of quant/i2s.wgsl without its header):
// at most 9600 values, which with the reduction scratch stays within WebGPU's 16 KiB of
// workgroup memory.
const XQ_VEC4S: u32 = 600u;
var<workgroup> xq: array<vec4<u32>, XQ_VEC4S>;

@group(0) @binding(0) var<uniform> p: NormBitLinearParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> nw: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> w0: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> w1: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read> w2: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read_write> y0: array<f32>;
@group(0) @binding(7) var<storage, read_write> y1: array<f32>;
@group(0) @binding(8) var<storage, read_write> y2: array<f32>;

// Code vec4 `i` of weight `k` (uniform across the workgroup).
fn codes(k: u32, i: u32) -> vec4<u32> {
    if (k == 0u) {
        return w0[i];
    }
    if (k == 1u) {
        return w1[i];
    }
    return w2[i];
}

// The products of two weight vec4s with their activations (the second only when `has2`).
fn dot_pair(
    wa: vec4<u32>,
    wb: vec4<u32>,
    xa: array<vec4<u32>, 4>,
    xb: array<vec4<u32>, 4>,
    has2: bool,
) -> i32 {
    let a = i2s_dot64(wa, xa[0], xa[1], xa[2], xa[3]);
    let b = i2s_dot64(wb, xb[0], xb[1], xb[2], xb[3]);
    return a + select(0i, b, has2);
}

// One step's weight vec4s: columns v and v + TPR (each clamped to the row) of the thread's
// RPT rows (`rs`: their first vec4s), of weight k and, in MODE 1, of w1.
struct Fetch {
    a: array<vec4<u32>, 4>,
    b: array<vec4<u32>, 4>,
    ua: array<vec4<u32>, 4>,
    ub: array<vec4<u32>, 4>,
}

fn fetch(k: u32, rs: vec4<u32>, v: u32, per_row: u32) -> Fetch {
    let va = min(v, per_row - 1u);
    let vb = min(v + TPR, per_row - 1u);
    var f: Fetch;
    f.a[0] = codes(k, rs.x + va);
    f.b[0] = codes(k, rs.x + vb);
    if (RPT > 1u) {
        f.a[1] = codes(k, rs.y + va);
        f.b[1] = codes(k, rs.y + vb);
    }
    if (RPT > 2u) {
        f.a[2] = codes(k, rs.z + va);
        f.b[2] = codes(k, rs.z + vb);
    }
    if (RPT > 3u) {
        f.a[3] = codes(k, rs.w + va);
        f.b[3] = codes(k, rs.w + vb);
    }
    if (MODE == 1u) {
        f.ua[0] = w1[rs.x + va];
        f.ub[0] = w1[rs.x + vb];
        if (RPT > 1u) {
            f.ua[1] = w1[rs.y + va];
            f.ub[1] = w1[rs.y + vb];
        }
        if (RPT > 2u) {
            f.ua[2] = w1[rs.z + va];
            f.ub[2] = w1[rs.z + vb];
        }
        if (RPT > 3u) {
            f.ua[3] = w1[rs.w + va];
            f.ub[3] = w1[rs.w + vb];
        }
    }
    return f;
}

// The sum of the 64 int8 activations of four packed vec4s.
fn act_sum64(a: array<vec4<u32>, 4>) -> i32 {
    let ones = vec4<u32>(0x01010101u);
    return (dot4x4(a[0], ones) + dot4x4(a[1], ones)) + (dot4x4(a[2], ones) + dot4x4(a[3], ones));
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    // This workgroup's rows, as matvec_i2s.wgsl maps them, within the weight it serves.
    let groups = WG / TPR;
    let base = flat_workgroup(wid, nwg) * groups * RPT;
    var k = 0u;
    var first = 0u;
    var rows = p.rows0;
    var scale = p.scale0;
    if (MODE == 0u && base >= p.rows0 + p.rows1) {
        k = 2u;
        first = p.rows0 + p.rows1;
        rows = p.rows2;
        scale = p.scale2;
    } else if (MODE == 0u && base >= p.rows0) {
        k = 1u;
        first = p.rows0;
        rows = p.rows1;
        scale = p.scale1;
    }
    // The TPR threads of a row are consecutive segment indices (one subgroup where the
    // variant reduces with subgroup operations).
    let t = segment_index(lid);
    let row0 = base - first + t / TPR;
    let lane = t % TPR;
    let per_row = p.dim / 64u;
    // Rows past the end read the last row (in bounds) and are not written.
    let last = rows - 1u;
    let rs = vec4<u32>(
        min(row0, last),
        min(row0 + groups, last),
        min(row0 + 2u * groups, last),
        min(row0 + 3u * groups, last),
    ) * per_row;
    // The first step's weights are fetched now: they do not depend on x, so their latency
    // runs under the norm and the quantization below.
    var next = fetch(k, rs, lane, per_row);

    // One pass for RMSNorm's sum of squares and the absmax of x * w: the normed row's absmax
    // is that times 1 / rms, exactly (rounding is monotonic, so the largest fl(a * inv) is
    // fl(max a * inv)). Sixteen values per step, their eight loads issued together.
    let groups16 = p.dim / 16u;
    var ss = 0.0;
    var m = 0.0;
    for (var j = lid; j < groups16; j = j + WG) {
        let b = 4u * j;
        let x0 = x[b];
        let x1 = x[b + 1u];
        let x2 = x[b + 2u];
        let x3 = x[b + 3u];
        let a0 = abs(x0 * nw[b]);
        let a1 = abs(x1 * nw[b + 1u]);
        let a2 = abs(x2 * nw[b + 2u]);
        let a3 = abs(x3 * nw[b + 3u]);
        ss = ss + ((dot(x0, x0) + dot(x1, x1)) + (dot(x2, x2) + dot(x3, x3)));
        let a = max(max(a0, a1), max(a2, a3));
        m = max(m, max(max(a.x, a.y), max(a.z, a.w)));
    }
    // RMSNorm's 1 / rms and the quantization scale (activation_quant.wgsl's).
    let sm = workgroup_sum_max(vec2<f32>(ss, m), lid);
    let inv = inverseSqrt(sm.x / f32(p.dim) + p.eps);
    let s = scale_for_absmax(max(sm.y * inv, 1e-5));
    // The int8 values, 16 per vec4 (activation_record.wgsl's packing).
    for (var j = lid; j < groups16; j = j + WG) {
        let b = 4u * j;
        let q0 = quantize4((x[b] * nw[b]) * inv, s);
        let q1 = quantize4((x[b + 1u] * nw[b + 1u]) * inv, s);
        let q2 = quantize4((x[b + 2u] * nw[b + 2u]) * inv, s);
        let q3 = quantize4((x[b + 3u] * nw[b + 3u]) * inv, s);
        xq[j] = vec4<u32>(pack4xI8(q0), pack4xI8(q1), pack4xI8(q2), pack4xI8(q3));
    }
    workgroupBarrier();

    var acc = vec4<i32>();
    var acc_up = vec4<i32>(); // MODE 1: w1's rows
    // The codes are w + 1, so each row's sum(c x) exceeds sum(w x) by sum(x): every thread
    // adds up the activations of its own columns (the same for all its rows) and subtracts
    // them before the row's threads are summed, which gives sum(x) over the row once.
    var xsum = 0i;
    // Two weight vec4s per row and step (the second clamped and dropped past the row's end),
    // the next step's fetched before this one's products: 2 * RPT (MODE 1: 4 * RPT) loads
    // always in flight.
    for (var v = lane; v < per_row; v = v + 2u * TPR) {
        let cur = next;
        next = fetch(k, rs, v + 2u * TPR, per_row);
        let has2 = v + TPR < per_row;
        let v2 = min(v + TPR, per_row - 1u);
        let o = i2s_act_offset(v);
        let o2 = i2s_act_offset(v2);
        let xa = array<vec4<u32>, 4>(xq[o], xq[o + 2u], xq[o + 4u], xq[o + 6u]);
        let xb = array<vec4<u32>, 4>(xq[o2], xq[o2 + 2u], xq[o2 + 4u], xq[o2 + 6u]);
        xsum = xsum + act_sum64(xa) + select(0i, act_sum64(xb), has2);
        acc.x = acc.x + dot_pair(cur.a[0], cur.b[0], xa, xb, has2);
        if (RPT > 1u) {
            acc.y = acc.y + dot_pair(cur.a[1], cur.b[1], xa, xb, has2);
        }
        if (RPT > 2u) {
            acc.z = acc.z + dot_pair(cur.a[2], cur.b[2], xa, xb, has2);
        }
        if (RPT > 3u) {
            acc.w = acc.w + dot_pair(cur.a[3], cur.b[3], xa, xb, has2);
        }
        if (MODE == 1u) {
            acc_up.x = acc_up.x + dot_pair(cur.ua[0], cur.ub[0], xa, xb, has2);
            if (RPT > 1u) {
                acc_up.y = acc_up.y + dot_pair(cur.ua[1], cur.ub[1], xa, xb, has2);
            }
            if (RPT > 2u) {
                acc_up.z = acc_up.z + dot_pair(cur.ua[2], cur.ub[2], xa, xb, has2);
            }
            if (RPT > 3u) {
                acc_up.w = acc_up.w + dot_pair(cur.ua[3], cur.ub[3], xa, xb, has2);
            }
        }
    }
    let total = segment_sum4i(acc - vec4<i32>(xsum), t, TPR);
    var total_up = vec4<i32>();
    if (MODE == 1u) {
        total_up = segment_sum4i(acc_up - vec4<i32>(xsum), t, TPR);
    }
    if (lane != 0u) {
        return;
    }
    for (var r = 0u; r < RPT; r = r + 1u) {
        let row = row0 + r * groups;
        if (row >= rows) {
            continue;
        }
        // i2s_output's arithmetic.
        let a = f32(total[r]) * scale / s;
        if (MODE == 1u) {
            let up = f32(total_up[r]) * p.scale1 / s;
            let g = max(a, 0.0);
            y0[row] = (g * g) * up;
        } else if (MODE == 2u) {
            y0[row] = y0[row] + a;
        } else if (k == 0u) {
            y0[row] = a;
        } else if (k == 1u) {
            y1[row] = a;
        } else {
            y2[row] = a;
        }
    }
}

// Y = X W^T for several tokens (prefill), W in a K-quant format (its decode helpers are
// prepended).
//
// A workgroup computes a tile of BM = WG / 2 weight rows by BN = 64 tokens, one unit (32
// columns, see quant/kquants.wgsl) at a time: the first BM threads each dequantize one row's
// unit into workgroup memory (every weight is read and decoded once per 64 tokens; the raw
// words of the next unit are loaded before this unit's products, so their latency runs under
// them), all threads stage the unit's 32 columns of x for the 64 tokens, then each thread
// accumulates an 8-row by 4-token block: per column, three 16-byte workgroup reads (two vec4
// of weights, one of x) feed 32 FMAs, each output a sequential f32 FMA chain over the row.
// WG must be a multiple of 16, at most 256: 128 fits the 16 KiB of workgroup memory every
// WebGPU device has, 256 (a 128 x 64 tile) takes 24 KiB.
//
// Bindings:
//   0  uniform MatmulParams
//   1  x: (n_tokens, x_stride) f32 as vec4 (x_stride a multiple of 256)
//   2  y: (n_tokens, y_stride) f32, rows row_offset .. row_offset + rows written
//   3.. weight planes, declared by the format file

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// Tokens per tile. Mirrored by MATMUL_TOKENS in src/gpu/kernels/kquants.rs; rows per tile
// are WG / 2.
const BN: u32 = 64u;

// The unit's weights, [32 columns][BM / 4] vec4 of rows (sizes mirrored by
// matmul_workgroup_bytes in src/gpu/kernels/kquants.rs).
var<workgroup> ws: array<vec4<f32>, 4u * WG>;
// The unit's inputs, [32 columns][BN / 4] vec4 of tokens.
var<workgroup> xs: array<vec4<f32>, 512>;

// Rows are laid out across the vec4s (row r is component r % 4 of vec4 r / 4 of each column),
// so a thread's 4 rows of one column are one 16-byte read.
fn stage_w4(at: u32, stride: u32, c: u32, v: vec4<f32>) {
    ws[at][c] = v.x;
    ws[at + stride][c] = v.y;
    ws[at + 2u * stride][c] = v.z;
    ws[at + 3u * stride][c] = v.w;
}

fn stage_w16(at: u32, stride: u32, c: u32, v: V16) {
    stage_w4(at, stride, c, v.a);
    stage_w4(at + 4u * stride, stride, c, v.b);
    stage_w4(at + 8u * stride, stride, c, v.c);
    stage_w4(at + 12u * stride, stride, c, v.d);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let rg = WG / 16u; // row groups: threads per token group
    let bm = 8u * rg; // rows per tile
    let bm4 = bm / 4u; // vec4 of rows per staged column
    let row_tiles = max((p.rows + bm - 1u) / max(bm, 1u), 1u);
    let tile = flat_workgroup(wid, nwg);
    let row0 = (tile % row_tiles) * bm;
    let tok0 = (tile / row_tiles) * BN;
    if (tok0 >= p.n_tokens) {
        return;
    }
    let tr = lid % rg; // rows row0 + 4 tr .. + 4 and row0 + bm / 2 + 4 tr .. + 4
    let tc = lid / rg; // tokens tok0 + 4 tc .. + 4
    let nb = p.cols / KQ_BLOCK;
    let n_units = nb * KQ_UNITS;

    // Decoding threads: row row0 + lid's first block, and its first unit's raw words.
    let decodes = lid < bm && row0 + lid < p.rows;
    let wrow = (row0 + lid) * nb;
    var raw: KqRaw;
    if (decodes) {
        raw = kq_load(wrow, 0u);
    }

    // a<j><h>: token 4 tc + j, rows half h.
    var a00 = vec4<f32>(0.0);
    var a01 = vec4<f32>(0.0);
    var a10 = vec4<f32>(0.0);
    var a11 = vec4<f32>(0.0);
    var a20 = vec4<f32>(0.0);
    var a21 = vec4<f32>(0.0);
    var a30 = vec4<f32>(0.0);
    var a31 = vec4<f32>(0.0);
    for (var u = 0u; u < n_units; u = u + 1u) {
        let blk = u / KQ_UNITS;
        let uu = u % KQ_UNITS;
        let o = kq_unit_offsets(uu);
        workgroupBarrier();
        if (lid < bm) {
            var w: KqUnit; // zero for rows past the chunk
            if (decodes) {
                w = kq_decode(raw, uu);
                let next = u + 1u;
                if (next < n_units) {
                    raw = kq_load(wrow + next / KQ_UNITS, next % KQ_UNITS);
                }
            }
            stage_w16(lid / 4u, bm4, lid % 4u, w.lo);
            stage_w16(16u * bm4 + lid / 4u, bm4, lid % 4u, w.hi);
        }
        // 8 vec4 of columns (4 of group A, 4 of group B) per token, tokens fastest.
        for (var i = lid; i < 8u * BN; i = i + WG) {
            let t = i % BN;
            let q = i / BN;
            let col = blk * KQ_BLOCK + select(o.y + 4u * (q - 4u), o.x + 4u * q, q < 4u);
            var v = vec4<f32>(0.0);
            if (tok0 + t < p.n_tokens) {
                v = x[((tok0 + t) * p.x_stride + col) / 4u];
            }
            let at = 4u * q * (BN / 4u) + t / 4u;
            let c = t % 4u;
            xs[at][c] = v.x;
            xs[at + BN / 4u][c] = v.y;
            xs[at + 2u * (BN / 4u)][c] = v.z;
            xs[at + 3u * (BN / 4u)][c] = v.w;
        }
        workgroupBarrier();
        for (var k = 0u; k < 32u; k = k + 1u) {
            let w0 = ws[k * bm4 + tr];
            let w1 = ws[k * bm4 + rg + tr];
            let xv = xs[k * (BN / 4u) + tc];
            a00 = fma(w0, vec4<f32>(xv.x), a00);
            a01 = fma(w1, vec4<f32>(xv.x), a01);
            a10 = fma(w0, vec4<f32>(xv.y), a10);
            a11 = fma(w1, vec4<f32>(xv.y), a11);
            a20 = fma(w0, vec4<f32>(xv.z), a20);
            a21 = fma(w1, vec4<f32>(xv.z), a21);
            a30 = fma(w0, vec4<f32>(xv.w), a30);
            a31 = fma(w1, vec4<f32>(xv.w), a31);
        }
    }

    let blocks = array<vec4<f32>, 8>(a00, a01, a10, a11, a20, a21, a30, a31);
    for (var j = 0u; j < 4u; j = j + 1u) {
        let t = tok0 + 4u * tc + j;
        if (t >= p.n_tokens) {
            break;
        }
        for (var h = 0u; h < 2u; h = h + 1u) {
            let acc = blocks[2u * j + h];
            let r0 = row0 + h * (bm / 2u) + 4u * tr;
            for (var i = 0u; i < 4u; i = i + 1u) {
                if (r0 + i < p.rows) {
                    y[t * p.y_stride + p.row_offset + r0 + i] = acc[i];
                }
            }
        }
    }
}

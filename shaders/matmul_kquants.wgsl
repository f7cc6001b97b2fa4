// Y = X W^T for several tokens (prefill), W in a K-quant format (its decode helpers are
// prepended).
//
// A workgroup computes a tile of BM = 64 weight rows by BN = WG / 8 tokens (32 at WG = 256).
// It walks the row one unit (32 columns, see quant/kquants.wgsl) at a time: the first BM
// threads each dequantize one row's unit into shared memory (so every weight is read and
// decoded once per token tile), all threads stage the tile's 32 x columns for BN tokens, then
// each thread accumulates a 4-row by 2-token block with a sequential f32 FMA chain.
// WG must be a multiple of 16 and at most 256.
//
// Bindings:
//   0  uniform MatmulParams
//   1  x: (n_tokens, x_stride) f32 as vec4 (x_stride a multiple of 256)
//   2  y: (n_tokens, y_stride) f32, rows row_offset .. row_offset + rows written
//   3.. weight planes, declared by the format file

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// Weight rows per tile (16 threads by 4 rows). Mirrored by MATMUL_ROWS in
// src/gpu/kernels/kquants.rs; tokens per tile are WG / 8.
const BM: u32 = 64u;

// The tile's weights, [32 columns][BM rows].
var<workgroup> ws: array<f32, 2048>;
// The tile's inputs, [32 columns][BN tokens], BN <= 32.
var<workgroup> xs: array<f32, 1024>;

fn stage_w(k0: u32, r: u32, v: vec4<f32>) {
    ws[k0 * BM + r] = v.x;
    ws[(k0 + 1u) * BM + r] = v.y;
    ws[(k0 + 2u) * BM + r] = v.z;
    ws[(k0 + 3u) * BM + r] = v.w;
}

fn stage_w16(k0: u32, r: u32, v: V16) {
    stage_w(k0, r, v.a);
    stage_w(k0 + 4u, r, v.b);
    stage_w(k0 + 8u, r, v.c);
    stage_w(k0 + 12u, r, v.d);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let bn = WG / 8u;
    let row_tiles = (p.rows + BM - 1u) / BM;
    let tile = flat_workgroup(wid, nwg);
    let row0 = (tile % row_tiles) * BM;
    let tok0 = (tile / row_tiles) * bn;
    if (tok0 >= p.n_tokens) {
        return;
    }
    let tr = lid % 16u; // rows row0 + 4 tr .. + 4
    let tc = lid / 16u; // tokens tok0 + 2 tc, + 1
    let nb = p.cols / KQ_BLOCK;

    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    for (var u = 0u; u < nb * KQ_UNITS; u = u + 1u) {
        let blk = u / KQ_UNITS;
        let uu = u % KQ_UNITS;
        let o = kq_unit_offsets(uu);
        workgroupBarrier();
        for (var r = lid; r < BM; r = r + WG) {
            if (row0 + r < p.rows) {
                let w = kq_unit((row0 + r) * nb + blk, uu);
                stage_w16(0u, r, w.lo);
                stage_w16(16u, r, w.hi);
            }
        }
        // 8 vec4 of columns (4 of group A, 4 of group B) per token.
        for (var i = lid; i < 8u * bn; i = i + WG) {
            let t = i % bn;
            let q = i / bn;
            let col = blk * KQ_BLOCK + select(o.y + 4u * (q - 4u), o.x + 4u * q, q < 4u);
            var v = vec4<f32>(0.0);
            if (tok0 + t < p.n_tokens) {
                v = x[((tok0 + t) * p.x_stride + col) / 4u];
            }
            xs[(4u * q) * bn + t] = v.x;
            xs[(4u * q + 1u) * bn + t] = v.y;
            xs[(4u * q + 2u) * bn + t] = v.z;
            xs[(4u * q + 3u) * bn + t] = v.w;
        }
        workgroupBarrier();
        for (var k = 0u; k < 32u; k = k + 1u) {
            let wi = k * BM + 4u * tr;
            let wv = vec4<f32>(ws[wi], ws[wi + 1u], ws[wi + 2u], ws[wi + 3u]);
            let xi = k * bn + 2u * tc;
            acc0 = fma(wv, vec4<f32>(xs[xi]), acc0);
            acc1 = fma(wv, vec4<f32>(xs[xi + 1u]), acc1);
        }
    }

    for (var i = 0u; i < 4u; i = i + 1u) {
        let row = row0 + 4u * tr + i;
        if (row < p.rows) {
            let t0 = tok0 + 2u * tc;
            if (t0 < p.n_tokens) {
                y[t0 * p.y_stride + p.row_offset + row] = acc0[i];
            }
            if (t0 + 1u < p.n_tokens) {
                y[(t0 + 1u) * p.y_stride + p.row_offset + row] = acc1[i];
            }
        }
    }
}

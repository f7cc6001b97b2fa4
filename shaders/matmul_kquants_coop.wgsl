// Y = X W^T for several tokens (prefill), W in a K-quant format (its decode helpers are
// prepended), on cooperative matrices: 16x16x16 products of f16 inputs accumulated in f32
// (wgpu_cooperative_matrix; tensor cores on NVIDIA). The host enables the extension and picks
// this kernel only where the device offers that configuration, with 32-wide subgroups.
//
// A workgroup of 256 invocations (8 subgroups) computes a tile of CM = 128 weight rows by
// CN = 64 tokens, one unit (32 columns, see quant/kquants.wgsl) at a time: invocations 0..127
// each dequantize one row's unit (kq_decode, the f32 weights of the CPU reference, rounded to
// f16 once) into workgroup memory, the next unit's raw words loaded before this unit's products;
// invocations 128..255 stage the unit's 32 columns of x for the 64 tokens as f16 (loaded one
// unit ahead as well), each token
// scaled by a power of two that brings its largest |x| into [1, 2) (found in a first pass over
// the tile's rows of x; the outputs are divided back exactly). Subgroup s
// then accumulates a 32-row by 32-token block (rows 32 (s % 4) .., tokens 32 (s / 4) ..) as
// four 16x16 f32 matrices, two k-steps of 16 per unit. At the end each block goes through
// workgroup memory to y, so rows and tokens past the ends are never written.
//
// Bindings:
//   0  uniform MatmulParams
//   1  x: (n_tokens, x_stride) f32 as vec4 (x_stride a multiple of 256)
//   2  y: (n_tokens, y_stride) f32, rows row_offset .. row_offset + rows written
//   3.. weight planes, declared by the format file

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// Rows and tokens per tile. Mirrored by COOP_ROWS and COOP_TOKENS in
// src/gpu/kernels/kquants.rs.
const CM: u32 = 128u;
const CN: u32 = 64u;
// Row strides, in halves, of the staged weights ([row][k]) and inputs ([token][k]): the unit's
// 32 columns and 8 of padding (80 bytes: a multiple of 16, as cooperative loads need, and rows
// 20 words apart, off the 32 banks).
const SW: u32 = 40u;

var<workgroup> ws: array<f16, 5120>; // CM * SW
var<workgroup> xs: array<f16, 2560>; // CN * SW
// One 16x16 f32 block per subgroup on its way to y (column-major: row i, token j at i + 16 j).
var<workgroup> cs: array<f32, 2048>;
// Each token's largest |x| (as bits: the order of non-negative floats), then its scale and
// the scale's inverse (token_scale), found once before the units.
var<workgroup> tmax: array<atomic<u32>, 64>;
var<workgroup> tscale: array<vec2<f32>, 64>;

// The power of two that brings a token whose largest |x| has the bits `m` into [1, 2) (1 for
// an all-zero token), and its inverse: staged inputs are scaled by it, so f16 neither
// overflows (65504) nor loses the small values of a large-valued token to its subnormals; the
// products are divided back exactly.
fn token_scale(m: u32) -> vec2<f32> {
    if (m == 0u) {
        return vec2<f32>(1.0);
    }
    let e = clamp((m >> 23u) & 0xffu, 1u, 253u);
    return vec2<f32>(bitcast<f32>((254u - e) << 23u), bitcast<f32>(e << 23u));
}

fn stage_w16(at: u32, v: V16) {
    let h = array<vec4<f32>, 4>(v.a, v.b, v.c, v.d);
    for (var i = 0u; i < 4u; i = i + 1u) {
        let q = vec4<f16>(h[i]);
        ws[at + 4u * i] = q.x;
        ws[at + 4u * i + 1u] = q.y;
        ws[at + 4u * i + 2u] = q.z;
        ws[at + 4u * i + 3u] = q.w;
    }
}

// Vec4 i of unit u's inputs for the tile (8 per token: 4 of group A, 4 of group B; token
// i / 8), zero past the last token.
fn x_vec4(i: u32, u: u32, tok0: u32) -> vec4<f32> {
    let o = kq_unit_offsets(u % KQ_UNITS);
    let t = i / 8u;
    let q = i % 8u;
    let col = (u / KQ_UNITS) * KQ_BLOCK + select(o.y + 4u * (q - 4u), o.x + 4u * q, q < 4u);
    if (tok0 + t >= p.n_tokens) {
        return vec4<f32>(0.0);
    }
    return x[((tok0 + t) * p.x_stride + col) / 4u];
}

// Vec4 i of a unit's inputs into the staged [token][k] f16 rows, scaled by its token's scale.
fn stage_x4(i: u32, v: vec4<f32>) {
    let t = i / 8u;
    let h = vec4<f16>(v * tscale[t].x);
    let at = t * SW + 4u * (i % 8u);
    xs[at] = h.x;
    xs[at + 1u] = h.y;
    xs[at + 2u] = h.z;
    xs[at + 3u] = h.w;
}

// Block (bi, bj) of the subgroup's 2x2 (rows 16 bi, tokens 16 bj of its 32x32) to y.
fn write_block(c: coop_mat16x16<f32, C>, sg: u32, lane: u32, lanes: u32, r0: u32, t0: u32) {
    coopStore(c, &cs[256u * sg], 16u);
    workgroupBarrier();
    for (var e = lane; e < 256u; e = e + lanes) {
        let row = r0 + e % 16u;
        let t = t0 + e / 16u;
        if (row < p.rows && t < p.n_tokens) {
            y[t * p.y_stride + p.row_offset + row] = cs[256u * sg + e] * tscale[t % CN].y;
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) lanes: u32,
) {
    let row_tiles = (p.rows + CM - 1u) / CM;
    let tile = flat_workgroup(wid, nwg);
    let row0 = (tile % row_tiles) * CM;
    // No early return for tiles past the last token (a folded grid has some): cooperative
    // operations need uniform control flow, and such a tile stages zeros and writes nothing.
    let tok0 = (tile / row_tiles) * CN;
    let nb = p.cols / KQ_BLOCK;
    let n_units = nb * KQ_UNITS;
    // The subgroup's block: rows rb .. rb + 32, tokens tb .. tb + 32 of the tile.
    let rb = 32u * (sg % 4u);
    let tb = 32u * (sg / 4u);

    // Each token's largest |x|: four invocations per token, a quarter of the row each.
    if (lid < CN) {
        atomicStore(&tmax[lid], 0u);
    }
    workgroupBarrier();
    {
        let t = lid / 4u;
        var m = 0.0;
        if (tok0 + t < p.n_tokens) {
            let base = (tok0 + t) * p.x_stride / 4u;
            for (var i = lid % 4u; i < p.cols / 4u; i = i + 4u) {
                let v = abs(x[base + i]);
                m = max(m, max(max(v.x, v.y), max(v.z, v.w)));
            }
        }
        atomicMax(&tmax[t], bitcast<u32>(m));
    }
    workgroupBarrier();
    if (lid < CN) {
        tscale[lid] = token_scale(atomicLoad(&tmax[lid]));
    }

    // Decoding invocations: row row0 + lid's first block, and its first unit's raw words.
    let decodes = lid < CM && row0 + lid < p.rows;
    let wrow = (row0 + lid) * nb;
    var raw: KqRaw;
    if (decodes) {
        raw = kq_load(wrow, 0u);
    }

    // Staging invocations: their four vec4 of the first unit's inputs (then always one unit
    // ahead, so the loads' latency runs under the products).
    var xv0 = vec4<f32>(0.0);
    var xv1 = vec4<f32>(0.0);
    var xv2 = vec4<f32>(0.0);
    var xv3 = vec4<f32>(0.0);
    if (lid >= CM) {
        let i = lid - CM;
        xv0 = x_vec4(i, 0u, tok0);
        xv1 = x_vec4(i + 128u, 0u, tok0);
        xv2 = x_vec4(i + 256u, 0u, tok0);
        xv3 = x_vec4(i + 384u, 0u, tok0);
    }

    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    for (var u = 0u; u < n_units; u = u + 1u) {
        let uu = u % KQ_UNITS;
        workgroupBarrier();
        if (lid < CM) {
            var w: KqUnit; // zero for rows past the chunk
            if (decodes) {
                w = kq_decode(raw, uu);
                let next = u + 1u;
                if (next < n_units) {
                    raw = kq_load(wrow + next / KQ_UNITS, next % KQ_UNITS);
                }
            }
            stage_w16(lid * SW, w.lo);
            stage_w16(lid * SW + 16u, w.hi);
        } else {
            let i = lid - CM;
            stage_x4(i, xv0);
            stage_x4(i + 128u, xv1);
            stage_x4(i + 256u, xv2);
            stage_x4(i + 384u, xv3);
            let next = u + 1u;
            if (next < n_units) {
                xv0 = x_vec4(i, next, tok0);
                xv1 = x_vec4(i + 128u, next, tok0);
                xv2 = x_vec4(i + 256u, next, tok0);
                xv3 = x_vec4(i + 384u, next, tok0);
            }
        }
        workgroupBarrier();
        for (var k = 0u; k < 32u; k = k + 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&ws[rb * SW + k], SW);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&ws[(rb + 16u) * SW + k], SW);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&xs[tb * SW + k], SW);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&xs[(tb + 16u) * SW + k], SW);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
    }

    write_block(c00, sg, lane, lanes, row0 + rb, tok0 + tb);
    write_block(c01, sg, lane, lanes, row0 + rb, tok0 + tb + 16u);
    write_block(c10, sg, lane, lanes, row0 + rb + 16u, tok0 + tb);
    write_block(c11, sg, lane, lanes, row0 + rb + 16u, tok0 + tb + 16u);
}

// Y = X W^T for several tokens (prefill) on cooperative matrices: 16x16x16 products of f16
// inputs accumulated in f32 (wgpu_cooperative_matrix; tensor cores on NVIDIA). Both operands
// arrive as f16 tiles (f16_tiles.wgsl): the weights from dequant_f16_*.wgsl, the inputs from
// scale_f16.wgsl (each token scaled by a power of two, whose inverse `inv` scales the sums
// back exactly). The host picks this kernel only where the device offers that configuration,
// with 32-wide subgroups.
//
// A workgroup of 128 invocations (4 subgroups) computes a tile of CM = 128 weight rows by
// CN = 128 tokens over one slice of the columns (`split` slices, for products too small to
// fill the GPU otherwise): subgroup s accumulates a 64-row by 64-token block (rows
// 64 (s % 2) .., tokens 64 (s / 2) ..) as sixteen 16x16 f32 matrices, loading each step's four
// weight tiles and four input tiles straight from the buffers (512 contiguous bytes each; two
// steps ahead of the products: the step after next is loaded before this step's products), so
// each load feeds four products. There is no workgroup memory staging and no barrier until
// the end, where each block goes through workgroup memory to y (or, split, to its slice of
// `part`, which matmul_f16_sum.wgsl adds up), so rows and tokens past the ends are never
// written. Tiles past the last row or token read whatever the scratch holds there: each
// output depends only on its own row and token, and those are not written.
//
// Bindings:
//   0  uniform MatmulParams (rows: the rows of `w` to multiply; row_offset: their first
//      output row; split: the column slices)
//   1  xh: (n_tokens rounded up to CN, cols) f16 in tiles
//   2  y: (n_tokens, y_stride) f32
//   3  w: (rows rounded up to CM, cols) f16 in tiles
//   4  inv: (n_tokens) f32
//   5  part: (split, n_tokens, rows) f32, where split > 1

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> xh: array<f16>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<f16>;
@group(0) @binding(4) var<storage, read> inv: array<f32>;
@group(0) @binding(5) var<storage, read_write> part: array<f32>;

// 1: the product is added to what y holds (Kernel::MatmulF16(true): a residual add in the
// product's dispatch, the Add kernel's one f32 sum; with column slices, SplitSum adds), 0: it
// replaces it.
override ACCUMULATE: u32 = 0u;

// Rows and tokens per workgroup. Mirrored by F16_ROWS and F16_TOKENS in src/gpu/matmul.rs.
const CM: u32 = 128u;
const CN: u32 = 128u;

// One 16x16 f32 block per subgroup on its way out (column-major: row i, token j at i + 16 j).
var<workgroup> cs: array<f32, 1024>;

// Block c (rows r0 .., tokens t0 ..) of subgroup sg to y, or to its slice of `part`.
fn write_block(c: coop_mat16x16<f32, C>, sg: u32, lane: u32, lanes: u32, r0: u32, t0: u32,
               slice: u32) {
    coopStore(c, &cs[256u * sg], 16u);
    workgroupBarrier();
    for (var e = lane; e < 256u; e = e + lanes) {
        let row = r0 + e % 16u;
        let t = t0 + e / 16u;
        if (row < p.rows && t < p.n_tokens) {
            let v = cs[256u * sg + e] * inv[t];
            if (p.split > 1u) {
                part[(slice * p.n_tokens + t) * p.rows + row] = v;
            } else {
                let at = t * p.y_stride + p.row_offset + row;
                if (ACCUMULATE == 1u) {
                    y[at] = y[at] + v;
                } else {
                    y[at] = v;
                }
            }
        }
    }
    workgroupBarrier();
}

// One step's operands of a subgroup: its four weight tiles (rows 16 i ..) and four input tiles
// (tokens 16 j ..).
struct Tiles {
    a0: coop_mat16x16<f16, A>,
    a1: coop_mat16x16<f16, A>,
    a2: coop_mat16x16<f16, A>,
    a3: coop_mat16x16<f16, A>,
    b0: coop_mat16x16<f16, B>,
    b1: coop_mat16x16<f16, B>,
    b2: coop_mat16x16<f16, B>,
    b3: coop_mat16x16<f16, B>,
}

// The tiles at offset o (halves) from the block's first weight tile wa and input tile xa, the
// next row or token block `next` further.
fn load_tiles(wa: u32, xa: u32, next: u32, o: u32) -> Tiles {
    return Tiles(
        coopLoadT<coop_mat16x16<f16, A>>(&w[wa + o], 16u),
        coopLoadT<coop_mat16x16<f16, A>>(&w[wa + next + o], 16u),
        coopLoadT<coop_mat16x16<f16, A>>(&w[wa + 2u * next + o], 16u),
        coopLoadT<coop_mat16x16<f16, A>>(&w[wa + 3u * next + o], 16u),
        coopLoad<coop_mat16x16<f16, B>>(&xh[xa + o], 16u),
        coopLoad<coop_mat16x16<f16, B>>(&xh[xa + next + o], 16u),
        coopLoad<coop_mat16x16<f16, B>>(&xh[xa + 2u * next + o], 16u),
        coopLoad<coop_mat16x16<f16, B>>(&xh[xa + 3u * next + o], 16u),
    );
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) lanes: u32,
) {
    // Divisors at least 1 (the pipeline is compiled without division guards: max(.., 1u)
    // marks each as checked, tests/gpu_uniforms.rs); the host never passes 0 of any.
    let token_tiles = max((p.n_tokens + CN - 1u) / CN, 1u);
    let row_tiles = max((p.rows + CM - 1u) / CM, 1u);
    // Workgroups run token tile first, then row tile, then slice, so the token tiles of one
    // row tile run together and its weights come from memory about once. A folded grid has
    // a few workgroups past the end: they repeat the last slice's last tile (cooperative
    // operations need uniform control flow, so no early return) and write the same values.
    let tile = min(flat_workgroup(wid, nwg), token_tiles * row_tiles * p.split - 1u);
    let tok0 = (tile % token_tiles) * CN;
    let row0 = ((tile / token_tiles) % row_tiles) * CM;
    let slice = (tile / token_tiles) / row_tiles;
    let kb = p.cols / 16u;
    let steps = kb / max(p.split, 1u);
    let wrap = max(steps, 1u);
    // The subgroup's block: rows rb .., tokens tb ..; its first weight tile and input tile of
    // the slice (offsets in halves), the next row or token block one tile row further.
    let rb = row0 + 64u * (sg % 2u);
    let tb = tok0 + 64u * (sg / 2u);
    let next = kb * 256u;
    let wa = ((rb / 16u) * kb + slice * steps) * 256u;
    let xa = ((tb / 16u) * kb + slice * steps) * 256u;
    // This step's tiles and the next one's (with one step, the first again, unused).
    var t = load_tiles(wa, xa, next, 0u);
    var t1 = load_tiles(wa, xa, next, 256u * (1u % wrap));
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>();
    var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>();
    var c13 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c22 = coop_mat16x16<f32, C>();
    var c23 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();
    var c32 = coop_mat16x16<f32, C>();
    var c33 = coop_mat16x16<f32, C>();
    for (var s = 1u; s <= steps; s = s + 1u) {
        // The tiles of the step after next (the last two steps load the slice's first ones
        // again, unused).
        let t2 = load_tiles(wa, xa, next, 256u * ((s + 1u) % wrap));
        c00 = coopMultiplyAdd(t.a0, t.b0, c00);
        c01 = coopMultiplyAdd(t.a0, t.b1, c01);
        c02 = coopMultiplyAdd(t.a0, t.b2, c02);
        c03 = coopMultiplyAdd(t.a0, t.b3, c03);
        c10 = coopMultiplyAdd(t.a1, t.b0, c10);
        c11 = coopMultiplyAdd(t.a1, t.b1, c11);
        c12 = coopMultiplyAdd(t.a1, t.b2, c12);
        c13 = coopMultiplyAdd(t.a1, t.b3, c13);
        c20 = coopMultiplyAdd(t.a2, t.b0, c20);
        c21 = coopMultiplyAdd(t.a2, t.b1, c21);
        c22 = coopMultiplyAdd(t.a2, t.b2, c22);
        c23 = coopMultiplyAdd(t.a2, t.b3, c23);
        c30 = coopMultiplyAdd(t.a3, t.b0, c30);
        c31 = coopMultiplyAdd(t.a3, t.b1, c31);
        c32 = coopMultiplyAdd(t.a3, t.b2, c32);
        c33 = coopMultiplyAdd(t.a3, t.b3, c33);
        t = t1;
        t1 = t2;
    }
    write_block(c00, sg, lane, lanes, rb + 0u, tb + 0u, slice);
    write_block(c01, sg, lane, lanes, rb + 0u, tb + 16u, slice);
    write_block(c02, sg, lane, lanes, rb + 0u, tb + 32u, slice);
    write_block(c03, sg, lane, lanes, rb + 0u, tb + 48u, slice);
    write_block(c10, sg, lane, lanes, rb + 16u, tb + 0u, slice);
    write_block(c11, sg, lane, lanes, rb + 16u, tb + 16u, slice);
    write_block(c12, sg, lane, lanes, rb + 16u, tb + 32u, slice);
    write_block(c13, sg, lane, lanes, rb + 16u, tb + 48u, slice);
    write_block(c20, sg, lane, lanes, rb + 32u, tb + 0u, slice);
    write_block(c21, sg, lane, lanes, rb + 32u, tb + 16u, slice);
    write_block(c22, sg, lane, lanes, rb + 32u, tb + 32u, slice);
    write_block(c23, sg, lane, lanes, rb + 32u, tb + 48u, slice);
    write_block(c30, sg, lane, lanes, rb + 48u, tb + 0u, slice);
    write_block(c31, sg, lane, lanes, rb + 48u, tb + 16u, slice);
    write_block(c32, sg, lane, lanes, rb + 48u, tb + 32u, slice);
    write_block(c33, sg, lane, lanes, rb + 48u, tb + 48u, slice);
}

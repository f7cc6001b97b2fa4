// Y = X W^T for several tokens (prefill), W in a legacy format (the format's decode_block is
// prepended from quant/legacy_<format>.wgsl).
//
// Algorithm: a workgroup computes a tile of TILE_ROWS rows x (WG / 4) tokens. For each block
// of 32 columns it decodes the tile's weights once into workgroup memory (so every weight
// load serves all the tile's tokens; neighbouring invocations decode neighbouring rows, which
// the interleaved planes make coalesced) and stages the tokens' x alongside; then each
// invocation accumulates a 4-row x 4-token block of outputs (8 workgroup-memory reads per 16
// multiply-adds). Workgroups are numbered row tile first: tile = token_tile * row_tiles +
// row_tile. WG must be 64 or 128 (at least TILE_ROWS; the x tile holds at most 32 tokens).
//
// Bindings:
//   0  uniform MatmulParams
//   1  x: (n_tokens, x_stride) f32
//   2  y: (n_tokens, y_stride) f32; y[t * y_stride + row_offset + row] written for this chunk
//   3.. the weight planes of this chunk's rows (see the format file)

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// Rows per tile, mirrored by MATMUL_TILE_ROWS in src/gpu/kernels/legacy.rs.
const TILE_ROWS: u32 = 64u;
// Row pitch of the staged tiles: one block (32 columns) plus one, which keeps the column
// reads of neighbouring rows in different banks.
const PITCH: u32 = 33u;

var<workgroup> w_tile: array<f32, 2112>; // (TILE_ROWS, PITCH) decoded weights
var<workgroup> x_tile: array<f32, 1056>; // (WG / 4 <= 32, PITCH) x of the tile's tokens

fn stage4(at: u32, v: vec4<f32>) {
    w_tile[at] = v.x;
    w_tile[at + 1u] = v.y;
    w_tile[at + 2u] = v.z;
    w_tile[at + 3u] = v.w;
}

// Block b of tile row r (0 for invocations past the tile or rows past the chunk).
fn load_w(row0: u32, r: u32, b: u32) -> array<vec4<f32>, 8> {
    var w: array<vec4<f32>, 8>;
    if (r < TILE_ROWS && row0 + r < p.rows) {
        w = decode_block(row0 + r, b, p.cols, p.rows);
    }
    return w;
}

// x of tile element lid + j WG (j < 8; token e / 32, column 32 b + e % 32), 0 past the
// tokens or columns.
fn x_at(tok0: u32, e: u32, b: u32) -> f32 {
    let t = tok0 + e / 32u;
    let c = 32u * b + e % 32u;
    if (t < p.n_tokens && c < p.cols) {
        return x[t * p.x_stride + c];
    }
    return 0.0;
}

fn load_x(tok0: u32, lid: u32, b: u32) -> array<f32, 8> {
    return array<f32, 8>(
        x_at(tok0, lid, b), x_at(tok0, lid + WG, b),
        x_at(tok0, lid + 2u * WG, b), x_at(tok0, lid + 3u * WG, b),
        x_at(tok0, lid + 4u * WG, b), x_at(tok0, lid + 5u * WG, b),
        x_at(tok0, lid + 6u * WG, b), x_at(tok0, lid + 7u * WG, b));
}

fn stage1(e: u32, v: f32) {
    x_tile[(e / 32u) * PITCH + e % 32u] = v;
}

fn stage_x(lid: u32, v: array<f32, 8>) {
    stage1(lid, v[0]);
    stage1(lid + WG, v[1]);
    stage1(lid + 2u * WG, v[2]);
    stage1(lid + 3u * WG, v[3]);
    stage1(lid + 4u * WG, v[4]);
    stage1(lid + 5u * WG, v[5]);
    stage1(lid + 6u * WG, v[6]);
    stage1(lid + 7u * WG, v[7]);
}

// y for row `row` and tokens t, t + step, t + 2 step, t + 3 step.
fn store_y(row: u32, t: u32, step: u32, v: vec4<f32>) {
    if (row >= p.rows) {
        return;
    }
    let at = p.row_offset + row;
    if (t < p.n_tokens) { y[t * p.y_stride + at] = v.x; }
    if (t + step < p.n_tokens) { y[(t + step) * p.y_stride + at] = v.y; }
    if (t + 2u * step < p.n_tokens) { y[(t + 2u * step) * p.y_stride + at] = v.z; }
    if (t + 3u * step < p.n_tokens) { y[(t + 3u * step) * p.y_stride + at] = v.w; }
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let tile_tokens = WG / 4u;
    let row_tiles = max((p.rows + TILE_ROWS - 1u) / TILE_ROWS, 1u);
    let tile = flat_workgroup(wid, nwg);
    let row0 = (tile % row_tiles) * TILE_ROWS;
    let tok0 = (tile / row_tiles) * tile_tokens;
    if (tok0 >= p.n_tokens) {
        return;
    }
    // This invocation's outputs: rows tr + 16 i, tokens tc + ts j (i, j < 4).
    let tr = lid % 16u;
    let tc = lid / 16u;
    let ts = WG / 16u;
    let blocks = (p.cols + 31u) / 32u;
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    // Block b + 1 is loaded into registers while block b is multiplied out of workgroup
    // memory: invocations below TILE_ROWS decode row `lid` of the tile, and every invocation
    // stages 8 values of x (the tile's tile_tokens * 32 = 8 WG values).
    var w_next = load_w(row0, lid, 0u);
    var x_next = load_x(tok0, lid, 0u);
    for (var b = 0u; b < blocks; b = b + 1u) {
        if (lid < TILE_ROWS) {
            let at = lid * PITCH;
            stage4(at, w_next[0]);
            stage4(at + 4u, w_next[1]);
            stage4(at + 8u, w_next[2]);
            stage4(at + 12u, w_next[3]);
            stage4(at + 16u, w_next[4]);
            stage4(at + 20u, w_next[5]);
            stage4(at + 24u, w_next[6]);
            stage4(at + 28u, w_next[7]);
        }
        stage_x(lid, x_next);
        workgroupBarrier();
        if (b + 1u < blocks) {
            w_next = load_w(row0, lid, b + 1u);
            x_next = load_x(tok0, lid, b + 1u);
        }
        for (var k = 0u; k < 32u; k = k + 1u) {
            let xv = vec4<f32>(x_tile[tc * PITCH + k], x_tile[(tc + ts) * PITCH + k],
                               x_tile[(tc + 2u * ts) * PITCH + k], x_tile[(tc + 3u * ts) * PITCH + k]);
            acc0 = fma(vec4<f32>(w_tile[tr * PITCH + k]), xv, acc0);
            acc1 = fma(vec4<f32>(w_tile[(tr + 16u) * PITCH + k]), xv, acc1);
            acc2 = fma(vec4<f32>(w_tile[(tr + 32u) * PITCH + k]), xv, acc2);
            acc3 = fma(vec4<f32>(w_tile[(tr + 48u) * PITCH + k]), xv, acc3);
        }
        workgroupBarrier();
    }

    store_y(row0 + tr, tok0 + tc, ts, acc0);
    store_y(row0 + tr + 16u, tok0 + tc, ts, acc1);
    store_y(row0 + tr + 32u, tok0 + tc, ts, acc2);
    store_y(row0 + tr + 48u, tok0 + tc, ts, acc3);
}

// Softmax over each row of softmax(x * scale) (scale = 1 / temperature).
//
// mode 0 (rows up to a few thousand): one workgroup per row, three sweeps: the row maximum
//        (workgroup_max), the sum of exp(x * scale - max) (workgroup_sum), the output.
// Long rows (a vocabulary) are cut into chunks, one workgroup each, dispatched
// (n_chunks, n_rows) twice:
// mode 1 writes each chunk's maximum m_c and sum s_c = sum exp(x * scale - m_c);
// mode 2 merges the row's chunks, M = max m_c and S = sum s_c exp(m_c - M), and writes its
//        chunk's exp(x * scale - M) / S.
//
// Bindings:
//   0  uniform SoftmaxParams
//   1  x: (n_rows, cols) f32
//   2  y: (n_rows, cols) f32
//   3  stats: (n_rows, n_chunks) vec2 (m_c, s_c), modes 1 and 2

struct SoftmaxParams {
    n_rows: u32,
    cols: u32,
    scale: f32,
    mode: u32,
    chunk: u32,    // columns per workgroup (modes 1, 2)
    n_chunks: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> p: SoftmaxParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> stats: array<vec2<f32>>;

// A finite "minus infinity": correct even where a compiler assumes no infinities.
const NEG_BIG: f32 = -3.0e38;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    var row = flat_workgroup(wid, nwg);
    var begin = 0u;
    var end = p.cols;
    if (p.mode != 0u) {
        row = wid.y;
        begin = wid.x * p.chunk;
        end = min(p.cols, begin + p.chunk);
    }
    if (row >= p.n_rows) {
        return;
    }
    let base = row * p.cols;
    var row_max: f32;
    var inv: f32;
    if (p.mode == 2u) {
        // Merge the row's chunk statistics.
        var m = NEG_BIG;
        for (var c = lid; c < p.n_chunks; c = c + WG) {
            m = max(m, stats[row * p.n_chunks + c].x);
        }
        row_max = workgroup_max(m, lid);
        var s = 0.0;
        for (var c = lid; c < p.n_chunks; c = c + WG) {
            let st = stats[row * p.n_chunks + c];
            s = s + st.y * exp(st.x - row_max);
        }
        inv = 1.0 / workgroup_sum(s, lid);
    } else {
        var m = NEG_BIG;
        for (var i = begin + lid; i < end; i = i + WG) {
            m = max(m, x[base + i] * p.scale);
        }
        row_max = workgroup_max(m, lid);
        var s = 0.0;
        for (var i = begin + lid; i < end; i = i + WG) {
            s = s + exp(x[base + i] * p.scale - row_max);
        }
        let total = workgroup_sum(s, lid);
        if (p.mode == 1u) {
            if (lid == 0u) {
                stats[row * p.n_chunks + wid.x] = vec2<f32>(row_max, total);
            }
            return;
        }
        inv = 1.0 / total;
    }
    for (var i = begin + lid; i < end; i = i + WG) {
        y[base + i] = exp(x[base + i] * p.scale - row_max) * inv;
    }
}

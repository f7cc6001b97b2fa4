// y = W x for one token, W in a ternary block format (TQ1_0 or TQ2_0: the format file before
// this one supplies TQ_WORDS, tq_word, tq_scale, tq_word_dot and the weight bindings 3..),
// x in f32, y times the per-tensor weight_scale (1 unless the model gives one, as upstream
// BitNet GGUFs do in a separate tensor). TPR threads per row, WG / TPR rows per workgroup:
// the threads of a row take consecutive u32 words of it, so that both the weight loads and the
// activation loads of neighbouring threads are neighbours (with a 16-byte unit per thread, one
// activation load of a warp touched up to 16 cache lines). The row's TPR partial sums are then
// added in workgroup memory.
//
// Bindings:
//   0  uniform MatmulParams
//   1  x: (n_tokens, x_stride / 4) vec4<f32>; token 0 is used
//   2  y: (n_tokens, y_stride) f32, rows row_offset .. row_offset + rows written
//   3..  the chunk's weight planes (see the format file)

// Threads per row (src/gpu/kernels/ternary.rs mirrors it to size the dispatch); divides WG.
override TPR: u32 = 32u;

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

var<workgroup> row_partial: array<f32, 256>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = flat_workgroup(wid, nwg) * (WG / TPR) + lid / TPR;
    let lane = lid % TPR;
    let blocks = p.cols / 256u;
    let words = blocks * TQ_WORDS;
    var acc = 0.0;
    if (row < p.rows) {
        for (var v = lane; v < words; v = v + TPR) {
            let b = v / TQ_WORDS;
            let j = v % TQ_WORDS;
            let block = row * blocks + b;
            acc = acc + tq_scale(block) * tq_word_dot(tq_word(block, j), j, b * 64u);
        }
    }
    row_partial[lid] = acc;
    workgroupBarrier();
    if (lane == 0u && row < p.rows) {
        var total = 0.0;
        for (var i = 0u; i < TPR; i = i + 1u) {
            total = total + row_partial[lid + i];
        }
        y[p.row_offset + row] = total * p.weight_scale;
    }
}

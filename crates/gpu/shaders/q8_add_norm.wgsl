// The residual add and the next RMSNorm's record in the product's dispatch
// (Kernel::MatvecQ8AddNorm, after its family's integer-dot skeleton): a workgroup owns one
// block of 32 output rows, adds its products to the residual y (ACCUMULATE's one f32 add) and
// writes, for the products that read the norm of y next, the norm record block
// (q8_quarter.wgsl) of y times the norm's weight: the q8 values and scale of the block with
// q8_quarter.wgsl's arithmetic (so they are quantize_q8 of those f32 products, bit for bit)
// and the block's sum of squares of y. No workgroup waits for another: the RMS, one number
// for the whole row, is left to the kernel that reads those products' outputs (Llama's gated
// FFN: main_silu_norm in quantize_q8.wgsl, whose few workgroups each sum the blocks' sums).
//
// Bindings (besides the product's; the product's rows are the norm's, a multiple of 32, in
// one chunk):
//   13  norm_w: (rows) f32 as vec4, the norm's weight
//   14  norm_out: (the norm record of rows values) u32: values, scales and sums written, the
//       eps word the host's

@group(0) @binding(13) var<storage, read> norm_w: array<vec4<f32>>;
@group(0) @binding(14) var<storage, read_write> norm_out: array<u32>;

// The four quarters' sums of squares.
var<workgroup> norm_sq: array<f32, 4>;

// Block `block` (rows 32 block .. 32 block + 31) of the product, whose sums invocation k < 4
// holds for rows 32 block + 8k .. + 7 in t0 (the first four) and t1; the other invocations'
// t0, t1 are not read. Call from every invocation of the workgroup (a barrier).
fn add_norm_block(block: u32, lid: u32, t0: vec4<f32>, t1: vec4<f32>) {
    let live = lid < 4u;
    let r = 32u * block + 8u * min(lid, 3u);
    var v0 = vec4<f32>(0.0);
    var v1 = vec4<f32>(0.0);
    if (live) {
        let x0 = vec4<f32>(y[r], y[r + 1u], y[r + 2u], y[r + 3u]) + t0;
        let x1 = vec4<f32>(y[r + 4u], y[r + 5u], y[r + 6u], y[r + 7u]) + t1;
        y[r] = x0.x;
        y[r + 1u] = x0.y;
        y[r + 2u] = x0.z;
        y[r + 3u] = x0.w;
        y[r + 4u] = x1.x;
        y[r + 5u] = x1.y;
        y[r + 6u] = x1.z;
        y[r + 7u] = x1.w;
        v0 = x0 * norm_w[r / 4u];
        v1 = x1 * norm_w[r / 4u + 1u];
        norm_sq[lid] = dot(x0, x0) + dot(x1, x1);
    }
    // Also the barrier after which norm_sq holds every quarter's sum.
    let s = q8_quarter_scale(lid, v0, v1);
    if (live) {
        let q = 4u * block + lid;
        norm_out[2u * q] = q8_pack4(v0, s);
        norm_out[2u * q + 1u] = q8_pack4(v1, s);
        if (lid == 0u) {
            norm_out[p.rows / 4u + block] = q8_scale_word(s);
            let ss = (norm_sq[0] + norm_sq[1]) + (norm_sq[2] + norm_sq[3]);
            norm_out[4u * q8_norm_base(p.rows) + block] = bitcast<u32>(ss);
        }
    }
}

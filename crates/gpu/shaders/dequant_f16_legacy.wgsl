// Weights in a legacy block format (its decode helpers are prepended) to f16 tiles
// (f16_tiles.wgsl), the weight operand of the cooperative-matrix matmul (matmul_f16_coop.wgsl):
// one invocation per 32-weight block, decoded with decode_block (the f32 weights of
// crate::quant) and rounded to f16 once. Its two 16-weight halves are rows of two tiles: four
// 16-byte stores. Invocations run row first within groups of 16 rows (see
// dequant_f16_kquants.wgsl), which also reads the planes' 32-row interleave in order.
//
// Bindings:
//   0  uniform MatmulParams: rows to convert, cols (a multiple of 32), row_offset: the
//      chunk's first row to convert (the output's row 0), y_stride: the chunk's rows (the
//      planes interleave rows by groups of 32 of the chunk); invocations for rows rounded
//      up to 16
//   1  out: (rows, cols) f16 in tiles, 8 halves a vec4<u32>
//   3.. the chunk's planes, declared by the format file

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read_write> out: array<vec4<u32>>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    // Divisors at least 1 (the pipeline is compiled without division guards: max(.., 1u)
    // marks each as checked, tests/gpu_uniforms.rs); the host never passes 0 columns.
    let blocks = max(p.cols / 32u, 1u);
    let i = flat_workgroup(wid, nwg) * WG + lid;
    let r = ((i / 16u) / blocks) * 16u + i % 16u;
    if (r >= p.rows) {
        return;
    }
    let b = (i / 16u) % blocks;
    let v = decode_block(p.row_offset + r, b, p.cols, p.y_stride);
    let a = f16_tile(r, 32u * b, p.cols) / 8u;
    let c = f16_tile(r, 32u * b + 16u, p.cols) / 8u;
    out[a] = halves8(v[0], v[1]);
    out[a + 1u] = halves8(v[2], v[3]);
    out[c] = halves8(v[4], v[5]);
    out[c + 1u] = halves8(v[6], v[7]);
}

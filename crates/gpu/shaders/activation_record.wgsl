// Writing one token's int8 activation record (layout: quant/i2s.wgsl), shared by
// quantize_activations.wgsl and rms_norm_quantize.wgsl, which both declare `x` (the f32 values as
// `array<vec4<f32>>`) and `out` (the records as `array<u32>`).

// Quantize the `words` vec4 of `x` at `xbase` with scale `s` into the record whose values start
// at word `obase` of `out` (`padded` value words, the tail zeroed), then its header: s, the
// sum of the int8 values, two zero words. Call from uniform control flow with every invocation
// of the workgroup.
fn write_record(xbase: u32, words: u32, obase: u32, padded: u32, s: f32, lid: u32) {
    var sum = 0i;
    for (var i = lid; i < padded; i = i + WG) {
        var word = 0u;
        if (i < words) {
            let q = quantize4(x[xbase + i], s);
            sum = sum + q.x + q.y + q.z + q.w;
            word = pack4xI8(q);
        }
        out[obase + i] = word;
    }
    // Integer partial sums are exact in f32 while |sum| <= 128 * cols <= 2^24
    // (cols <= 131072, checked on the host), in any reduction order.
    let total = workgroup_sum(f32(sum), lid);
    if (lid == 0u) {
        out[obase - 4u] = bitcast<u32>(s);
        out[obase - 3u] = bitcast<u32>(i32(total));
        out[obase - 2u] = 0u;
        out[obase - 1u] = 0u;
    }
}

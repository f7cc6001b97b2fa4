// scale_for_absmax: the quantizers' shared iscale = 127 / amax, bit-equal to the CPU's f32
// division (BitLinear's activation_quant.wgsl, the q8 records of q8_quarter.wgsl).

// 127 / m, correctly rounded to nearest even, for a finite m >= 1e-5 (so the quotient is a
// normal number); 0 for m = infinity. WGSL allows 2.5 ulp for `/` and the scale must match the
// CPU's f32 division bit for bit, hence exact integer long division: 127 = N * 2^-17 with
// N = 127 << 17, m = M * 2^(e - 150); the 24-bit quotient mantissa plus a round bit come from
// 25 steps of restoring division and the remainder is the sticky bit.
fn scale_for_absmax(m: f32) -> f32 {
    let bits = bitcast<u32>(m);
    let e = (bits >> 23u) & 0xffu;
    if (e == 0xffu) {
        return 0.0;
    }
    let mant = (bits & 0x7fffffu) | 0x800000u;
    var num = 127u << 17u;
    var exp = 133i - i32(e); // unbiased exponent of the quotient when num >= mant
    if (num < mant) {
        num = num << 1u;
        exp = exp - 1i;
    }
    var q = 0u;
    var r = num;
    for (var i = 0u; i < 25u; i = i + 1u) {
        q = q << 1u;
        if (r >= mant) {
            r = r - mant;
            q = q | 1u;
        }
        r = r << 1u;
    }
    // q in [2^24, 2^25): 24 mantissa bits and the round bit.
    var mq = q >> 1u;
    let round_bit = (q & 1u) == 1u;
    if (round_bit && (r != 0u || (mq & 1u) == 1u)) {
        mq = mq + 1u;
        if (mq == 0x1000000u) {
            mq = mq >> 1u;
            exp = exp + 1i;
        }
    }
    return bitcast<f32>((u32(exp + 127i) << 23u) | (mq & 0x7fffffu));
}

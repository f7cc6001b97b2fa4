// scale_for_absmax: the quantizers' shared iscale = 127 / amax, bit-equal to the CPU's f32
// division (BitLinear's activation_quant.wgsl, the q8 records of q8_quarter.wgsl).

// 127 / m, correctly rounded to nearest even, for a finite m >= 1e-5 (so the quotient is a
// normal number); 0 for m = infinity. WGSL allows 2.5 ulp for `/` and the scale must match the
// CPU's f32 division bit for bit, hence exact integer long division: 127 = N * 2^-17 with
// N = 127 << 17, m = M * 2^(e - 150); the 24-bit quotient mantissa plus a round bit come from
// a first bit and three base-256 digits of u32 division, and the remainder is the sticky bit.
// (It sits on the critical path of every q8 record a decode writes, hence a first bit and
// three digits rather than 25 steps of restoring division. tests/absmax_scale.rs compares it
// with the CPU's division for every mantissa.)
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
    // num is in [mant, 2 mant): the first quotient bit is 1, then 24 more in three base-256
    // digits, each from an exact u32 division (r < mant < 2^24, so r << 8 fits).
    var q = 1u;
    var r = num - mant;
    for (var i = 0u; i < 3u; i = i + 1u) {
        let t = r << 8u;
        let d = t / max(mant, 1u);
        r = t - d * mant;
        q = (q << 8u) | d;
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

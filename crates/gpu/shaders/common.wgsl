// Helpers prepended to every kernel.

// Workgroup size: a pipeline-overridable constant, set from the pipeline key.
override WG: u32 = 64u;

// Flat index of this workgroup when a large dispatch is folded into two dimensions.
fn flat_workgroup(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// The f16 stored in the low (hi = false) or high half of a 32-bit word, as f32.
fn half_to_f32(word: u32, hi: bool) -> f32 {
    let v = unpack2x16float(word);
    return select(v.x, v.y, hi);
}

// Sign-extend the low 8 bits of `v`.
fn sext8(v: u32) -> i32 {
    return (i32(v << 24u)) >> 24u;
}

// What argmax and top-k share: parameters, bindings and the selection order.
//
// Both reduce a row in levels: level 0 reads logits, each workgroup keeps the best k of its
// `chunk` candidates as (index, value) pairs; each later level reads those pairs and keeps
// the best k again, until one workgroup per row remains.
//
// Order: larger values first, equal values by lower index, NaN after every number (so NaN
// never wins), padding (NaN, NO_INDEX) last of all.
//
// Bindings:
//   0  uniform SelectParams
//   1  logits: (n_rows, n_in) f32, read at level 0
//   2  dst: (n_rows, workgroups per row, k) pairs (index u32, value f32 bits), or for the
//      last level of argmax (n_rows) u32 indices
//   3  src: (n_rows, n_in) pairs (index u32, value f32 bits), read at levels > 0

struct SelectParams {
    n_rows: u32,
    n_in: u32,  // candidates per row at this level
    chunk: u32, // candidates per workgroup
    k: u32,     // candidates kept per workgroup
    level: u32,
    last: u32,  // argmax: 1 writes the bare index of the row's winner (NO_INDEX if none)
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> p: SelectParams;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<storage, read> src: array<u32>;

const NO_INDEX: u32 = 0xffffffffu;
const NAN_BITS: u32 = 0x7fc00000u;

struct Candidate {
    v: f32,
    i: u32,
}

// Bit test, so it holds even where a compiler assumes there are no NaNs.
fn is_nan_f32(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

// Whether (av, ai) goes before (bv, bi).
fn before(av: f32, ai: u32, bv: f32, bi: u32) -> bool {
    let an = is_nan_f32(av);
    let bn = is_nan_f32(bv);
    if (an != bn) {
        return bn;
    }
    if (!an && av != bv) {
        return av > bv;
    }
    return ai < bi;
}

fn padding() -> Candidate {
    // A runtime value: Tint refuses a NaN produced by a constant expression.
    let bits = NAN_BITS;
    return Candidate(bitcast<f32>(bits), NO_INDEX);
}

// Candidate `i` of `row` at this level.
fn candidate(row: u32, i: u32) -> Candidate {
    if (i >= p.n_in) {
        return padding();
    }
    let at = row * p.n_in + i;
    if (p.level == 0u) {
        return Candidate(logits[at], i);
    }
    return Candidate(bitcast<f32>(src[2u * at + 1u]), src[2u * at]);
}

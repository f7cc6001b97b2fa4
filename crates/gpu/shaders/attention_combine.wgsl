// attention.wgsl's combine of the pieces (mode 2 of its entry point `main`), the one-token
// decode entry point that combines in the attend dispatch (main_decode), and the output
// helpers they share with the attend (head_value, store4). Assembled after attention.wgsl,
// whose bindings, workgroup arrays and helpers these use.

fn combine(wid: vec3<u32>, lid: u32) {
    let c = combine_head(wid.x, wid.y, lid);
    if (c.holds) {
        src3[c.at] = c.w0;
        src3[c.at + 1u] = c.w1;
        if (c.scale_at != NO_SCALE) {
            src3[c.scale_at] = c.scale;
        }
    }
}

const NO_SCALE: u32 = 0xffffffffu;

// What an invocation of the combine writes into the q8 records (quantize == 1): words w0 and
// w1 at `at` and `at + 1`, and the block's scale word at scale_at (NO_SCALE: none), where
// `holds`.
struct RecordWords {
    holds: bool,
    at: u32,
    w0: u32,
    w1: u32,
    scale_at: u32,
    scale: u32,
}

// The combine of (head, token): the head's output into `out`, and (quantize == 1) the words
// of its q8 records, which the caller writes (the entry points hold the records at different
// bindings).
fn combine_head(head: u32, token: u32, lid: u32) -> RecordWords {
    let d4 = max(p.head_dim / 4u, 1u); // a divisor: at least 1 (tests/gpu_uniforms.rs)
    let first = (token * p.n_heads + head) * p.n_splits; // this row's first piece
    // Only the pieces that hold keys were written (attend skips the rest).
    let n = pieces_with_keys(token);
    // Thread (group, i) sums pieces group, group + groups, ... of dimensions 4i .. 4i + 3:
    // its first piece's sums are loaded with the pieces' (m, l), in one round of loads.
    let groups = max(WG / d4, 1u);
    let group = lid / d4;
    let i = lid % d4;
    let own = group < groups && group < n;
    var o = vec4<f32>(0.0);
    if (own) {
        o = partials[(first + group) * d4 + i];
    }
    // Each piece's max score (a piece with l = 0 takes no part) and l.
    for (var s = lid; s < n; s = s + WG) {
        let ml = partials[ml_base() + first + s];
        scores[s] = select(NEG_BIG, ml.x, ml.y > 0.0);
        weights[s] = ml.y;
    }
    workgroupBarrier();
    var mx = NEG_BIG;
    for (var s = 0u; s < n; s = s + 1u) {
        mx = max(mx, scores[s]);
    }
    // l = sum_s l_s e^(m_s - M), each invocation for itself.
    var l = 0.0;
    for (var s = 0u; s < n; s = s + 1u) {
        l = l + weights[s] * piece_weight(s, mx);
    }
    if (own) {
        o = o * piece_weight(group, mx);
        for (var s = group + groups; s < n; s = s + groups) {
            o = o + partials[(first + s) * d4 + i] * piece_weight(s, mx);
        }
    }
    if (group < groups) {
        lane_acc[group * d4 + i] = o;
    }
    workgroupBarrier();
    // Only the groups that took a piece hold sums.
    return head_output(head, token, min(groups, n), l, lid);
}

// The output of (head, token) from the `count` rows of sums in lane_acc over the softmax
// denominator l, into `out`, and (quantize == 1) the words of its q8 records (returned for the
// caller to write). Every invocation calls it (the records' block maxima take a barrier).
fn head_output(head: u32, token: u32, count: u32, l: f32, lid: u32) -> RecordWords {
    var words = RecordWords(false, 0u, 0u, 0u, NO_SCALE, 0u);
    let d4 = p.head_dim / 4u;
    let base = (token * p.n_heads + head) * p.head_dim;
    if (p.quantize == 0u) {
        for (var j = lid; j < d4; j = j + WG) {
            store4(base + 4u * j, head_value(j, count, l));
        }
        return words;
    }
    // Invocation i < head_dim / 8 holds values 8i .. 8i + 7 of the head, a quarter of a
    // block of 32 (head_dim is a multiple of 32, so the head's blocks are whole and four
    // consecutive invocations hold one); every invocation takes part in the block maxima.
    let holds = lid < d4 / 2u;
    var v0 = vec4<f32>(0.0);
    var v1 = vec4<f32>(0.0);
    if (holds) {
        v0 = head_value(2u * lid, count, l);
        v1 = head_value(2u * lid + 1u, count, l);
        store4(base + 8u * lid, v0);
        store4(base + 8u * lid + 4u, v1);
    }
    let s = q8_quarter_scale(lid, v0, v1);
    if (holds) {
        let cols = p.n_heads * p.head_dim;
        let rec = token * (cols / 4u + 4u * ((cols + 127u) / 128u));
        let e = head * p.head_dim + 8u * lid; // first value, in the token's row
        words = RecordWords(true, rec + e / 4u, q8_pack4(v0, s), q8_pack4(v1, s), NO_SCALE, 0u);
        if (lid % 4u == 0u) {
            words.scale_at = rec + cols / 4u + e / 32u;
            words.scale = q8_scale_word(s);
        }
    }
    return words;
}

// One-token decode with the combine in the attend dispatch (entry point main_decode,
// Kernel::AttentionDecode, natively; as main's fused attend otherwise): each workgroup that
// wrote a piece counts itself in `arrivals` (one counter per head and token) after a
// storageBarrier, which naga makes a device-scope acquire-release fence over storage memory,
// and `partials` is `@coherent` here (attention_partials_coherent.wgsl: no stale copy in a
// multiprocessor's cache); the last of a head's pieces to arrive (after another such fence)
// combines them, writes the
// output (and with quantize == 1 its q8 records, at binding 10), and sets the counter back to
// 0 for the next dispatch. The combine's own dispatch and its barrier go. A head whose keys
// fit one piece (the first min_split tokens of a context) skips all of that: its one
// workgroup writes the output itself.
//   10 records: the output's q8 records (quantize == 1; any buffer otherwise)
//   11 arrivals: (n_tokens, n_heads) u32, 0 between dispatches
@group(0) @binding(10) var<storage, read_write> records: array<u32>;
@group(0) @binding(11) var<storage, read_write> arrivals: array<atomic<u32>>;

var<workgroup> last_piece: u32;

@compute @workgroup_size(WG)
fn main_decode(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    // Uniform per workgroup: a piece past the keys returns before any barrier.
    var r: Attended;
    if (!attend(wid, lid, &r)) {
        return;
    }
    let head = wid.y;
    let token = wid.z;
    if (pieces_with_keys(token) == 1u) {
        // The head's only piece (a context of at most min_split keys) has nothing to wait for
        // or combine: its output and records come straight from its sums in lane_acc, the
        // same values as the combine of one piece, bit for bit (that piece's weight is
        // e^(m - m) = 1 and the lanes are added in the same order), without the piece's
        // round trip through `partials`, the fences and the counter.
        let c = head_output(head, token, r.lanes, r.l, lid);
        write_records(c);
        return;
    }
    write_attended(r, wid, lid);
    storageBarrier();
    if (lid == 0u) {
        let slot = token * p.n_heads + head;
        let before = atomicAdd(&arrivals[slot], 1u);
        var last = 0u;
        if (before + 1u == pieces_with_keys(token)) {
            atomicStore(&arrivals[slot], 0u);
            last = 1u;
        }
        last_piece = last;
    }
    if (workgroupUniformLoad(&last_piece) == 1u) {
        storageBarrier();
        write_records(combine_head(head, token, lid));
    }
}

// An invocation's words of the output's q8 records (binding 10).
fn write_records(c: RecordWords) {
    if (c.holds) {
        records[c.at] = c.w0;
        records[c.at + 1u] = c.w1;
        if (c.scale_at != NO_SCALE) {
            records[c.scale_at] = c.scale;
        }
    }
}

// The weight e^(m_s - M) of piece s (0 for a piece without keys), from the combine's scores
// (m_s) and weights (l_s).
fn piece_weight(s: u32, mx: f32) -> f32 {
    return select(0.0, exp(scores[s] - mx), weights[s] > 0.0);
}

// Output vec4 j of a head: the sum of `count` partial sums in lane_acc (stride head_dim / 4)
// over the softmax denominator l.
fn head_value(j: u32, count: u32, l: f32) -> vec4<f32> {
    let d4 = p.head_dim / 4u;
    var sum = vec4<f32>(0.0);
    for (var k = 0u; k < count; k = k + 1u) {
        sum = sum + lane_acc[k * d4 + j];
    }
    return sum / l;
}

fn store4(b: u32, r: vec4<f32>) {
    out[b] = r.x;
    out[b + 1u] = r.y;
    out[b + 2u] = r.z;
    out[b + 3u] = r.w;
}

// Top-k (k <= 64) of each row, as (index, value) pairs in descending order (ties: lower index;
// NaN after every number). One level of the reduction in select_common.wgsl: each workgroup
// loads SORT_N candidates into workgroup memory, bitonic-sorts them in the selection order
// (log2(N) (log2(N) + 1) / 2 compare-exchange stages, N/2 pairs each) and writes its first k.
// Every level shrinks a row by SORT_N / k >= 16. Dispatch (workgroups per row, n_rows).

const SORT_N: u32 = 1024u;

var<workgroup> sv: array<f32, 1024>;
var<workgroup> si: array<u32, 1024>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.y;
    let begin = wid.x * p.chunk;
    for (var j = lid; j < SORT_N; j = j + WG) {
        var c = padding();
        if (j < p.chunk) {
            c = candidate(row, begin + j);
        }
        sv[j] = c.v;
        si[j] = c.i;
    }
    workgroupBarrier();
    for (var size = 2u; size <= SORT_N; size = size << 1u) {
        for (var stride = size >> 1u; stride > 0u; stride = stride >> 1u) {
            for (var t = lid; t < SORT_N / 2u; t = t + WG) {
                let a = 2u * t - (t & (stride - 1u));
                let b = a + stride;
                // Blocks with (a & size) == 0 end up descending, the others ascending, so
                // each merge step sees a bitonic sequence; the final block is descending.
                let descending = (a & size) == 0u;
                if (before(sv[b], si[b], sv[a], si[a]) == descending) {
                    let v = sv[a];
                    let i = si[a];
                    sv[a] = sv[b];
                    si[a] = si[b];
                    sv[b] = v;
                    si[b] = i;
                }
            }
            workgroupBarrier();
        }
    }
    for (var r = lid; r < p.k; r = r + WG) {
        let o = 2u * ((row * nwg.x + wid.x) * p.k + r);
        dst[o] = si[r];
        dst[o + 1u] = bitcast<u32>(sv[r]);
    }
}

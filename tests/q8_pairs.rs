//! Two one-token integer-dot products of one input (q and k, gate and up) run in one
//! dispatch (`MatvecQ8Pair`): on a Llama-3.2-1B-shaped Q4_K/Q6_K model (`tritium synth
//! llama-1b-q4k --layers 1`) the decode tape holds the paired products, and every decode
//! step's logits are the same bits as with each product in its own dispatch (each row's
//! arithmetic is the single kernel's at the same workgroup size). The kernels themselves are
//! checked against the integer reference by the self-test (`q8/matvec_pair_*`).

#[allow(dead_code)]
mod decode_support;

use decode_support::{decode, gpu_backend, synth_llama};

/// The decode's logits and tape ops with pairing on or off.
fn decode_paired(bytes: &Vec<u8>, pair: bool) -> (Vec<Vec<f32>>, Vec<String>) {
    let mut b = gpu_backend();
    b.set_pair_q8(pair);
    let (out, m) = decode(bytes, b);
    (out, m.backend.tape_ops(1))
}

#[test]
fn paired_products_give_the_same_logits_in_fewer_dispatches() {
    let bytes = synth_llama(1);
    let (alone, ops_alone) = decode_paired(&bytes, false);
    let (paired, ops_paired) = decode_paired(&bytes, true);
    // q + k (Q4_K 2048 and 512 rows) and gate + up (Q4_K 8192 rows each) pair; v and
    // ffn_down (Q6_K) and the head stay alone.
    let pairs: Vec<&String> = ops_paired.iter().filter(|o| o.contains(" + ")).collect();
    assert_eq!(pairs.len(), 2, "{ops_paired:#?}");
    assert!(
        pairs[0].contains("Q4_K 2048x2048 + Q4_K 512x2048"),
        "{}",
        pairs[0]
    );
    assert!(
        pairs[1].contains("Q4_K 8192x2048 + Q4_K 8192x2048"),
        "{}",
        pairs[1]
    );
    assert_eq!(ops_paired.len() + 2, ops_alone.len(), "{ops_alone:#?}");
    for (step, (a, p)) in alone.iter().zip(&paired).enumerate() {
        assert_eq!(a.len(), p.len());
        if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != p[i].to_bits()) {
            panic!("step {step}: logit {i} is {} alone, {} paired", a[i], p[i]);
        }
    }
}

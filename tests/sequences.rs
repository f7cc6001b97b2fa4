//! Passes over several sequences: a batch is runs of (sequence, positions), and each sequence
//! has its own KV cache. On the CPU backend (the reference) one pass may carry several
//! sequences; the wgpu backend runs one sequence per pass (and says so for more), each against
//! its own cache. Either way a sequence's logits are those it has alone, whatever the other
//! sequences did in between: the same bits on the CPU (each row's arithmetic does not depend on
//! the other rows of the pass), and on the GPU the same bits as the same passes on a
//! one-sequence model.

use tritium::backend::cpu::CpuBackend;
use tritium::backend::gpu::GpuBackend;
use tritium::backend::{Backend, Batch, Logits, Readback, Span, Tokens};
use tritium::formats::gguf::GgufFile;
use tritium::gpu::ops::KvDtype;
use tritium::gpu::{DeviceOptions, GpuContext};
use tritium::model::{GgufTensors, Model, ModelConfig, ReadySource};

const MODEL: &str = "tests/fixtures/bitnet/tiny-i2s.gguf";

fn load<B: Backend>(backend: B, n_seqs: usize) -> Model<B> {
    let bytes = std::fs::read(MODEL).expect("fixture");
    let file = GgufFile::read(&bytes).expect("gguf");
    let config = ModelConfig::from_gguf(&file).expect("config");
    let tensors = GgufTensors {
        file: &file,
        src: &bytes,
    };
    let src = ReadySource(&tensors);
    pollster::block_on(Model::load_sequences(backend, config, &src, 32, n_seqs)).expect("load")
}

fn gpu() -> GpuBackend {
    let ctx = pollster::block_on(GpuContext::new(&DeviceOptions::default())).expect("adapter");
    let mut b = GpuBackend::new(ctx, 8).expect("backend");
    b.set_kv_dtype(Some(KvDtype::F32));
    b
}

/// One pass over `batch` with `ids`, every span's last row read back.
fn pass<B: Backend>(m: &mut Model<B>, batch: &Batch, ids: &[u32]) -> Vec<f32> {
    let rec = m.record(batch, Readback::Last).expect("record");
    let pending = m.submit(rec, Tokens::Ids(ids)).expect("submit");
    match pollster::block_on(m.wait(pending)).expect("wait") {
        Logits::Full(v) => v,
        other => panic!("read back {other:?}"),
    }
}

fn span(seq: usize, pos0: usize, len: usize) -> Span {
    Span { seq, pos0, len }
}

const A: [u32; 4] = [1, 5, 9, 2];
const B: [u32; 3] = [7, 3, 11];

/// Sequence `a` alone: a prefill of its first three tokens, then one decode pass; the last
/// rows' logits of both passes.
fn alone<Bk: Backend>(m: &mut Model<Bk>, ids: &[u32]) -> Vec<Vec<f32>> {
    let n = ids.len() - 1;
    vec![
        pass(m, &Batch::one(0, n), &ids[..n]),
        pass(m, &Batch::one(n, 1), &ids[n..]),
    ]
}

#[test]
fn cpu_passes_carry_several_sequences_each_against_its_own_cache() {
    let vocab = 512;
    let a = alone(&mut load(CpuBackend::new(8), 1), &A);
    let b = alone(&mut load(CpuBackend::new(8), 1), &B);
    let mut m = load(CpuBackend::new(8), 2);
    // Both prompts in one pass (A's three tokens, then B's two), then both next tokens in one.
    let prefill = Batch {
        spans: vec![span(0, 0, 3), span(1, 0, 2)],
    };
    let both = pass(&mut m, &prefill, &[A[0], A[1], A[2], B[0], B[1]]);
    assert_eq!(both.len(), 2 * vocab, "one row per span");
    assert_eq!(&both[..vocab], &a[0][..], "A's prefill");
    assert_eq!(&both[vocab..], &b[0][..], "B's prefill");
    // B's order first this time: rows follow the spans.
    let decode = Batch {
        spans: vec![span(1, 2, 1), span(0, 3, 1)],
    };
    let both = pass(&mut m, &decode, &[B[2], A[3]]);
    assert_eq!(&both[..vocab], &b[1][..], "B's decode");
    assert_eq!(&both[vocab..], &a[1][..], "A's decode");
}

#[test]
fn gpu_runs_each_sequence_against_its_own_cache() {
    let a = alone(&mut load(gpu(), 1), &A);
    let b = alone(&mut load(gpu(), 1), &B);
    let mut m = load(gpu(), 2);
    // Interleaved: A's prefill, B's prefill, B's decode, A's decode.
    let a0 = pass(
        &mut m,
        &Batch {
            spans: vec![span(0, 0, 3)],
        },
        &A[..3],
    );
    let b0 = pass(
        &mut m,
        &Batch {
            spans: vec![span(1, 0, 2)],
        },
        &B[..2],
    );
    let b1 = pass(
        &mut m,
        &Batch {
            spans: vec![span(1, 2, 1)],
        },
        &B[2..],
    );
    let a1 = pass(
        &mut m,
        &Batch {
            spans: vec![span(0, 3, 1)],
        },
        &A[3..],
    );
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a0), bits(&a[0]), "A's prefill");
    assert_eq!(bits(&b0), bits(&b[0]), "B's prefill");
    assert_eq!(bits(&b1), bits(&b[1]), "B's decode");
    assert_eq!(bits(&a1), bits(&a[1]), "A's decode, after B's passes");
    // Two sequences in one pass: refused, naming why.
    let both = Batch {
        spans: vec![span(0, 4, 1), span(1, 3, 1)],
    };
    let err = m.record(&both, Readback::Last).err().expect("refused");
    assert!(err.to_string().contains("one sequence per pass"), "{err}");
}

#[test]
fn batches_outside_the_cache_are_refused() {
    let mut m = load(CpuBackend::new(8), 2);
    for (spans, what) in [
        (vec![span(2, 0, 1)], "not one of the cache's"),
        (vec![span(0, 0, 1), span(0, 1, 1)], "twice in one pass"),
        (vec![span(0, 31, 2)], "do not fit the context"),
    ] {
        let err = m
            .record(&Batch { spans }, Readback::Last)
            .err()
            .expect("refused");
        assert!(err.to_string().contains(what), "{err}");
    }
}

//! The engine's bookkeeping on both backends, with the tiny BitNet fixture (random ternary
//! weights; its logits are checked against transformers in tests/bitnet_reference.rs):
//! - a prompt computed in several batches, or token by token, gives the logits one batch gives
//!   (the KV cache and positions carry over between passes);
//! - a second generation reuses the cached prefix and gives the same tokens as a fresh one;
//! - seeded sampling gives the same tokens on the CPU and the GPU.

use tritium::backend::cpu::CpuBackend;
use tritium::backend::gpu::GpuBackend;
use tritium::backend::{Backend, Logits, Readback};
use tritium::engine::{Engine, GenerateOptions, TokenControl};
use tritium::formats::gguf::GgufFile;
use tritium::gpu::ops::KvDtype;
use tritium::gpu::{DeviceOptions, GpuContext};
use tritium::model::{GgufTensors, Model, ModelConfig};
use tritium::sampling::SamplerConfig;

const MODEL: &str = "tests/fixtures/bitnet/tiny-i2s.gguf";
const IDS: [u32; 11] = [509, 17, 300, 44, 2, 310, 99, 12, 405, 7, 77];

fn load<B: Backend>(backend: B) -> Engine<B> {
    let bytes = std::fs::read(MODEL).expect("fixture");
    let file = GgufFile::read(&bytes).expect("gguf");
    let config = ModelConfig::from_gguf(&file).expect("config");
    let tensors = GgufTensors {
        file: &file,
        src: &bytes,
    };
    Engine::new(Model::load(backend, config, &tensors, 64).expect("load"))
}

fn gpu(batch: usize) -> GpuBackend {
    let ctx = pollster::block_on(GpuContext::new(&DeviceOptions::default())).expect("adapter");
    let mut b = GpuBackend::new(ctx, batch).expect("backend");
    b.set_kv_dtype(Some(KvDtype::F32));
    b
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The last position's logits of `IDS`, computed as: one batch; batches of 4; token by token.
fn split_passes<B: Backend>(make: impl Fn(usize) -> B) {
    let vocab;
    let whole = {
        let mut e = load(make(16));
        vocab = e.model.config.n_vocab;
        pollster::block_on(e.logits_all(&IDS)).expect("logits")
    };
    let last = &whole[(IDS.len() - 1) * vocab..];
    for batch in [4, 1] {
        let mut e = load(make(batch));
        let all = pollster::block_on(e.logits_all(&IDS)).expect("logits");
        // Same arithmetic per row, only the pass boundaries differ: int8 activation rounding
        // may flip on one-ulp differences between the matmul and matvec kernels, which moves a
        // logit by up to ~0.1 in this model (bitnet_reference.rs); the CPU is exact.
        let d = max_diff(&all, &whole);
        assert!(
            d <= 0.15,
            "batch {batch}: logits differ from one pass by {d}"
        );
        // Token by token through forward(), reading back the last row only.
        let mut e = load(make(batch));
        let mut got = Vec::new();
        for (i, chunk) in IDS.chunks(batch).enumerate() {
            let rb = if (i + 1) * batch >= IDS.len() {
                Readback::Last
            } else {
                Readback::Nothing
            };
            if let Logits::Full(v) =
                pollster::block_on(e.model.forward(chunk, i * batch, rb)).expect("forward")
            {
                got = v;
            }
        }
        let d = max_diff(&got, last);
        assert!(d <= 0.15, "batch {batch}: last logits differ by {d}");
    }
}

#[test]
fn split_passes_match_one_pass_cpu() {
    split_passes(CpuBackend::new);
}

#[test]
fn split_passes_match_one_pass_gpu() {
    split_passes(gpu);
}

/// A prefill submitted in parts while it is recorded (the default) computes exactly what
/// it does as one command buffer: every logit of every position, bit for bit.
#[test]
fn a_prefill_submitted_in_parts_gives_the_same_logits() {
    let run = |parts: bool| {
        let mut b = gpu(16);
        b.set_submit_in_parts(parts);
        let mut e = load(b);
        let before = e.model.backend.timings();
        let all = pollster::block_on(e.logits_all(&IDS)).expect("logits");
        (all, e.model.backend.timings().parts - before.parts)
    };
    let (whole, none) = run(false);
    let (parted, parts) = run(true);
    assert_eq!(none, 0);
    // Parts of 8, 8, 16, ... steps: this model's pass has more than 16.
    assert!(parts >= 2, "{parts} parts");
    assert_eq!(whole.len(), parted.len());
    if let Some(i) = (0..whole.len()).find(|&i| whole[i].to_bits() != parted[i].to_bits()) {
        panic!("logit {i}: {} whole, {} in parts", whole[i], parted[i]);
    }
}

fn generate<B: Backend>(e: &mut Engine<B>, prompt: &[u32], sampling: SamplerConfig) -> Vec<u32> {
    let opts = GenerateOptions {
        max_tokens: 12,
        sampling,
        stop_ids: vec![],
    };
    let g = pollster::block_on(e.generate(prompt, &opts, |_| TokenControl::Continue))
        .expect("generate");
    g.ids
}

#[test]
fn prefix_reuse_gives_the_same_tokens() {
    let greedy = SamplerConfig::greedy();
    let mut e = load(CpuBackend::new(8));
    let first = generate(&mut e, &IDS, greedy);
    // Same prompt again: all but the last two tokens come from the cache (the last alone
    // would be a one-token pass, which a fresh prefill of 11 tokens in passes of 8 has not).
    let opts = GenerateOptions {
        max_tokens: 12,
        sampling: greedy,
        stop_ids: vec![],
    };
    let g = pollster::block_on(e.generate(&IDS, &opts, |_| TokenControl::Continue)).unwrap();
    assert_eq!(g.usage.cached_tokens, IDS.len() - 2);
    assert_eq!(g.ids, first);
    // A longer prompt sharing the prefix (a next chat turn) equals a fresh engine's answer.
    let mut longer = IDS.to_vec();
    longer.extend_from_slice(&first[..4]);
    longer.extend_from_slice(&[5, 6]);
    let g = pollster::block_on(e.generate(&longer, &opts, |_| TokenControl::Continue)).unwrap();
    assert!(g.usage.cached_tokens >= IDS.len(), "{:?}", g.usage);
    let fresh = generate(&mut load(CpuBackend::new(8)), &longer, greedy);
    assert_eq!(g.ids, fresh);
}

#[test]
fn seeded_sampling_is_the_same_on_cpu_and_gpu() {
    let cfg = SamplerConfig {
        temperature: 1.0,
        top_k: 20,
        top_p: 0.95,
        min_p: 0.0,
        repeat_penalty: 1.1,
        repeat_last_n: 16,
        frequency_penalty: 0.0,
        presence_penalty: 0.0,
        seed: 42,
    };
    let cpu = generate(&mut load(CpuBackend::new(16)), &IDS, cfg);
    let mut on_gpu = load(gpu(16));
    let sampled = generate(&mut on_gpu, &IDS, cfg);
    assert_eq!(cpu.len(), 12);
    assert_eq!(
        cpu, sampled,
        "same seed, same scores: same tokens on both backends"
    );
    // Sampled on the host, so the GPU prepares each next pass while the current one runs
    // (dropping it where the repetition penalty changes what must be read back).
    assert!(on_gpu.pass_counts().prepared > 0);
    // llama.cpp's default sampler (top-k 40, no penalty): every pass after the first decode
    // pass is a prepared one, and the tokens still match the CPU's.
    let cfg = SamplerConfig {
        seed: 7,
        ..SamplerConfig::default()
    };
    let cpu = generate(&mut load(CpuBackend::new(16)), &IDS, cfg);
    let mut on_gpu = load(gpu(16));
    let before = on_gpu.pass_counts();
    let sampled = generate(&mut on_gpu, &IDS, cfg);
    let after = on_gpu.pass_counts();
    assert_eq!(cpu, sampled, "llama.cpp's default sampler, seed 7");
    assert_eq!(
        after.prepared - before.prepared,
        sampled.len() as u64 - 2,
        "{sampled:?}: the first token comes from the prefill, the second pass is submitted directly"
    );
    let other = generate(
        &mut load(CpuBackend::new(16)),
        &IDS,
        SamplerConfig { seed: 43, ..cfg },
    );
    assert_ne!(
        cpu, other,
        "a different seed should change a 12-token sample"
    );
}

/// Greedy decoding on the GPU submits each pass before the previous one is read back (the
/// device feeds its own best candidate forward). It must give the CPU's tokens exactly, stop
/// at the same stop id, budget and context end, and leave a cache the next turn can reuse
/// (the pass submitted ahead writes keys and values past what the engine counts as cached).
#[test]
fn greedy_passes_run_ahead_on_the_gpu_and_match_the_cpu() {
    let greedy = SamplerConfig::greedy();
    let mut cpu = load(CpuBackend::new(8));
    let mut gpu = load(gpu(8));
    let want = generate(&mut cpu, &IDS, greedy);
    assert_eq!(want.len(), 12);
    assert_eq!(generate(&mut gpu, &IDS, greedy), want);

    // A stop id in the middle: the same tokens before it, on both.
    let opts = GenerateOptions {
        max_tokens: 12,
        sampling: greedy,
        stop_ids: vec![want[5]],
    };
    let first_stop = want.iter().position(|&t| t == want[5]).unwrap();
    for e in [&mut cpu as &mut dyn GenerateDyn, &mut gpu] {
        let g = e.run(&IDS, &opts);
        assert_eq!(g.ids, want[..first_stop], "stopped at the stop id");
        assert_eq!(g.finish_reason, tritium::engine::FinishReason::Stop);
    }

    // The next turn reuses the cache after a run that stopped early; its tokens equal a
    // fresh engine's.
    let mut longer = IDS.to_vec();
    longer.extend_from_slice(&want[..first_stop]);
    longer.extend_from_slice(&[5, 6]);
    let opts = GenerateOptions {
        max_tokens: 12,
        sampling: greedy,
        stop_ids: vec![],
    };
    let g = gpu.run(&longer, &opts);
    assert!(g.usage.cached_tokens >= IDS.len(), "{:?}", g.usage);
    assert_eq!(
        g.ids,
        generate(&mut load(CpuBackend::new(8)), &longer, greedy)
    );

    // The context end (64 positions): both stop there with the same tokens.
    let opts = GenerateOptions {
        max_tokens: 100,
        sampling: greedy,
        stop_ids: vec![],
    };
    let (c, g) = (cpu.run(&IDS, &opts), gpu.run(&IDS, &opts));
    assert_eq!(c.finish_reason, tritium::engine::FinishReason::Length);
    assert_eq!(
        c.ids.len(),
        64 - IDS.len() + 1,
        "the last token needs no pass"
    );
    assert_eq!(g.ids, c.ids);
}

/// `Engine::generate` over either backend, for looping over both.
trait GenerateDyn {
    fn run(&mut self, prompt: &[u32], opts: &GenerateOptions) -> tritium::engine::Generation;
}

impl<B: Backend> GenerateDyn for Engine<B> {
    fn run(&mut self, prompt: &[u32], opts: &GenerateOptions) -> tritium::engine::Generation {
        pollster::block_on(self.generate(prompt, opts, |_| TokenControl::Continue))
            .expect("generate")
    }
}

/// Prompts of many lengths: each pass size has its tape of ops; at most `MAX_TAPES` (6) are
/// kept, the least recently used dropped, and the uniforms and scratch buffers of a dropped
/// tape's ops go back to the context's buffer pool, from which the next tape's ops take
/// theirs. Every length's logits must equal a fresh backend's bit for bit (a pooled buffer
/// handed to two live ops, or read before it is written, would change them), the tapes stay
/// at six, and once every size has been built the pool makes no new buffers for rebuilds.
#[test]
fn evicted_tapes_give_their_buffers_to_the_next() {
    let mut e = load(gpu(16));
    let vocab = e.model.config.n_vocab;
    let mut created = Vec::new();
    for round in 0..3 {
        for k in 1..=IDS.len() {
            let got = pollster::block_on(e.logits_all(&IDS[..k])).expect("logits");
            if round == 0 {
                let want = pollster::block_on(load(gpu(16)).logits_all(&IDS[..k])).unwrap();
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{k} tokens: logits differ from a fresh backend's");
            }
            assert_eq!(got.len(), k * vocab);
            assert!(
                e.model.backend.tapes() <= 6,
                "{} tapes",
                e.model.backend.tapes()
            );
        }
        created.push(e.model.backend.ctx.pool_stats().created);
    }
    assert_eq!(
        created[1], created[2],
        "rebuilt tapes made new buffers instead of reusing the pool's: {created:?}"
    );
    let st = e.model.backend.ctx.pool_stats();
    assert!(st.reused > 0, "{st:?}");
}

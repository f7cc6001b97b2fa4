//! Shared by the GPU kernel tests: device contexts, a seeded PRNG, poisoned outputs, and
//! running recorded dispatches.
#![allow(dead_code)]

use std::sync::OnceLock;

use tritium::gpu::matmul::MatmulOp;
use tritium::gpu::weights::GpuWeight;
use tritium::gpu::{DeviceOptions, GpuContext};

/// The bit pattern outputs are filled with before a kernel runs: a NaN no kernel produces,
/// so an element the kernel fails to write fails every comparison.
pub const POISON: u32 = 0x7fa5_a5a5;

fn make(options: DeviceOptions) -> GpuContext {
    pollster::block_on(GpuContext::new(&options)).unwrap_or_else(|e| {
        panic!(
            "no GPU adapter for the kernel tests: {e}. Natively these run on lavapipe: \
             apt-get install mesa-vulkan-drivers and set \
             VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json (scripts/test.sh does)"
        )
    })
}

/// The device with every feature it offers (f16, subgroups).
pub fn full() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(|| make(DeviceOptions::default()))
}

/// The same device without f16 or subgroups: the f32 path every browser has.
pub fn plain() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(|| {
        make(DeviceOptions {
            allow_f16: false,
            allow_subgroups: false,
            ..DeviceOptions::default()
        })
    })
}

/// Both contexts, so every test runs each kernel variant.
pub fn contexts() -> [&'static GpuContext; 2] {
    [full(), plain()]
}

/// SplitMix64: a tiny seeded generator, so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32() * scale).collect()
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// A storage buffer of `n` f32 filled with [`POISON`].
pub fn poisoned(ctx: &GpuContext, n: usize) -> wgpu::Buffer {
    let b = ctx.storage("out", (n * 4) as u64).unwrap();
    ctx.write(&b, 0, &vec![POISON; n]);
    b
}

/// Submit recorded work and wait for it.
pub fn submit(ctx: &GpuContext, record: impl FnOnce(&mut wgpu::ComputePass<'_>)) {
    let mut enc = ctx.device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        record(&mut pass);
    }
    ctx.queue.submit([enc.finish()]);
    ctx.poll_wait();
}

/// Run `y = W x` for `n_tokens` tokens through [`MatmulOp`] and read `y` back.
pub fn run_matmul(ctx: &GpuContext, w: &GpuWeight, x: &wgpu::Buffer, n_tokens: u32) -> Vec<f32> {
    let n = (w.rows * n_tokens) as usize;
    let y = poisoned(ctx, n);
    let op = MatmulOp::new(ctx, w, x, &y, n_tokens).unwrap();
    submit(ctx, |pass| op.record(pass));
    pollster::block_on(ctx.read_f32(&y, 0, n as u64)).unwrap()
}

/// `W x` in f64 with the bound on any f32 summation order: |err| <= k * eps * sum |w_i x_i|
/// (plus the error of the inputs' own rounding, which callers add).
pub fn reference_matmul(
    w: &[f32],
    x: &[f32],
    rows: usize,
    cols: usize,
    n_tokens: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; rows * n_tokens];
    let mut bound = vec![0.0; rows * n_tokens];
    for t in 0..n_tokens {
        for r in 0..rows {
            let (mut s, mut a) = (0.0f64, 0.0f64);
            for c in 0..cols {
                let p = f64::from(w[r * cols + c]) * f64::from(x[t * cols + c]);
                s += p;
                a += p.abs();
            }
            y[t * rows + r] = s;
            bound[t * rows + r] = cols as f64 * f64::from(f32::EPSILON) * a;
        }
    }
    (y, bound)
}

/// Compare with a per-element bound; report the worst element.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], bound: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, ((&g, &w), &b)) in got.iter().zip(want).zip(bound).enumerate() {
        assert!(
            g.is_finite() && (f64::from(g) - w).abs() <= b.max(1e-30),
            "{what}: element {i}: got {g} (bits {:#x}), want {w} (bound {b})",
            g.to_bits()
        );
    }
}

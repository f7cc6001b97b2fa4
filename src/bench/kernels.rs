//! `tritium bench kernels`: every matvec kernel timed two ways.
//!
//! (a) At a large shape (at least 256 MB of weights by default) where the kernel must be
//!     bandwidth-bound: achieved GB/s of weight reads, and that as a fraction of the device's
//!     copy bandwidth measured in the same run (bytes read + written per second).
//! (b) At real model shapes (BitNet 2B4T, Llama-3.2-1B, SmolLM2), microseconds per call when
//!     many calls are recorded in one submission, as a forward pass records them, beside the
//!     per-dispatch overhead floor of an empty kernel.
//!
//! Weight values do not change the bytes a kernel reads, so weights are random bytes.

use serde::Serialize;

use super::timing::{time_compute, time_copy, Clock};
use crate::gpu::kernels::Kernel;
use crate::gpu::matmul::MatmulOp;
use crate::gpu::q8::{has_q8_matvec, q8_matvec, record_bytes, QuantizeQ8Op};
use crate::gpu::weights::GpuWeight;
use crate::gpu::{AdapterSummary, GpuContext, GpuError};
use crate::quant::GgmlType;

/// What to run.
#[derive(Debug, Clone)]
pub struct KernelBenchOptions {
    /// Small shapes only (checks that every dtype runs; lavapipe finishes within a minute).
    pub quick: bool,
    /// Weight bytes for the bandwidth-bound shape.
    pub large_bytes: u64,
    /// Calls recorded per submission.
    pub calls: u32,
    /// Best of this many timed submissions.
    pub trials: u32,
    /// Only these dtypes (all with a matvec kernel when empty).
    pub dtypes: Vec<GgmlType>,
}

impl Default for KernelBenchOptions {
    fn default() -> Self {
        KernelBenchOptions {
            quick: false,
            large_bytes: 256 << 20,
            calls: 20,
            trials: 3,
            dtypes: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LargeResult {
    pub dtype: String,
    pub rows: u32,
    pub cols: u32,
    pub weight_bytes: u64,
    pub us_per_call: f64,
    pub gb_per_s: f64,
    /// `gb_per_s` over the copy bandwidth measured in the same run.
    pub fraction_of_copy: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ShapeResult {
    pub model: &'static str,
    pub tensor: &'static str,
    pub dtype: String,
    pub rows: u32,
    pub cols: u32,
    pub weight_bytes: u64,
    pub us_per_call: f64,
    pub gb_per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct KernelBenchReport {
    pub adapter: AdapterSummary,
    pub clock: Clock,
    /// Device-to-device copy bandwidth, (bytes read + bytes written) per second in GB/s: the
    /// better of the two figures below.
    pub copy_gb_per_s: f64,
    /// `copy_buffer_to_buffer` (the copy engine).
    pub copy_engine_gb_per_s: f64,
    /// A plain compute copy kernel (16 bytes per load).
    pub copy_kernel_gb_per_s: f64,
    pub copy_bytes: u64,
    /// One empty dispatch, microseconds per call (the overhead floor of every figure in (b)).
    pub empty_dispatch_us: f64,
    pub large: Vec<LargeResult>,
    pub shapes: Vec<ShapeResult>,
}

/// Real model shapes: (model, tensor, dtype, rows, cols).
const SHAPES: &[(&str, &str, GgmlType, u32, u32)] = &[
    (
        "bitnet-2b4t",
        "attn_q/attn_output 2560x2560",
        GgmlType::I2_S,
        2560,
        2560,
    ),
    (
        "bitnet-2b4t",
        "attn_k/attn_v 640x2560",
        GgmlType::I2_S,
        640,
        2560,
    ),
    (
        "bitnet-2b4t",
        "ffn_gate/ffn_up 6912x2560",
        GgmlType::I2_S,
        6912,
        2560,
    ),
    (
        "bitnet-2b4t",
        "ffn_down 2560x6912",
        GgmlType::I2_S,
        2560,
        6912,
    ),
    (
        "bitnet-2b4t",
        "tied head 128256x2560",
        GgmlType::F16,
        128256,
        2560,
    ),
    (
        "llama-3.2-1b",
        "attn_q/attn_output 2048x2048",
        GgmlType::Q4_K,
        2048,
        2048,
    ),
    (
        "llama-3.2-1b",
        "attn_k/attn_v 512x2048",
        GgmlType::Q4_K,
        512,
        2048,
    ),
    (
        "llama-3.2-1b",
        "ffn_gate/ffn_up 8192x2048",
        GgmlType::Q4_K,
        8192,
        2048,
    ),
    (
        "llama-3.2-1b",
        "ffn_down 2048x8192",
        GgmlType::Q6_K,
        2048,
        8192,
    ),
    (
        "llama-3.2-1b",
        "head 128256x2048",
        GgmlType::Q6_K,
        128256,
        2048,
    ),
    ("smollm2-135m", "attn_q 576x576", GgmlType::Q4_1, 576, 576),
    ("smollm2-135m", "ffn_up 1536x576", GgmlType::Q4_1, 1536, 576),
    (
        "smollm2-135m",
        "ffn_down 576x1536",
        GgmlType::Q4_1,
        576,
        1536,
    ),
    (
        "smollm2-135m",
        "tied head 49152x576",
        GgmlType::Q8_0,
        49152,
        576,
    ),
];

/// Every dtype that has a matvec kernel.
pub fn matvec_dtypes() -> Vec<GgmlType> {
    GgmlType::ALL
        .into_iter()
        .filter(|&t| Kernel::Matvec(t).source().is_some())
        .collect()
}

/// Fast deterministic bytes (SplitMix64).
fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(n);
    out
}

/// A weight of random bytes in `dtype`'s layout with tame scales (I2_S: valid codes and a
/// trailing scale).
fn random_weight(
    ctx: &GpuContext,
    dtype: GgmlType,
    rows: u32,
    cols: u32,
) -> Result<GpuWeight, GpuError> {
    let n = u64::from(rows) * u64::from(cols);
    let data = random_weight_bytes(dtype, n)
        .ok_or_else(|| GpuError::Unsupported(format!("{dtype} with {cols} columns")))?;
    ctx.upload_weight(&format!("bench.{dtype}"), dtype, rows, cols, &data)
}

/// The bytes of [`random_weight`]: `n` weights of random bytes in `dtype`'s layout made to
/// look like real weights where it could matter to the hardware ([`crate::quant::tame`]: every
/// f16 or f32 value finite and below 2 in magnitude, no NaN, infinity or huge scales; I2_S:
/// valid codes and a trailing scale), or `None` where `n` is not a whole number of blocks
/// (public for tests/kernel_snapshot.rs).
#[doc(hidden)]
pub fn random_weight_bytes(dtype: GgmlType, n: u64) -> Option<Vec<u8>> {
    let bytes = dtype.tensor_bytes(n)?;
    let mut data = random_bytes(bytes as usize, n ^ u64::from(dtype.id()));
    crate::quant::tame(dtype, &mut data);
    Some(data)
}

/// A prepared matvec: the op and the buffers it uses.
struct Prepared {
    op: MatmulOp,
    x: wgpu::Buffer,
    y: wgpu::Buffer,
    /// The int8 records of `x` (integer-dot kernels).
    xq: Option<wgpu::Buffer>,
}

/// Free a measured weight's GPU memory now (not whenever the driver gets to it), so the next
/// measurement starts from the same state: otherwise later kernels of a full run can measure
/// several times slower than when run alone.
fn release(ctx: &GpuContext, w: GpuWeight) {
    for chunk in &w.chunks {
        for plane in &chunk.planes {
            plane.destroy();
        }
    }
    drop(w);
    ctx.poll_wait();
}

/// Free a prepared matvec's buffers.
fn release_prepared(p: Prepared) {
    p.x.destroy();
    p.y.destroy();
    if let Some(xq) = &p.xq {
        xq.destroy();
    }
}

/// The dtype column: `Q4_K` is the kernel decode uses (integer-dot where the format has one),
/// `Q4_K/f32` the f32 kernel beside it.
fn label(dtype: GgmlType, f32: bool) -> String {
    if f32 {
        format!("{}/f32", dtype.name())
    } else {
        dtype.name().into()
    }
}

/// The matvec decode runs for `w`: the integer-dot kernel on int8 records of x where the
/// format has one (the records made once here, outside the timing), unless `f32` asks for the
/// f32 kernel.
fn prepare(ctx: &GpuContext, w: &GpuWeight, f32: bool) -> Result<Prepared, GpuError> {
    // Activations: f32 in [-1, 1) (for I2_S the same bytes stand in for the int8 record).
    let x: Vec<f32> = random_bytes(w.cols as usize * 4, 7)
        .chunks_exact(4)
        .map(|c| {
            (u32::from_le_bytes([c[0], c[1], c[2], c[3]]) >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect();
    let x = ctx.storage_init("bench.x", bytemuck::cast_slice(&x))?;
    let y = ctx.storage("bench.y", u64::from(w.rows) * 4)?;
    if !f32 && has_q8_matvec(w.dtype, w.cols) {
        let xq = ctx.storage("bench.xq", record_bytes(w.cols))?;
        let quant = QuantizeQ8Op::new(ctx, &x, &xq, w.cols, 1)?;
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        quant.record(&mut enc.begin_compute_pass(&Default::default()));
        ctx.queue.submit([enc.finish()]);
        let op = q8_matvec(ctx, w, &xq, &y, false)?;
        return Ok(Prepared {
            op,
            x,
            y,
            xq: Some(xq),
        });
    }
    let op = MatmulOp::new(ctx, w, &x, &y, 1)?;
    Ok(Prepared { op, x, y, xq: None })
}

/// Device-to-device copy bandwidth, (bytes read + bytes written) per second in GB/s.
pub struct CopyBandwidth {
    /// `copy_buffer_to_buffer` (the copy engine).
    pub engine_gb_per_s: f64,
    /// A plain compute copy kernel (16 bytes per load).
    pub kernel_gb_per_s: f64,
}

impl CopyBandwidth {
    /// The better of the two: the physical limit kernels are measured against.
    pub fn best(&self) -> f64 {
        self.engine_gb_per_s.max(self.kernel_gb_per_s)
    }
}

/// Measure both copies over `copy_bytes` (a multiple of 16 within one binding).
pub fn copy_bandwidth(
    ctx: &GpuContext,
    copy_bytes: u64,
    calls: u32,
    trials: u32,
) -> Result<CopyBandwidth, GpuError> {
    let (engine_secs, _) = time_copy(ctx, copy_bytes, calls, trials)?;
    let src = ctx.storage("copy.src", copy_bytes)?;
    let dst = ctx.storage("copy.dst", copy_bytes)?;
    let copy = ctx.kernel(Kernel::Copy, None)?;
    let copy_bind = ctx.bind(&copy, &[&src, &dst]);
    let groups = (copy_bytes / 16)
        .div_ceil(256)
        .min(u64::from(ctx.limits.max_compute_workgroups_per_dimension)) as u32;
    let (kernel_secs, _) = time_compute(ctx, calls, trials, &|pass| {
        pass.set_pipeline(&copy);
        pass.set_bind_group(0, &copy_bind, &[]);
        pass.dispatch_workgroups(groups, 1, 1);
    })?;
    src.destroy();
    dst.destroy();
    Ok(CopyBandwidth {
        engine_gb_per_s: 2.0 * copy_bytes as f64 / engine_secs / 1e9,
        kernel_gb_per_s: 2.0 * copy_bytes as f64 / kernel_secs / 1e9,
    })
}

/// Run the benchmark.
pub fn run(ctx: &GpuContext, opts: &KernelBenchOptions) -> Result<KernelBenchReport, GpuError> {
    let dtypes = if opts.dtypes.is_empty() {
        matvec_dtypes()
    } else {
        opts.dtypes.clone()
    };
    let (large_bytes, calls) = if opts.quick {
        (4 << 20, opts.calls.min(5))
    } else {
        (opts.large_bytes, opts.calls)
    };

    let copy_bytes = large_bytes.min(ctx.max_binding_bytes()) & !15;
    let CopyBandwidth {
        engine_gb_per_s: copy_engine_gb_per_s,
        kernel_gb_per_s: copy_kernel_gb_per_s,
    } = copy_bandwidth(ctx, copy_bytes, calls, opts.trials)?;
    let copy_gb_per_s = copy_engine_gb_per_s.max(copy_kernel_gb_per_s);

    let sink = ctx.storage("bench.sink", 4)?;
    let noop = ctx.kernel(Kernel::Noop, None)?;
    let noop_bind = ctx.bind(&noop, &[&sink]);
    let (noop_secs, clock) = time_compute(ctx, calls.max(100), opts.trials, &|pass| {
        pass.set_pipeline(&noop);
        pass.set_bind_group(0, &noop_bind, &[]);
        pass.dispatch_workgroups(1, 1, 1);
    })?;

    let mut large = Vec::new();
    for &dtype in &dtypes {
        let cols = 4096u32;
        let row = crate::gpu::weights::row_bytes(dtype, u64::from(cols)).unwrap_or(1);
        let rows = large_bytes.div_ceil(row).max(1) as u32;
        let w = random_weight(ctx, dtype, rows, cols)?;
        // The decode kernel, then (where that is the integer-dot one) the f32 kernel.
        for f32 in [false, true] {
            if f32 && !has_q8_matvec(dtype, cols) {
                continue;
            }
            let p = prepare(ctx, &w, f32)?;
            let (secs, _) = time_compute(ctx, calls, opts.trials, &|pass| p.op.record(pass))?;
            let gbps = w.bytes as f64 / secs / 1e9;
            large.push(LargeResult {
                dtype: label(dtype, f32),
                rows,
                cols,
                weight_bytes: w.bytes,
                us_per_call: secs * 1e6,
                gb_per_s: gbps,
                fraction_of_copy: gbps / copy_gb_per_s,
            });
            release_prepared(p);
        }
        release(ctx, w);
    }

    let mut shapes = Vec::new();
    for &(model, tensor, dtype, rows, cols) in SHAPES {
        if !dtypes.contains(&dtype) {
            continue;
        }
        let (rows, cols) = if opts.quick {
            (rows.min(1024), cols)
        } else {
            (rows, cols)
        };
        let w = random_weight(ctx, dtype, rows, cols)?;
        for f32 in [false, true] {
            if f32 && !has_q8_matvec(dtype, cols) {
                continue;
            }
            let p = prepare(ctx, &w, f32)?;
            let (secs, _) =
                time_compute(ctx, calls.max(50), opts.trials, &|pass| p.op.record(pass))?;
            shapes.push(ShapeResult {
                model,
                tensor,
                dtype: label(dtype, f32),
                rows,
                cols,
                weight_bytes: w.bytes,
                us_per_call: secs * 1e6,
                gb_per_s: w.bytes as f64 / secs / 1e9,
            });
            release_prepared(p);
        }
        release(ctx, w);
    }

    // The activation quantization the integer-dot kernels need, once per input per token.
    for (model, tensor, cols) in [
        ("llama-3.2-1b", "quantize_q8 of x 1x2048", 2048u32),
        ("llama-3.2-1b", "quantize_q8 of x 1x8192", 8192),
    ] {
        let x = ctx.storage("bench.x", u64::from(cols) * 4)?;
        let xq = ctx.storage("bench.xq", record_bytes(cols))?;
        let op = QuantizeQ8Op::new(ctx, &x, &xq, cols, 1)?;
        let (secs, _) = time_compute(ctx, calls.max(50), opts.trials, &|pass| op.record(pass))?;
        shapes.push(ShapeResult {
            model,
            tensor,
            dtype: "F32".into(),
            rows: 1,
            cols,
            weight_bytes: u64::from(cols) * 4,
            us_per_call: secs * 1e6,
            gb_per_s: f64::from(cols) * 4.0 / secs / 1e9,
        });
        x.destroy();
        xq.destroy();
    }

    Ok(KernelBenchReport {
        adapter: ctx.adapter.clone(),
        clock,
        copy_gb_per_s,
        copy_engine_gb_per_s,
        copy_kernel_gb_per_s,
        copy_bytes,
        empty_dispatch_us: noop_secs * 1e6,
        large,
        shapes,
    })
}

impl KernelBenchReport {
    /// The human-readable tables.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let a = &self.adapter;
        let _ = writeln!(
            s,
            "device: {} ({}, {}), timing: {:?}",
            a.name, a.backend, a.driver, self.clock
        );
        let _ = writeln!(
            s,
            "copy bandwidth: {:.1} GB/s (read + write of {} MiB; copy engine {:.1}, copy kernel {:.1}); empty dispatch: {:.2} us",
            self.copy_gb_per_s,
            self.copy_bytes >> 20,
            self.copy_engine_gb_per_s,
            self.copy_kernel_gb_per_s,
            self.empty_dispatch_us
        );
        let _ = writeln!(s, "\n(a) bandwidth-bound matvec");
        let _ = writeln!(
            s,
            "  {:<9} {:>8} {:>6} {:>10} {:>10} {:>9} {:>8}",
            "dtype", "rows", "cols", "MiB", "us/call", "GB/s", "of copy"
        );
        for r in &self.large {
            let _ = writeln!(
                s,
                "  {:<9} {:>8} {:>6} {:>10.1} {:>10.1} {:>9.1} {:>7.1}%",
                r.dtype,
                r.rows,
                r.cols,
                r.weight_bytes as f64 / 1048576.0,
                r.us_per_call,
                r.gb_per_s,
                100.0 * r.fraction_of_copy
            );
        }
        let _ = writeln!(
            s,
            "\n(b) model shapes, many calls per submission (empty dispatch {:.2} us)",
            self.empty_dispatch_us
        );
        let _ = writeln!(
            s,
            "  {:<13} {:<30} {:<8} {:>10} {:>9}",
            "model", "tensor", "dtype", "us/call", "GB/s"
        );
        for r in &self.shapes {
            let _ = writeln!(
                s,
                "  {:<13} {:<30} {:<8} {:>10.2} {:>9.1}",
                r.model, r.tensor, r.dtype, r.us_per_call, r.gb_per_s
            );
        }
        s
    }
}

//! crates/gpu/shaders/absmax_scale.wgsl's `scale_for_absmax` (the quantizers' `127 / amax`, which the GPU
//! computes by exact integer division because WGSL's `/` may be 2.5 ulp off) against the CPU's
//! IEEE f32 division, bit for bit: every one of the 2^23 mantissas at one exponent (the
//! quotient's mantissa depends on the divisor's mantissa only), and at every exponent from
//! 1e-30 (the q8 records' smallest block maximum) to the largest finite f32, 257 mantissas
//! (the extremes and a spread between); infinity gives 0. Run as its own kernel (the file and
//! a one-line entry point) on the test device: lavapipe in CI.

use tritium::gpu::{DeviceOptions, GpuContext};
use wgpu::util::DeviceExt;

const ENTRY: &str = "
@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> output: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x + id.y * 65535u * 256u;
    if (i < arrayLength(&input)) {
        output[i] = scale_for_absmax(input[i]);
    }
}
";

/// The inputs: all mantissas at exponent 0, then 257 at each exponent from 1e-30's up.
fn inputs() -> Vec<f32> {
    let mut v: Vec<f32> = (0..1u32 << 23)
        .map(|m| f32::from_bits((127 << 23) | m))
        .collect();
    let lowest = (1e-30f32.to_bits() >> 23) & 0xff;
    for e in lowest..=254 {
        for k in 0..=256u32 {
            // 0, 1, ..., the largest mantissa, and a spread of odd ones between.
            let m = match k {
                0 => 0,
                256 => 0x7f_ffff,
                _ => (k.wrapping_mul(2_654_435_761) >> 9) | 1,
            };
            v.push(f32::from_bits((e << 23) | (m & 0x7f_ffff)));
        }
    }
    v.retain(|m| *m >= 1e-30);
    v.push(f32::INFINITY);
    v
}

fn run(ctx: &GpuContext, input: &[f32]) -> Vec<f32> {
    let source = format!(
        "{}\n{ENTRY}",
        include_str!("../crates/gpu/shaders/absmax_scale.wgsl")
    );
    let device = &ctx.device;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("absmax_scale probe"),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("absmax_scale probe"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let bytes = std::mem::size_of_val(input) as u64;
    let src = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("m"),
        contents: bytemuck::cast_slice(input),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let dst = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("scale"),
        size: bytes,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let read = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("read"),
        size: bytes,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: src.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: dst.as_entire_binding(),
            },
        ],
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        let groups = (input.len() as u32).div_ceil(256);
        pass.dispatch_workgroups(groups.min(65535), groups.div_ceil(65535), 1);
    }
    encoder.copy_buffer_to_buffer(&dst, 0, &read, 0, bytes);
    ctx.queue.submit([encoder.finish()]);
    let slice = read.slice(..);
    slice.map_async(wgpu::MapMode::Read, |r| r.expect("map the results"));
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("the probe runs");
    let view = slice.get_mapped_range().expect("the mapped results");
    bytemuck::cast_slice(&view).to_vec()
}

#[test]
fn scale_for_absmax_is_the_cpus_division_bit_for_bit() {
    let ctx = pollster::block_on(GpuContext::new(&DeviceOptions::default()))
        .expect("a GPU adapter (lavapipe in CI: scripts/test.sh)");
    let input = inputs();
    assert!(input.len() > 1 << 23);
    let got = run(&ctx, &input);
    let mut wrong = Vec::new();
    for (m, g) in input.iter().zip(&got) {
        let want = if m.is_infinite() { 0.0 } else { 127.0 / m };
        if g.to_bits() != want.to_bits() {
            wrong.push(format!(
                "127 / {m:e}: {g:e} ({:#x}), want {want:e}",
                g.to_bits()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} wrong, the first: {:?}",
        wrong.len(),
        input.len(),
        &wrong[..wrong.len().min(8)]
    );
}

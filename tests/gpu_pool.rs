//! The GPU buffer pool (crates/gpu/src/pool.rs) on the test adapter (lavapipe): size classes, reuse
//! after a drop, usages kept apart, the cap on free bytes, trim; and a readback through a
//! pooled staging buffer that an earlier readback used returns the new data.

use tritium::gpu::pool::{size_class, MAX_FREE_BYTES, MIN_CLASS};
use tritium::gpu::{DeviceOptions, GpuContext};

fn ctx() -> GpuContext {
    pollster::block_on(GpuContext::new(&DeviceOptions::default())).expect("adapter")
}

#[test]
fn size_classes_are_powers_of_two_from_256_and_uniforms_exact() {
    let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
    assert_eq!(size_class(storage, 0), MIN_CLASS);
    assert_eq!(size_class(storage, 1), 256);
    assert_eq!(size_class(storage, 256), 256);
    assert_eq!(size_class(storage, 257), 512);
    assert_eq!(size_class(storage, 3 << 20), 4 << 20);
    let uniform = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
    assert_eq!(size_class(uniform, 4), 16);
    assert_eq!(size_class(uniform, 64), 64);
    assert_eq!(size_class(uniform, 72), 80);
}

#[test]
fn dropped_buffers_are_reused_by_class_and_usage() {
    let ctx = ctx();
    let s0 = ctx.pool_stats();
    let a = ctx.scratch("a", 100).unwrap();
    assert_eq!(a.size(), 256, "a request gets its class's size");
    drop(a);
    let st = ctx.pool_stats();
    assert_eq!((st.created - s0.created, st.free, st.in_use), (1, 1, 0));

    // Same class: the free buffer; another class or usage: a new one.
    let b = ctx.scratch("b", 200).unwrap();
    let st = ctx.pool_stats();
    assert_eq!((st.created - s0.created, st.reused - s0.reused), (1, 1));
    let c = ctx.scratch("c", 300).unwrap();
    let u = ctx.uniform("u", &[0u32; 4]);
    let st = ctx.pool_stats();
    assert_eq!(
        st.created - s0.created,
        3,
        "class 512 and a uniform are new buffers"
    );
    assert_eq!(
        (c.size(), u.size()),
        (512, 16),
        "a uniform keeps its exact size"
    );
    assert_eq!(st.in_use, 3);
    assert_eq!(st.in_use_bytes, 256 + 512 + 16);
    drop((b, c, u));
    let st = ctx.pool_stats();
    assert_eq!((st.free, st.free_bytes, st.in_use), (3, 784, 0));
    // A uniform of the same size takes the free one.
    let u2 = ctx.uniform("u2", &[1u32; 4]);
    assert_eq!(ctx.pool_stats().created - s0.created, 3);
    drop(u2);

    ctx.trim_pool();
    let st = ctx.pool_stats();
    assert_eq!(
        (st.free, st.free_bytes),
        (0, 0),
        "trim releases every free buffer"
    );
}

#[test]
fn the_pool_keeps_at_most_its_cap_free() {
    let ctx = ctx();
    let big = MAX_FREE_BYTES / 2;
    let held: Vec<_> = (0..3).map(|_| ctx.scratch("big", big).unwrap()).collect();
    drop(held);
    let st = ctx.pool_stats();
    assert_eq!(
        st.free_bytes, MAX_FREE_BYTES,
        "the third buffer is released, not kept"
    );
    assert_eq!(st.free, 2);
}

#[test]
fn a_reused_staging_buffer_reads_back_the_new_data() {
    let ctx = ctx();
    let src = ctx
        .storage_init("src", bytemuck::cast_slice(&[1u32, 2, 3, 4]))
        .unwrap();
    let first = pollster::block_on(ctx.read_bytes(&src, 0, 16)).unwrap();
    assert_eq!(bytemuck::cast_slice::<u8, u32>(&first), [1, 2, 3, 4]);
    ctx.write(&src, 0, &[9u32, 8, 7, 6]);
    let before = ctx.pool_stats();
    let second = pollster::block_on(ctx.read_bytes(&src, 4, 8)).unwrap();
    assert_eq!(bytemuck::cast_slice::<u8, u32>(&second), [8, 7]);
    let after = ctx.pool_stats();
    assert_eq!(
        after.created, before.created,
        "the second readback reused the staging buffer"
    );
    assert_eq!(after.in_use, 0);
}

//! A GPU object that breaks the device's limits comes back as an error naming what was being
//! built, not as wgpu's default panic (the way a 250 MiB logits binding used to end the
//! process on devices with a 128 MiB binding limit).

use tritium::gpu::kernels::Kernel;
use tritium::gpu::{DeviceOptions, GpuContext, GpuError};

#[test]
fn a_binding_over_the_limit_is_an_error() {
    let ctx = pollster::block_on(GpuContext::new(&DeviceOptions::default())).expect("adapter");
    let limit = ctx.limits.max_storage_buffer_binding_size;
    let size = limit + 1024;
    if size > ctx.limits.max_buffer_size {
        eprintln!("this device's buffers cannot exceed its binding limit: nothing to check");
        return;
    }
    let pipeline = ctx.kernel(Kernel::Copy, None).expect("copy kernel");
    let small = ctx.storage("small", 1024).expect("buffer");
    let big = ctx.storage("big", size).expect("buffer");
    let got = ctx.validated(
        || "copy into a buffer over the binding limit".to_string(),
        || Ok(ctx.bind(&pipeline, &[&small, &big])),
    );
    match got {
        Err(GpuError::Validation(m)) => {
            assert!(
                m.starts_with("copy into a buffer over the binding limit: "),
                "{m}"
            );
        }
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a {size}-byte binding over the {limit}-byte limit was accepted"),
    }
    // Within the limit the same call succeeds.
    let fits = ctx.storage("fits", 4096).expect("buffer");
    ctx.validated(
        || "copy".to_string(),
        || Ok(ctx.bind(&pipeline, &[&small, &fits])),
    )
    .expect("a binding within the limit");
}

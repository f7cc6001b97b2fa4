//! The GPU kernel self-tests (crates/gpu/src/selftest) natively: every check on the device with all
//! its features (f16, subgroups) and again with neither (the f32 path every browser has).
//! In CI the device is lavapipe (Vulkan on the CPU).

use std::sync::OnceLock;

use tritium::gpu::{selftest, DeviceOptions, GpuContext};

fn make(options: DeviceOptions) -> GpuContext {
    pollster::block_on(GpuContext::new(&options)).unwrap_or_else(|e| {
        panic!(
            "no GPU adapter for the kernel tests: {e}. Natively they run on lavapipe: install \
             mesa-vulkan-drivers and set VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json \
             (scripts/test.sh does)"
        )
    })
}

fn full() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(|| make(DeviceOptions::default()))
}

fn plain() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(|| {
        make(DeviceOptions {
            allow_f16: false,
            allow_subgroups: false,
            ..DeviceOptions::default()
        })
    })
}

/// Run every check whose name starts with `family/` on both contexts; fail with all failures.
fn run_family(family: &str) {
    let prefix = format!("{family}/");
    let mut failures = Vec::new();
    let mut ran = 0;
    for (label, ctx) in [("full", full()), ("plain", plain())] {
        for r in pollster::block_on(selftest::run(ctx, &prefix)) {
            ran += 1;
            match &r.error {
                None => println!(
                    "{label:5} {:32} ok  {} values, worst error {:.3} of bound",
                    r.name, r.stats.elements, r.stats.worst_ratio
                ),
                Some(e) => failures.push(format!("[{label}] {}: {e}", r.name)),
            }
        }
    }
    assert!(ran > 0, "no checks named {prefix}*");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn device_is_vulkan_metal_or_dx12_never_gl() {
    let a = &full().adapter;
    println!("{a:#?}");
    assert!(
        ["Vulkan", "Metal", "Dx12"].contains(&a.backend.as_str()),
        "{}",
        a.backend
    );
    assert!(plain().variant() == tritium::gpu::Variant::default());
}

#[test]
fn legacy_kernels() {
    run_family("legacy");
}

#[test]
fn ternary_kernels() {
    run_family("ternary");
}

#[test]
fn kquant_kernels() {
    run_family("kquants");
}

#[test]
fn q8_kernels() {
    run_family("q8");
}

#[test]
fn op_kernels() {
    run_family("ops");
}

//! Every `#[repr(C)]` uniform struct has the size and field offsets that naga (wgpu's shader
//! compiler) computes for the WGSL struct of the same name, in every kernel that declares it.

use std::collections::BTreeSet;

use tritium::gpu::kernels::Kernel;
use tritium::gpu::uniforms::registered;
use tritium::gpu::Variant;

#[test]
fn uniform_layouts_match_wgsl() {
    let uniforms = registered();
    let mut seen = BTreeSet::new();
    for kernel in Kernel::all() {
        for variant in [
            Variant::default(),
            Variant {
                f16: true,
                subgroups: true,
            },
        ] {
            let wgsl = kernel.wgsl(variant).unwrap();
            let module = naga::front::wgsl::parse_str(&wgsl)
                .unwrap_or_else(|e| panic!("{}: {}", kernel.label(), e.emit_to_string(&wgsl)));
            let mut layouter = naga::proc::Layouter::default();
            layouter.update(module.to_ctx()).unwrap();
            for (handle, ty) in module.types.iter() {
                let naga::TypeInner::Struct { members, span } = &ty.inner else {
                    continue;
                };
                let Some(name) = ty.name.as_deref() else {
                    continue;
                };
                let Some(u) = uniforms.iter().find(|u| u.name == name) else {
                    continue;
                };
                seen.insert(name.to_string());
                assert_eq!(*span as usize, u.size, "{name} size in {}", kernel.label());
                assert_eq!(layouter[handle].size as usize, u.size, "{name}");
                let wgsl_fields: Vec<(String, usize)> = members
                    .iter()
                    .map(|m| (m.name.clone().unwrap_or_default(), m.offset as usize))
                    .collect();
                let rust_fields: Vec<(String, usize)> =
                    u.fields.iter().map(|(n, o)| (n.to_string(), *o)).collect();
                assert_eq!(
                    wgsl_fields,
                    rust_fields,
                    "{name} fields in {}",
                    kernel.label()
                );
            }
        }
    }
    let all: BTreeSet<String> = uniforms.iter().map(|u| u.name.to_string()).collect();
    assert_eq!(seen, all, "uniform structs no kernel declares");
}

/// Every kernel's WGSL assembles (each file it names is registered exactly once) and parses.
#[test]
fn every_kernel_assembles_and_parses() {
    for kernel in Kernel::all() {
        for variant in [
            Variant::default(),
            Variant {
                f16: true,
                subgroups: true,
            },
        ] {
            let wgsl = kernel.wgsl(variant).unwrap();
            naga::front::wgsl::parse_str(&wgsl)
                .unwrap_or_else(|e| panic!("{}: {}", kernel.label(), e.emit_to_string(&wgsl)));
        }
    }
}

/// Each shader file is registered once, and every `.wgsl` file in `shaders/` is registered.
#[test]
fn shader_files_are_registered_once() {
    let names = tritium::gpu::kernels::registered_files();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(
        unique.len(),
        names.len(),
        "a shader file is registered twice: {names:?}"
    );
    let mut on_disk = BTreeSet::new();
    for dir in ["shaders", "shaders/quant"] {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "wgsl") {
                let rel = p
                    .strip_prefix("shaders")
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                on_disk.insert(rel);
            }
        }
    }
    let registered: BTreeSet<String> = unique.iter().map(|s| s.to_string()).collect();
    assert_eq!(on_disk, registered, "shaders/ and the registry differ");
}

/// The cooperative-matrix kernels run only on devices that have the extension (not lavapipe):
/// here they are at least validated by naga and translated to SPIR-V, as wgpu's Vulkan backend
/// does before the driver sees them.
#[test]
fn cooperative_matrix_kernels_validate_and_translate() {
    let mut n = 0;
    for kernel in Kernel::all() {
        if !matches!(
            kernel,
            Kernel::MatmulF16(_)
                | Kernel::DequantF16(_)
                | Kernel::ScaleF16
                | Kernel::SplitSum(_)
                | Kernel::AttentionCoop(_)
        ) {
            continue;
        }
        let wgsl = kernel
            .wgsl(Variant {
                f16: true,
                subgroups: true,
            })
            .unwrap()
            .replace("override WG: u32 = 64u;", "const WG: u32 = 256u;");
        let wgsl = match kernel {
            Kernel::AttentionCoop(hd) => wgsl.replace(
                "override HD: u32 = 64u;",
                &format!("const HD: u32 = {hd}u;"),
            ),
            Kernel::MatmulF16(add) | Kernel::SplitSum(add) => wgsl.replace(
                "override ACCUMULATE: u32 = 0u;",
                &format!("const ACCUMULATE: u32 = {}u;", u32::from(add)),
            ),
            _ => wgsl,
        };
        let module = naga::front::wgsl::parse_str(&wgsl)
            .unwrap_or_else(|e| panic!("{}: {}", kernel.label(), e.emit_to_string(&wgsl)));
        let info = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{}: {}", kernel.label(), e.emit_to_string(&wgsl)));
        let options = naga::back::spv::Options {
            lang_version: (1, 3),
            ..Default::default()
        };
        naga::back::spv::write_vec(&module, &info, &options, None)
            .unwrap_or_else(|e| panic!("{}: {e}", kernel.label()));
        n += 1;
    }
    assert_eq!(
        n, 16,
        "the product and its sum (each also added to its output), the input scaling, to f16: \
         Q4_K, Q5_K, Q6_K, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, and the prefill attention for \
         heads of 64 and 128"
    );
}

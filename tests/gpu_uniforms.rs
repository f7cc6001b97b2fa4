//! Every `#[repr(C)]` uniform struct has the size and field offsets that naga (wgpu's shader
//! compiler) computes for the WGSL struct of the same name, in every kernel that declares it.

use std::collections::BTreeSet;

use tritium::gpu::kernels::params::registered;
use tritium::gpu::kernels::Kernel;
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

/// The GPU crate's shader folder.
const SHADERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/gpu/shaders");

/// Each shader file is registered once, and every `.wgsl` file in `crates/gpu/shaders/` is registered.
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
    for dir in [SHADERS.to_string(), format!("{SHADERS}/quant")] {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "wgsl") {
                let rel = p
                    .strip_prefix(SHADERS)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                on_disk.insert(rel);
            }
        }
    }
    let registered: BTreeSet<String> = unique.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        on_disk, registered,
        "crates/gpu/shaders/ and the registry differ"
    );
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
        let (module, info) = parse_and_validate(kernel, &wgsl);
        let options = naga::back::spv::Options {
            lang_version: (1, 3),
            ..Default::default()
        };
        naga::back::spv::write_vec(&module, &info, &options, None)
            .unwrap_or_else(|e| panic!("{}: {e}", kernel.label()));
        n += 1;
    }
    // Every dtype the registry says converts to f16 tiles has its conversion.
    let tiles = tritium::quant::dtypes::all()
        .iter()
        .filter(|d| d.kernels().is_some_and(|k| k.f16_tiles))
        .count();
    assert_eq!(
        n,
        7 + tiles,
        "the product and its sum (each also added to its output), the input scaling, the \
         prefill attention for heads of 64 and 128, and the conversion to f16 of every dtype \
         with f16 tiles"
    );
}

/// Every loop of every kernel ends: the pipelines are created without naga's loop bounding
/// (`tritium::gpu::kernels::runtime_checks`), which would otherwise guard against a loop that
/// never ends. A loop here is a `for` whose counter moves by a step from the list below (each
/// positive: a constant, a pipeline constant of at least 1, a subgroup size, or a value the
/// kernel takes as `max(.., 1u)` or a product of such) towards its bound, or halves down to 0, or
/// doubles up to a constant; or one of the `while` loops listed, which double a counter up to a
/// bound. A new form fails here until it is checked and added.
#[test]
fn every_loop_ends() {
    // `counter = counter + step`: steps that are never 0.
    const STEPS: &[&str] = &[
        "1u",
        "4u",
        "32u",
        "WG",             // the workgroup size (pipeline constant, at least 1)
        "4u * WG",        //
        "lanes",          // the subgroup size
        "4u * lanes",     //
        "TPR",            // threads per row (pipeline constant, at least 1)
        "2u * TPR",       //
        "TILE",           // clamp(4u * WG, 64u, 256u)
        "X_CHUNK",        // const 4096u
        "x_chunk",        // 4u * X_VEC4S, X_VEC4S = max(2u * WG, 64u)
        "groups",         // attention_combine: max(WG / d4, 1u)
        "slices",         // matvec_legacy_q8: max(WG / ROW_LANES, 1u)
        "SLICES",         // matvec_legacy: max(WG / ROW_LANES, 1u)
        "stride",         // copy: nwg.x * WG
        "2u * per_group", // WG / groups, groups doubled only while 2 groups * units <= WG
    ];
    // The `while` loops, whose one statement doubles the counter (`groups = groups * 2u`, from
    // 1) while it is under the constant ROWS.
    const WHILES: &[&str] = &[
        "groups < ROWS && 2u * groups * units <= WG",
        "groups < ROWS && 2u * groups * steps <= WG",
    ];
    let mut fors = 0;
    for name in tritium::gpu::kernels::registered_files() {
        let text = std::fs::read_to_string(format!("{SHADERS}/{name}")).unwrap();
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        let words = |kw: &str| {
            code.match_indices(kw)
                .filter(|(i, _)| {
                    let before = code[..*i].chars().last();
                    let after = code[i + kw.len()..].chars().next();
                    !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                        && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
                })
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        };
        assert!(
            words("loop").is_empty(),
            "{name}: a `loop` statement (its end cannot be checked here)"
        );
        // The text between the parentheses that open at `from`.
        let header = |from: usize| {
            let open = from + code[from..].find('(').unwrap();
            let mut depth = 0;
            for (j, c) in code[open..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            return code[open + 1..open + j].to_string();
                        }
                    }
                    _ => {}
                }
            }
            panic!("{name}: unbalanced parentheses");
        };
        for at in words("while") {
            let cond = header(at);
            let rest = &code[at..];
            let body = rest[rest.find('{').unwrap() + 1..rest.find('}').unwrap()].trim();
            assert!(
                WHILES.contains(&cond.trim()) && body == "groups = groups * 2u;",
                "{name}: `while ({cond}) {{ {body} }}` is not a loop checked to end"
            );
        }
        for at in words("for") {
            let h = header(at);
            let parts: Vec<&str> = h.split(';').map(str::trim).collect();
            assert_eq!(parts.len(), 3, "{name}: `for ({h})`");
            let (cond, update) = (parts[1], parts[2]);
            let (var, rhs) = update
                .split_once(" = ")
                .unwrap_or_else(|| panic!("{name}: `for ({h})`: update `{update}`"));
            let ok = if let Some(step) = rhs.strip_prefix(&format!("{var} + ")) {
                // The counter (or a constant multiple of it, or it plus a term) under a
                // bound: bounds are counts of buffer elements or constants, far under 2^32, so
                // the counter cannot wrap past them.
                let lhs = cond.split(['<', '>']).next().unwrap().trim();
                let lhs = lhs.split_once(" * ").map_or(lhs, |(k, v)| {
                    if k.trim_end_matches('u').parse::<u32>().is_ok() {
                        v
                    } else {
                        lhs
                    }
                });
                STEPS.contains(&step)
                    && (lhs == var || lhs.starts_with(&format!("{var} + ")))
                    && (cond.contains(" < ") || cond.contains(" <= "))
            } else if rhs == format!("{var} >> 1u") {
                cond == format!("{var} > 0u")
            } else if rhs == format!("{var} << 1u") {
                // Doubling up to a constant well under 2^31.
                cond == format!("{var} <= SORT_N") && code.contains("const SORT_N: u32 = 1024u;")
            } else {
                false
            };
            assert!(ok, "{name}: `for ({h})` is not a loop checked to end");
            fors += 1;
        }
    }
    assert!(fors > 100, "only {fors} loops found: the scan is broken");
}

/// Every integer division and remainder of every kernel variant, which are compiled without
/// naga's division guards (`tritium::gpu::kernels::runtime_checks`), has a divisor that cannot
/// be 0: a non-zero literal or constant (pipeline constants replaced by the values the host
/// passes, then folded by naga), or `max(x, c)` with such a c. A division by 0 is then
/// impossible whatever the uniforms hold; a new divisor of another form fails here until it is
/// written so.
#[test]
fn unguarded_divisors_are_nonzero() {
    use naga::{BinaryOperator, Expression, Literal, MathFunction};
    let mut kernels = 0;
    let mut divisions = 0;
    let mut bad = BTreeSet::new();
    let variants = [(true, true), (true, false), (false, true), (false, false)];
    for (kernel, (f16, subgroups)) in Kernel::all()
        .into_iter()
        .flat_map(|k| variants.map(|v| (k, v)))
    {
        let Some(source) = kernel.source() else {
            continue;
        };
        let Ok(mut wgsl) = kernel.wgsl(Variant { f16, subgroups }) else {
            continue;
        };
        // Each pipeline constant as the host passes it (natively), the workgroup size too.
        let constants = kernel
            .constants()
            .into_iter()
            .chain([("WG", f64::from(source.default_workgroup_size))]);
        for (name, value) in constants {
            let decl = format!("override {name}: u32 = ");
            let at = wgsl
                .find(&decl)
                .unwrap_or_else(|| panic!("{}: no override {name}", kernel.label()));
            let end = at + wgsl[at..].find(';').unwrap();
            wgsl.replace_range(at..=end, &format!("const {name}: u32 = {value}u;"));
        }
        // The others keep their defaults, which is what the pipeline gets.
        let wgsl = wgsl
            .lines()
            .map(|l| match l.strip_prefix("override ") {
                Some(rest) => format!("const {rest}"),
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        let (module, info) = parse_and_validate(kernel, &wgsl);
        let literal_nonzero = |l: &Literal| match *l {
            Literal::U32(v) => v != 0,
            Literal::I32(v) => v != 0,
            Literal::U64(v) => v != 0,
            Literal::I64(v) => v != 0,
            _ => false,
        };
        // A global (constant) expression that is a non-zero integer.
        let global_nonzero = |h: naga::Handle<Expression>| match module.global_expressions[h] {
            Expression::Literal(ref l) => literal_nonzero(l),
            _ => false,
        };
        let functions = module.functions.iter().map(|(h, f)| (f, &info[h])).chain(
            module
                .entry_points
                .iter()
                .enumerate()
                .map(|(i, e)| (&e.function, info.get_entry_point(i))),
        );
        for (function, finfo) in functions {
            let nonzero = |mut h: naga::Handle<Expression>| loop {
                return match function.expressions[h] {
                    Expression::Literal(ref l) => literal_nonzero(l),
                    Expression::Constant(c) => global_nonzero(module.constants[c].init),
                    Expression::Splat { value, .. } => {
                        h = value;
                        continue;
                    }
                    Expression::Math {
                        fun: MathFunction::Max,
                        arg1: Some(c),
                        ..
                    } => match function.expressions[c] {
                        Expression::Literal(ref l) => literal_nonzero(l),
                        Expression::Constant(k) => global_nonzero(module.constants[k].init),
                        _ => false,
                    },
                    _ => false,
                };
            };
            for (h, e) in function.expressions.iter() {
                let Expression::Binary {
                    op: BinaryOperator::Divide | BinaryOperator::Modulo,
                    right,
                    ..
                } = *e
                else {
                    continue;
                };
                let integer = finfo[h]
                    .ty
                    .inner_with(&module.types)
                    .scalar_kind()
                    .is_some_and(|k| matches!(k, naga::ScalarKind::Uint | naga::ScalarKind::Sint));
                if !integer {
                    continue;
                }
                divisions += 1;
                if !nonzero(right) {
                    let span = function.expressions.get_span(h);
                    let text = span.to_range().map_or("?", |r| &wgsl[r]);
                    bad.insert(format!(
                        "{} (f16 {f16}, subgroups {subgroups}): `{text}`",
                        kernel.label()
                    ));
                }
            }
        }
        kernels += 1;
    }
    assert!(
        bad.is_empty(),
        "integer divisions whose divisor may be 0 (write it as a constant or max(.., 1u)):\n{}",
        bad.into_iter().collect::<Vec<_>>().join("\n")
    );
    assert!(kernels >= 100, "only {kernels} kernel variants found");
    assert!(
        divisions > 500,
        "only {divisions} integer divisions found: the scan is broken"
    );
}

/// `wgsl` parsed and validated by naga with every capability, as `kernel`'s.
fn parse_and_validate(kernel: Kernel, wgsl: &str) -> (naga::Module, naga::valid::ModuleInfo) {
    let module = naga::front::wgsl::parse_str(wgsl)
        .unwrap_or_else(|e| panic!("{}: {}", kernel.label(), e.emit_to_string(wgsl)));
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{}: {}", kernel.label(), e.emit_to_string(wgsl)));
    (module, info)
}

/// Every kernel in every variant goes through naga's pipeline constant processing (what wgpu
/// does when it makes the pipeline natively: the module compacted to the entry point, each
/// override replaced by the value the host passes or its default) and validates after it.
/// Its failures show only when a pipeline is made on a device otherwise: wgpu 30 rejected the
/// legacy integer-dot matvecs once they called workgroup_sum ("Type depends on Type, which
/// has not been processed yet": the override-sized reduction array's type came before a type
/// that an earlier constant expression uses; with the reduction helpers appended after the
/// kernel's files instead, it passed).
#[test]
fn pipeline_constants_process_for_every_kernel() {
    let variants = [(true, true), (true, false), (false, true), (false, false)];
    let mut processed = 0;
    let mut failures = Vec::new();
    for (kernel, (f16, subgroups)) in Kernel::all()
        .into_iter()
        .flat_map(|k| variants.map(|v| (k, v)))
    {
        let (Some(source), Ok(wgsl)) = (kernel.source(), kernel.wgsl(Variant { f16, subgroups }))
        else {
            continue;
        };
        let (module, info) = parse_and_validate(kernel, &wgsl);
        let mut constants = naga::back::PipelineConstants::default();
        constants.insert("WG".into(), f64::from(source.default_workgroup_size));
        for (name, value) in kernel.constants() {
            constants.insert(name.into(), value);
        }
        let entry = Some((naga::ShaderStage::Compute, source.entry));
        match naga::back::pipeline_constants::process_overrides(&module, &info, entry, &constants) {
            Ok(_) => processed += 1,
            Err(e) => failures.push(format!("{} {:?}: {e:?}", kernel.label(), (f16, subgroups))),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        processed >= 100,
        "only {processed} kernel variants processed"
    );
}

/// The browser's build carries the shader files without their comments (crates/gpu/build.rs):
/// every kernel in every variant assembled from those files is the same program as from the
/// full files — the same SPIR-V once naga has applied the pipeline constants, as wgpu does
/// natively.
#[test]
fn comment_free_shaders_compile_the_same() {
    use tritium::gpu::kernels::wgsl_comments::strip_comments;
    let stripped: std::collections::HashMap<&str, String> =
        tritium::gpu::kernels::registered_files()
            .into_iter()
            .map(|name| {
                let text = std::fs::read_to_string(format!("{SHADERS}/{name}")).unwrap();
                (name, strip_comments(&text))
            })
            .collect();
    let spirv = |kernel: Kernel, entry: &str, wgsl: &str| {
        let (module, info) = parse_and_validate(kernel, wgsl);
        let mut constants = naga::back::PipelineConstants::default();
        constants.insert("WG".into(), 64.0);
        for (name, value) in kernel.constants() {
            constants.insert(name.into(), value);
        }
        let entry = Some((naga::ShaderStage::Compute, entry));
        let (module, info) =
            naga::back::pipeline_constants::process_overrides(&module, &info, entry, &constants)
                .ok()?;
        let options = naga::back::spv::Options {
            lang_version: (1, 3),
            ..Default::default()
        };
        naga::back::spv::write_vec(&module, &info, &options, None).ok()
    };
    let variants = [(true, true), (true, false), (false, true), (false, false)];
    let mut compared = 0;
    for (kernel, (f16, subgroups)) in Kernel::all()
        .into_iter()
        .flat_map(|k| variants.map(|v| (k, v)))
    {
        let variant = Variant { f16, subgroups };
        let (Some(source), Ok(full)) = (kernel.source(), kernel.wgsl(variant)) else {
            continue;
        };
        let code = kernel
            .wgsl_with(variant, |name| stripped.get(name).map(String::as_str))
            .unwrap();
        assert!(
            code.len() < full.len(),
            "{}: no comments removed",
            kernel.label()
        );
        assert_eq!(
            code.lines().count(),
            full.lines().count(),
            "{}",
            kernel.label()
        );
        let want = spirv(kernel, source.entry, &full);
        assert_eq!(
            spirv(kernel, source.entry, &code),
            want,
            "{} {:?}",
            kernel.label(),
            (f16, subgroups)
        );
        compared += usize::from(want.is_some());
    }
    assert!(compared >= 100, "only {compared} kernel variants compiled");
}

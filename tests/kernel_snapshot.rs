//! A snapshot of everything the dtype code decides, hashed: the assembled WGSL of every kernel
//! in every variant with its entry point, workgroup size and constants; the planes every
//! weight type is uploaded as; the workgroup counts, workgroup sizes, spans and mappings of the
//! weight kernels over a grid of shapes; which types quantize, dequantize and have integer-dot
//! and residual-add kernels; the CPU's quantized bytes, decoded values and integer dots; the
//! benchmark's random weights; and the self-test names.
//!
//! A refactoring of the dtype code must leave every digest unchanged. Where one differs,
//! `TRITIUM_SNAPSHOT_DUMP=dir` writes each section's lines to `dir/<section>.txt`: dump before
//! and after the change and compare the files.

use sha2::{Digest, Sha256};
use tritium::gpu::kernels::{kquants, ternary, Kernel};
use tritium::gpu::weights::{planes, row_bytes};
use tritium::gpu::{matmul, q8, GpuLimits, Variant};
use tritium::quant::{self, q8dot, GgmlType};

/// One section: its lines, hashed (and dumped where asked).
struct Section {
    name: &'static str,
    lines: Vec<String>,
}

impl Section {
    fn new(name: &'static str) -> Self {
        Section {
            name,
            lines: Vec::new(),
        }
    }

    fn line(&mut self, s: String) {
        self.lines.push(s);
    }

    fn digest(&self) -> String {
        if let Ok(dir) = std::env::var("TRITIUM_SNAPSHOT_DUMP") {
            std::fs::create_dir_all(&dir).unwrap();
            let path = format!("{dir}/{}.txt", self.name);
            std::fs::write(path, self.lines.join("\n")).unwrap();
        }
        let mut h = Sha256::new();
        for l in &self.lines {
            h.update(l.as_bytes());
            h.update(b"\n");
        }
        hex(&h.finalize())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Deterministic bytes (xorshift64*).
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            (s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

/// Deterministic floats in [-2, 2).
fn floats(n: usize, seed: u64) -> Vec<f32> {
    bytes(4 * n, seed)
        .chunks_exact(4)
        .map(|b| {
            let u = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            (u >> 8) as f32 / (1u32 << 22) as f32 - 2.0
        })
        .collect()
}

const VARIANTS: [Variant; 4] = [
    Variant {
        f16: false,
        subgroups: false,
    },
    Variant {
        f16: true,
        subgroups: false,
    },
    Variant {
        f16: false,
        subgroups: true,
    },
    Variant {
        f16: true,
        subgroups: true,
    },
];

/// The weight kernels of `t`, whether or not they exist.
fn weight_kernels(t: GgmlType) -> [Kernel; 9] {
    [
        Kernel::Matvec(t),
        Kernel::MatvecAdd(t),
        Kernel::MatvecQ8(t),
        Kernel::MatvecQ8Add(t),
        Kernel::MatvecQ8Pair(t),
        Kernel::MatvecQ8AddNorm(t),
        Kernel::Matmul(t),
        Kernel::DequantF16(t),
        Kernel::Embedding(t),
    ]
}

fn kernels_section() -> Section {
    let mut s = Section::new("kernels");
    for kernel in Kernel::all() {
        let src = kernel.source().unwrap();
        s.line(format!(
            "{} {:?} entry={} wg={} files={:?} constants={:?}",
            kernel.label(),
            kernel,
            src.entry,
            src.default_workgroup_size,
            src.files,
            kernel.constants()
        ));
        for v in VARIANTS {
            let text = match kernel.wgsl(v) {
                Ok(t) => sha(t.as_bytes()),
                Err(e) => format!("error {e}"),
            };
            s.line(format!("  {v:?} {text}"));
        }
    }
    for t in GgmlType::ALL {
        for k in weight_kernels(t) {
            s.line(format!("{k:?} exists={}", k.source().is_some()));
        }
    }
    s
}

fn planes_section() -> Section {
    let mut s = Section::new("planes");
    for t in GgmlType::ALL {
        for cols in [4u32, 5, 20, 24, 32, 100, 128, 256, 288, 512, 768, 1024] {
            s.line(format!(
                "{t} row_bytes({cols})={:?}",
                row_bytes(t, cols.into())
            ));
            let Some(row) = row_bytes(t, cols.into()) else {
                continue;
            };
            for rows in [0u32, 1, 7, 32, 33, 65, 96] {
                let data = bytes(
                    (row * u64::from(rows)) as usize,
                    u64::from(t.id()) << 32 | u64::from(cols) << 8 | u64::from(rows),
                );
                let p = planes(t, &data, rows, cols);
                let lens: Vec<usize> = p.iter().map(|p| p.len()).collect();
                let hashes: Vec<String> = p.iter().map(|p| sha(p)[..16].to_string()).collect();
                s.line(format!("  {rows}x{cols} {lens:?} {hashes:?}"));
            }
        }
    }
    s
}

fn dispatch_section() -> Section {
    let mut s = Section::new("dispatch");
    let mut kernels: Vec<Kernel> = GgmlType::ALL.into_iter().flat_map(weight_kernels).collect();
    kernels.extend([
        Kernel::QuantizeActivations,
        Kernel::QuantizeActivationsQ8,
        Kernel::FakeQuantizeActivations,
        Kernel::RmsNorm,
        Kernel::ScaleF16,
    ]);
    let limits = [
        (1024u32, 49152u32),
        (256, 16384),
        (1024, 16384),
        (256, 32768),
    ]
    .map(|(inv, storage)| GpuLimits {
        max_compute_invocations_per_workgroup: inv,
        max_compute_workgroup_storage_size: storage,
        ..Default::default()
    });
    for k in kernels {
        let mut line = format!("{k:?}:");
        for rows in [1u32, 7, 31, 32, 33, 576, 2048, 2560, 32767, 32768, 128256] {
            line.push_str(&format!(
                " map{rows}={:?}",
                ternary::matvec_mapping(k, rows)
            ));
            for n_tokens in [1u32, 3, 64, 100] {
                for wg in [4u32, 32, 64, 128, 256] {
                    for mapping in [None, Some((16, 2)), Some((8, 4))] {
                        let n = matmul::workgroups(k, rows, n_tokens, wg, mapping);
                        line.push_str(&format!(" {n}"));
                    }
                }
                for storage in [16384u32, 32768, 49152] {
                    let wg = matmul::product_workgroup_size(k, storage, rows, n_tokens);
                    line.push_str(&format!(" p{wg}"));
                }
            }
        }
        for wg in [4u32, 32, 64, 128, 256] {
            line.push_str(&format!(" sw{}", matmul::software_workgroup_size(k, wg)));
        }
        s.line(line);
        let Some(t) = dtype_of(k) else {
            continue;
        };
        let mut line = format!("  {k:?} q8:");
        for bytes in [1u64 << 20, (64 << 20) - 1, 64 << 20, 256 << 20] {
            for cols in [256u32, 576, 2048, 2304, 4096, 8192] {
                line.push_str(&format!(
                    " {:?}/{}",
                    kquants::matvec_q8_span(k, bytes, cols),
                    q8::q8_workgroup_size(k, t, bytes, cols)
                ));
            }
        }
        for cols in [256u32, 576, 2048, 4096, 8192] {
            for l in &limits {
                line.push_str(&format!(" n{}", q8::add_norm_workgroup_size(k, t, cols, l)));
            }
        }
        s.line(line);
    }
    s
}

fn dtype_of(k: Kernel) -> Option<GgmlType> {
    match k {
        Kernel::Matvec(t)
        | Kernel::MatvecAdd(t)
        | Kernel::MatvecQ8(t)
        | Kernel::MatvecQ8Add(t)
        | Kernel::MatvecQ8Pair(t)
        | Kernel::MatvecQ8AddNorm(t)
        | Kernel::Matmul(t)
        | Kernel::DequantF16(t)
        | Kernel::Embedding(t) => Some(t),
        _ => None,
    }
}

fn properties_section() -> Section {
    let mut s = Section::new("properties");
    for t in GgmlType::ALL {
        let cols: Vec<String> = [32u32, 100, 128, 256, 288, 2048]
            .iter()
            .map(|&c| format!("{}", u8::from(q8::has_q8_matvec(t, c))))
            .collect();
        s.line(format!(
            "{t} quantize={} dequantize={} q8_dot={} matvec_add={} q8_matvec={}",
            quant::can_quantize(t),
            t.can_dequantize(),
            q8dot::has_q8_dot(t),
            matmul::MatmulOp::has_matvec_add(t),
            cols.join("")
        ));
    }
    s
}

fn cpu_section() -> Section {
    let mut s = Section::new("cpu");
    for t in GgmlType::ALL {
        let n = 1024usize;
        let values = floats(n, u64::from(t.id()));
        let q = quant::quantize(t, &values);
        s.line(format!(
            "{t} quantize {}",
            match &q {
                Ok(b) => sha(b),
                Err(e) => format!("error {e}"),
            }
        ));
        if let Ok(b) = &q {
            let d = quant::dequantize(t, b, n).unwrap();
            let bits: Vec<u8> = d.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
            s.line(format!("  dequantize(quantize) {}", sha(&bits)));
        }
        // Random bytes with tame scales, decoded and dotted with q8 activations.
        if let Some(data) = tritium::bench::kernels::random_weight_bytes(t, n as u64) {
            s.line(format!("  random {}", sha(&data)));
            match quant::dequantize(t, &data, n) {
                Ok(d) => {
                    let bits: Vec<u8> = d.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
                    s.line(format!("  dequantize(random) {}", sha(&bits)));
                }
                Err(e) => s.line(format!("  dequantize(random) error {e}")),
            }
            if q8dot::has_q8_dot(t) {
                let x = q8dot::quantize_q8(&floats(n, 7)).unwrap();
                let (sum, mag) = q8dot::vec_dot_q8(t, &data, &x).unwrap();
                s.line(format!(
                    "  vec_dot_q8 {:016x} {:016x}",
                    sum.to_bits(),
                    mag.to_bits()
                ));
            }
        }
    }
    s
}

fn selftest_section() -> Section {
    let mut s = Section::new("selftest");
    let mut names: Vec<&str> = tritium::gpu::selftest::all_checks()
        .iter()
        .map(|c| c.name)
        .collect();
    names.sort_unstable();
    for n in names {
        s.line(n.to_string());
    }
    s
}

#[test]
fn dtype_snapshot_is_unchanged() {
    let got = [
        kernels_section(),
        planes_section(),
        dispatch_section(),
        properties_section(),
        cpu_section(),
        selftest_section(),
    ]
    .map(|s| (s.name, s.digest()));
    // Recorded on the code before the dtype registry (d99d281 and this test's commit, which
    // only made the hashed functions public); "kernels" re-recorded when shader comments were
    // reworded (only `//` lines changed), and again when the element-wise driver took a
    // per-column second operand (`cols`, for biases and column scales) and the `mul` kernel
    // was added (2026-12-07); "kernels" and "selftest" again when attention took a window and
    // a soft cap (its parameters and attend loops), the driver a scalar, and the gelu_mul and
    // softcap kernels and their checks were added (2026-12-07, Gemma); "properties" and "cpu"
    // when the CPU learnt to dequantize Q2_K, Q3_K, the IQ types and MXFP4 (their own lines
    // only: every other type's lines compared equal, TRITIUM_SNAPSHOT_DUMP before and after);
    // every section when IQ4_NL got GPU kernels and an integer form (IQ4_NL's lines only, every
    // other line compared equal, dumped before and after: its kernels, planes, dispatch,
    // properties, CPU integer dot and self-test names); every section when IQ4_XS got GPU
    // kernels (as a K-quant) and an integer form (IQ4_XS's lines only, likewise compared).
    let want = [
        (
            "kernels",
            "01fe21319c5e82b240a638b0550bdfc0c91737452954c1107bcc3aa6fe078c2a",
        ),
        (
            "planes",
            "11472ed2cbbefbda5e5a875be4e6b4ab7c31b2773b29520383e871d24844efb4",
        ),
        (
            "dispatch",
            "1b41c3ddb242fd56fc9a73aabce11e5ba4651b1aca3ecb84c16fb9a607464f65",
        ),
        (
            "properties",
            "38b80d5e2e422e7ee46c17073a2481434741d358fb09541584c145e443d50233",
        ),
        (
            "cpu",
            "ae96f59e7a49ab7639bcf6e04b9653782bcfb4822cf00cfce0822c45d23b5158",
        ),
        (
            "selftest",
            "2928aad3dc9489e33e305b061b61f528ad8e6c660e9558a293f673bd5fcde408",
        ),
    ];
    let mut bad = Vec::new();
    for ((name, g), (_, w)) in got.iter().zip(want) {
        if g != w {
            bad.push(format!("{name}: {g} (want {w})"));
        }
    }
    assert!(bad.is_empty(), "snapshot changed:\n{}", bad.join("\n"));
}

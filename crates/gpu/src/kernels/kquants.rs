//! The K-quant family (256-weight super-blocks: Q4_K, Q5_K, Q6_K, IQ4_XS, the dtypes whose
//! [`Family`] is `KQuant`): matvec, matmul and embedding kernels, and the
//! cooperative-matrix prefill every family with f16 tiles shares.
//!
//! Each kernel kind has one skeleton (`matvec_kquants.wgsl`, `matmul_kquants.wgsl`,
//! `embedding_kquants.wgsl`); the format is a decode file prepended to it (its
//! [`Kernels::decode`], such as `quant/q4_k.wgsl`, on top of the shared `quant/kquants.wgsl`).
//! Every format decodes in the same unit, 32 weights whose 4-bit low quants fill one 16-byte
//! `vec4<u32>` (`kq_load`, `KqRaw`), so the skeletons never see a format's layout.
//!
//! Layouts on the GPU (all lossless: the same bits as the file; each format's
//! [`Kernels::planes`] in `crates/core/src/quant/dtypes/`):
//! - Q4_K (144 bytes = 9 x 16) and Q5_K (176 bytes = 11 x 16): blocks are already multiples
//!   of 16 bytes, so a row of blocks is an `array<vec4<u32>>` in which every header, `qh` half
//!   and `qs` quarter is one aligned 16-byte load. A consecutive run of threads reads a
//!   consecutive run of blocks, so the loads are coalesced without a repack; an SoA split
//!   would only add planes (bindings) for the same transactions (reading the headers from a
//!   compact array of 16 bytes per block instead is slower). The 12 scale bytes of each header
//!   are permuted at upload ([`crate::quant::permute_k4_scales`]) so that a pair of
//!   sub-blocks' four 6-bit values are one byte-aligned word: unpacking ggml's order takes
//!   about 36 WGSL operations per unit and row, this one about 26 (counted in the source, not
//!   profiled). Q5_K's 32 `qh` bytes are also permuted ([`crate::quant::permute_q5k_qh`]): in
//!   ggml's order every unit needs two bits of each of 16 bytes, so each unit would load a
//!   whole 16-byte `qh` half (two per step of a sub-block pair: 80 bytes loaded per 64 weights
//!   against Q4_K's 48); one word per unit makes a unit's fifth bits one 4-byte load, with
//!   which one unit per step is Q5_K's faster choice at every size.
//! - Q6_K (210 bytes, not even 4-byte aligned): two planes. Plane 0 is each block's first 208
//!   bytes (`ql`, `qh`, `scales`: 13 x 16, aligned like the others); plane 1 is the f16 `d` of
//!   every block, two per word. Splitting off only the trailing `d` makes everything else
//!   vec4-aligned with the least change; `d` costs one 4-byte load per unit that the 8 units of
//!   a block share through the cache.
//! - IQ4_XS (136 bytes, not a multiple of 16): two planes, each block's `qs` (8 x 16: unit u
//!   is sub-block u, its nibbles in IQ4_NL's order) and its 8-byte header (`d`, `scales_h`,
//!   `scales_l`) as one `vec2<u32>`. The 4-bit codes go through ggml's `kvalues_iq4nl` by
//!   selects into int8 bytes (`quant/iq4_xs.wgsl`), which the integer-dot kernel multiplies
//!   as they are. Its matvec tuning is the default (64 invocations, one unit per step): not
//!   measured.
//!
//! Dispatch: matvec runs [`MATVEC_ROWS`] rows per workgroup: each thread issues the loads of
//! two steps (of one or two units, [`matvec_q8_span`], for the integer-dot kernel) of all its
//! rows before computing, applies each unit's x (loaded once, pre-scaled
//! by powers of two so every code is decoded in place in the mantissa of 2^23: one AND-OR and
//! one subtraction per weight) to every row, and the rows are reduced together by one
//! `workgroup_sum4` (a vec4 `subgroupAdd` and one barrier); short rows split the workgroup into
//! thread groups. Matmul runs tiles of `workgroup_size / 2` rows by [`MATMUL_TOKENS`] tokens,
//! each weight dequantized once per tile into workgroup memory and every thread accumulating
//! an 8-row by 4-token block; embedding one workgroup per token.
//!
//! What bounds the matvecs: the f32-activation kernel (`Kernel::Matvec`, prefill's fallback
//! and the devices without integer dot products) by per-weight issue in the f32 decode rather
//! than by the memory system; the integer-dot kernel decode uses (`Kernel::MatvecQ8`,
//! `matvec_kquants_q8.wgsl`) by the per-unit and per-row header work (timing variants that
//! skip the scale unpacking run faster, and ones that also skip the per-unit header load reach
//! the copy bandwidth). Hence the permuted scale bytes above, and a step of two units (a
//! sub-block pair, one header word unpacked for 64 weights, `SPAN` 2: [`matvec_q8_span`]) on
//! large matrices, where it is used (small ones are latency-bound and faster with one). 32
//! threads gain on the large 2048-column matrices and on large Q6_K
//! ([`matvec_q8_workgroup_size`]); 8 rows per workgroup and a loop with the unit index fixed
//! per thread were slower.

use std::borrow::Cow;

use super::{Kernel, KernelSource, NATIVE};
use crate::quant::{Family, Kernels, Q8Tuning, Span};

/// Rows per matvec workgroup (`ROWS` in matvec_kquants.wgsl).
pub const MATVEC_ROWS: u32 = 4;
/// Tokens per matmul tile (`BN` in matmul_kquants.wgsl); rows per tile are half the
/// workgroup size.
pub const MATMUL_TOKENS: u32 = 64;

/// Matvec: 64 threads (two 32-wide subgroups on NVIDIA, one wave on AMD). A Llama-3.2-1B row
/// of 2048 weights is 64 units, so every thread has one unit of each of the workgroup's 4 rows
/// (8192-wide rows: four), and the 128256-row head is 32064 workgroups. Of 32, 64, 128 and
/// 256, 64 is best or close to it on every Llama-3.2-1B shape (32 wins on the head, 128 on
/// 8192-wide rows).
const MATVEC_WG: u32 = 64;
/// Matmul: 128 threads, a 64 x 64 output tile (its two staged tiles fill the 16 KiB of
/// workgroup memory WebGPU guarantees); see [`matmul_workgroup_size`].
const MATMUL_WG: u32 = 128;
/// The matmul's large tile: 256 threads, 128 x 64 outputs, 24 KiB of workgroup memory.
const MATMUL_WG_LARGE: u32 = 256;

/// Workgroup memory matmul_kquants.wgsl declares at workgroup size `wg`: the staged weights
/// (`4 WG` vec4) and inputs (512 vec4).
fn matmul_workgroup_bytes(wg: u32) -> u32 {
    (4 * wg + 512) * 16
}

/// The largest matmul workgroup size a device with `workgroup_bytes` of workgroup memory runs.
pub fn largest_matmul_workgroup(workgroup_bytes: u32) -> u32 {
    if workgroup_bytes >= matmul_workgroup_bytes(MATMUL_WG_LARGE) {
        MATMUL_WG_LARGE
    } else {
        MATMUL_WG
    }
}

/// The matmul's workgroup size for `rows` x `n_tokens` on a device with `workgroup_bytes` of
/// workgroup memory: the large tile where it fits and still makes at least
/// [`MATMUL_MIN_TILES`] tiles, else 128 (64 x 64 tiles: twice the workgroups for matrices too
/// small to fill the GPU with large tiles).
pub fn matmul_workgroup_size(workgroup_bytes: u32, rows: u32, n_tokens: u32) -> u32 {
    let wg = largest_matmul_workgroup(workgroup_bytes);
    let tiles = rows.div_ceil(wg / 2) * n_tokens.div_ceil(MATMUL_TOKENS);
    if tiles >= MATMUL_MIN_TILES {
        wg
    } else {
        MATMUL_WG
    }
}

/// Weight bytes from which an integer-dot matvec is bandwidth-bound (see
/// [`matvec_q8_workgroup_size`]).
pub const MATVEC_Q8_LARGE_BYTES: u64 = 64 << 20;

/// The integer-dot matvec's workgroup size for a K-quant matrix of `cols` columns and `bytes`
/// of weights, its format tuned as `tuning`: [`MATVEC_WG`], except for large matrices with rows
/// of at most 2048 columns (64 units), and large matrices of any width where the format says so
/// ([`Q8Tuning::narrow_at_any_width`]: Q6_K) (large Q5_K ones too until its
/// fifth bits were one word per unit: [`matvec_q8_span`]), which take 32 so that
/// each thread has two units or steps in flight per row rather than one (the skeleton's paired
/// loads): with 64 threads a row of 64 steps leaves each thread one step, nothing else in
/// flight. Small matrices of the same width are latency-bound and faster with 64 threads, and
/// longer Q4_K rows gain nothing from 32; 128 threads are slower for every format. For Q6_K at
/// 4096 columns 32 threads give up a few points where the format already runs near the copy
/// bandwidth, for a gain where it does not.
pub fn matvec_q8_workgroup_size(tuning: &Q8Tuning, bytes: u64, cols: u32) -> u32 {
    let large = bytes >= MATVEC_Q8_LARGE_BYTES;
    if large && (cols <= 2048 || tuning.narrow_at_any_width) {
        32
    } else {
        MATVEC_WG
    }
}

/// Units per step (`SPAN` in matvec_kquants_q8.wgsl) of a K-quant integer-dot matvec
/// (`kernel`: [`Kernel::MatvecQ8`], [`Kernel::MatvecQ8Add`] or [`Kernel::MatvecQ8Pair`]) over
/// `bytes` of weights with rows of `cols`, as the format's [`Q8Tuning::span`] says; `None` for
/// other kernels and families.
///
/// Two units (a Q4_K/Q5_K sub-block pair, whose scales and mins share one header word,
/// unpacked once for both) on large matrices, as the format's tuning says: the header work
/// is the integer-dot kernel's bound there, and a pair halves it. One unit everywhere else:
/// small matrices are latency-bound and slower with two, and large Q4_K rows of at most 2048
/// columns have not been tried with two. Q5_K takes one unit at every size since its fifth
/// bits are one word per unit ([`crate::quant::permute_q5k_qh`]): one unit on 64 invocations
/// then beats two on 32 or 64.
pub fn matvec_q8_span(kernel: Kernel, bytes: u64, cols: u32) -> Option<u32> {
    let (Kernel::MatvecQ8(_)
    | Kernel::MatvecQ8Add(_)
    | Kernel::MatvecQ8Pair(_)
    | Kernel::MatvecQ8AddNorm(_)) = kernel
    else {
        return None;
    };
    let Some(Family::KQuant(tuning)) = kernel.family() else {
        return None;
    };
    let large = bytes >= MATVEC_Q8_LARGE_BYTES;
    let two = match tuning.span {
        Span::One => false,
        Span::TwoWhenLarge => large,
        Span::TwoWhenLargeAndWiderThan(cols_above) => large && cols > cols_above,
    };
    Some(if two { 2 } else { 1 })
}

/// Invocations per workgroup of the conversions to f16 tiles and the slices' sum.
pub const COOP_WG: u32 = 256;
/// Invocations per workgroup of the cooperative-matrix matmul: 4 subgroups of 32 (the
/// kernel's fixed `@workgroup_size`).
pub const MATMUL_F16_WG: u32 = 128;
/// The subgroup width the cooperative-matrix matmul's work split assumes.
pub const COOP_SUBGROUP: u32 = 32;

/// Tiles below which the matmul takes the smaller tile (see [`matmul_workgroup_size`]).
pub const MATMUL_MIN_TILES: u32 = 256;
const EMBEDDING_WG: u32 = 64;

/// Rows per workgroup of [`Kernel::MatvecQ8AddNorm`]: one q8 block.
pub const ADD_NORM_ROWS: u32 = 32;
/// Invocations per workgroup of the K-quant [`Kernel::MatvecQ8AddNorm`] where nothing else
/// applies (see [`add_norm_workgroup_size`]).
pub const ADD_NORM_WG: u32 = 256;

/// The K-quant [`Kernel::MatvecQ8AddNorm`]'s workgroup size for rows of `cols` on a device
/// that runs up to `max_invocations` a workgroup with `max_storage` bytes of workgroup memory:
/// 8 thread groups of one invocation per unit of a row (`cols / 32`, so each takes one step of
/// each of its 4 rows, as the 64-invocation [`Kernel::MatvecQ8`] does for 2048 columns), a
/// power of two from 256 to 1024 within both limits (the kernel keeps 20 bytes an invocation
/// in workgroup memory: [`add_norm_workgroup_bytes`]). A workgroup owns 32 rows, so there are 8
/// times fewer workgroups than the plain product's: the wider workgroup keeps as many loads in
/// flight (for rows of 2048 and of 8192 columns, 512 invocations are faster than 256).
pub fn add_norm_workgroup_size(cols: u32, max_invocations: u32, max_storage: u32) -> u32 {
    let mut wg = (cols / 4)
        .next_power_of_two()
        .clamp(ADD_NORM_WG, 1024)
        .min(max_invocations.max(ADD_NORM_WG));
    while wg > ADD_NORM_WG && add_norm_workgroup_bytes(wg) > max_storage {
        wg /= 2;
    }
    wg
}

/// Workgroup memory of the K-quant [`Kernel::MatvecQ8AddNorm`] at `wg` invocations: the
/// thread groups' sums (`group_sums`, a vec4 each), the record block's absmax (`q8_amax`, an
/// f32 each) and its four quarters' sums of squares (`norm_sq`); the entry uses no reduction
/// helper.
pub fn add_norm_workgroup_bytes(wg: u32) -> u32 {
    wg * (16 + 4) + 16
}

/// Binding of the second weight's first plane in the pair kernels.
pub const PAIR_PLANES_BINDING: u32 = 8;
/// Binding of the second product's output in the pair kernels.
pub const PAIR_OUTPUT_BINDING: u32 = 7;

/// The text of a function `fn name(` in `wgsl`, up to the `}` that closes it at the start of
/// a line.
fn function_text<'a>(wgsl: &'a str, name: &str) -> Option<&'a str> {
    let start = wgsl.find(&format!("\nfn {name}("))? + 1;
    let end = start + wgsl[start..].find("\n}\n")? + 3;
    Some(&wgsl[start..end])
}

/// Replace whole-word `from` by `to`.
fn replace_word(text: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut rest = text;
    while let Some(i) = rest.find(from) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + from.len()..].chars().next();
        out.push_str(&rest[..i]);
        if before.is_some_and(is_word) || after.is_some_and(is_word) {
            out.push_str(from);
        } else {
            out.push_str(to);
        }
        rest = &rest[i + from.len()..];
    }
    out.push_str(rest);
    out
}

/// The pair kernel's second weight: the format's plane declarations moved to bindings
/// [`PAIR_PLANES_BINDING`].. and renamed `<plane>_b`, and copies of `kq_load` and `kq8_load`
/// (reading them) and `q8_rows` (calling them) as `kq_load_b`, `kq8_load_b` and `q8_rows_b`,
/// appended to `wgsl`.
pub fn pair_wgsl(wgsl: &str) -> Option<String> {
    let mut planes = Vec::new();
    let mut decls = String::new();
    for line in wgsl.lines() {
        let Some(rest) = line.strip_prefix("@group(0) @binding(") else {
            continue;
        };
        let (n, decl) = rest.split_once(')')?;
        let n: u32 = n.parse().ok()?;
        if !(3..PAIR_OUTPUT_BINDING).contains(&n) || !decl.contains("var<storage, read>") {
            continue;
        }
        let name = decl
            .split_once('>')?
            .1
            .trim()
            .split_once(':')?
            .0
            .trim()
            .to_string();
        decls.push_str(&format!(
            "@group(0) @binding({}) var<storage, read> {name}_b:{}\n",
            PAIR_PLANES_BINDING + n - 3,
            decl.split_once(':')?.1
        ));
        planes.push(name);
    }
    if planes.is_empty() {
        return None;
    }
    // The loaders (`kq_load`, and the matvec's `kq8_load`, which may call it) read the
    // second weight's planes under their `_b` names.
    let rename = |text: &str| {
        ["kq_load", "kq8_load"]
            .iter()
            .fold(text.to_string(), |t, f| {
                replace_word(&t, f, &format!("{f}_b"))
            })
    };
    let mut load = String::new();
    for f in ["kq_load", "kq8_load"] {
        load.push_str(&rename(function_text(wgsl, f)?));
        load.push('\n');
    }
    for name in &planes {
        load = replace_word(&load, name, &format!("{name}_b"));
    }
    let rows = replace_word(
        &rename(function_text(wgsl, "q8_rows")?),
        "q8_rows",
        "q8_rows_b",
    );
    Some(format!(
        "{wgsl}\n// ---- the second weight (pair_wgsl)\n{decls}\n{load}\n{rows}"
    ))
}

/// The files of `kernel` for a format of this family: the kind's parameter struct, the shared
/// decode helpers, the format's decode file (and for the integer-dot kernels the activation
/// record helpers and the format's integer dot), then the skeleton.
pub fn source(kernel: Kernel, k: &Kernels) -> Option<KernelSource> {
    const P: &str = "matmul_params.wgsl";
    const K: &str = "quant/kquants.wgsl";
    const Q: &str = "quant/q8.wgsl";
    const S: &str = "matvec_kquants_q8.wgsl";
    let d = k.decode;
    let (files, entry, default_workgroup_size) = match kernel {
        Kernel::Matvec(_) => (vec![P, K, d, "matvec_kquants.wgsl"], "main", MATVEC_WG),
        Kernel::MatvecQ8(_) | Kernel::MatvecQ8Add(_) => {
            (vec![P, K, d, Q, k.decode_q8?, S], "main", MATVEC_WG)
        }
        // Two integer-dot products of one input in one dispatch: the same files and the pair
        // entry (the second weight's plane declarations and loads are appended by
        // [`pair_wgsl`]).
        Kernel::MatvecQ8Pair(_) => (
            vec![P, K, d, Q, k.decode_q8?, S, "matvec_kquants_q8_pair.wgsl"],
            "main_pair",
            MATVEC_WG,
        ),
        // The product added to the residual with the next norm's record: the integer-dot files,
        // the record block arithmetic (scale_for_absmax, q8_quarter.wgsl), the shared epilogue
        // and this family's entry.
        Kernel::MatvecQ8AddNorm(_) => (
            vec![
                P,
                K,
                d,
                Q,
                k.decode_q8?,
                S,
                "absmax_scale.wgsl",
                "q8_quarter.wgsl",
                "q8_add_norm.wgsl",
                "matvec_kquants_q8_add_norm.wgsl",
            ],
            "main_add_norm",
            ADD_NORM_WG,
        ),
        Kernel::Matmul(_) => (vec![P, K, d, "matmul_kquants.wgsl"], "main", MATMUL_WG),
        Kernel::Embedding(_) => (
            vec!["embedding_params.wgsl", K, d, "embedding_kquants.wgsl"],
            "main",
            EMBEDDING_WG,
        ),
        // The conversion to f16 tiles: the tile layout before the skeleton; native only.
        Kernel::DequantF16(_) if NATIVE && k.f16_tiles => (
            vec![P, "f16_tiles.wgsl", K, d, "dequant_f16_kquants.wgsl"],
            "main",
            COOP_WG,
        ),
        _ => return None,
    };
    Some(KernelSource {
        files: Cow::Owned(files),
        entry,
        default_workgroup_size,
    })
}

/// The cooperative-matrix matmul and the conversion of its input to f16 tiles, native only
/// (WebGPU has no cooperative matrices: the browser's package does not carry their files).
pub fn coop_source(kernel: Kernel) -> Option<KernelSource> {
    let (files, default_workgroup_size): (&'static [&'static str], u32) = match kernel {
        Kernel::ScaleF16 if NATIVE => (
            &["matmul_params.wgsl", "f16_tiles.wgsl", "scale_f16.wgsl"],
            COOP_WG,
        ),
        Kernel::MatmulF16(_) if NATIVE => (
            &["matmul_params.wgsl", "matmul_f16_coop.wgsl"],
            MATMUL_F16_WG,
        ),
        Kernel::SplitSum(_) if NATIVE => (&["matmul_params.wgsl", "matmul_f16_sum.wgsl"], COOP_WG),
        _ => return None,
    };
    Some(KernelSource {
        files: Cow::Borrowed(files),
        entry: "main",
        default_workgroup_size,
    })
}

/// Workgroups for `rows` rows and `n_tokens` tokens.
pub fn workgroups(kernel: Kernel, rows: u32, n_tokens: u32, workgroup_size: u32) -> u32 {
    match kernel {
        Kernel::Matvec(_)
        | Kernel::MatvecQ8(_)
        | Kernel::MatvecQ8Add(_)
        | Kernel::MatvecQ8Pair(_) => rows.div_ceil(MATVEC_ROWS),
        Kernel::MatvecQ8AddNorm(_) => rows.div_ceil(ADD_NORM_ROWS),
        Kernel::Matmul(_) => {
            let rows_per_tile = (workgroup_size / 2).max(1);
            rows.div_ceil(rows_per_tile) * n_tokens.div_ceil(MATMUL_TOKENS)
        }
        _ => n_tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::GgmlType;

    #[test]
    fn add_norm_workgroups_fit_the_device() {
        // One invocation per unit of a row, a power of two from 256 to 1024.
        assert_eq!(add_norm_workgroup_size(2048, 1024, 49152), 512);
        assert_eq!(add_norm_workgroup_size(576, 1024, 49152), 256);
        assert_eq!(add_norm_workgroup_size(8192, 1024, 49152), 1024);
        // WebGPU's default limits: 256 invocations, 16 KiB.
        assert_eq!(add_norm_workgroup_size(8192, 256, 16384), 256);
        // 1024 invocations but 16 KiB: 20 KiB would not fit, 512 (10 KiB) does.
        assert_eq!(add_norm_workgroup_size(8192, 1024, 16384), 512);
        let matvec = Kernel::MatvecQ8AddNorm(GgmlType::Q4_K)
            .wgsl(Default::default())
            .unwrap();
        assert!(matvec.contains("var<workgroup> group_sums: array<vec4<f32>, WG>;"));
        assert!(matvec.contains("var<workgroup> q8_amax: array<f32, WG>;"));
        assert!(matvec.contains("var<workgroup> norm_sq: array<f32, 4>;"));
    }

    #[test]
    fn rust_constants_match_the_wgsl() {
        let matvec = Kernel::Matvec(GgmlType::Q4_K)
            .wgsl(Default::default())
            .unwrap();
        assert!(matvec.contains(&format!("const ROWS: u32 = {MATVEC_ROWS}u;")));
        let matmul = Kernel::Matmul(GgmlType::Q6_K)
            .wgsl(Default::default())
            .unwrap();
        assert!(matmul.contains(&format!("const BN: u32 = {MATMUL_TOKENS}u;")));
        assert!(matmul.contains("var<workgroup> ws: array<vec4<f32>, 4u * WG>;"));
        assert!(matmul.contains("var<workgroup> xs: array<vec4<f32>, 512>;"));
        // The small tile fits the 16 KiB every WebGPU device has.
        assert_eq!(matmul_workgroup_bytes(MATMUL_WG), 16 * 1024);
    }
}

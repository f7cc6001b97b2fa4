//! Writes `$OUT_DIR/shaders.rs`: a table of every `.wgsl` file under `shaders/`, by its path
//! there, with its text (`include_str!`), which the kernel registry (`src/kernels/kernel.rs`)
//! searches by name. A new kernel or dtype brings its files and nothing lists them. The
//! browser's build takes each file without its comments (`src/kernels/wgsl_comments.rs`,
//! written to `$OUT_DIR/wgsl/`): the package carries only the code.

use std::path::{Path, PathBuf};
use std::{env, fs};

#[path = "src/kernels/wgsl_comments.rs"]
mod wgsl_comments;

/// The files of the cooperative-matrix prefill: WebGPU has no cooperative matrices, so the
/// browser's build leaves them out (its package is smaller; the kernels that need them do not
/// exist there, `NATIVE` in src/kernels/kernel.rs).
const NATIVE_ONLY: &[&str] = &[
    "attention_coop.wgsl",
    "dequant_f16_kquants.wgsl",
    "dequant_f16_legacy.wgsl",
    "f16_tiles.wgsl",
    "matmul_f16_coop.wgsl",
    "matmul_f16_sum.wgsl",
    "scale_f16.wgsl",
];

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets the manifest dir"));
    let shaders = root.join("shaders");
    println!("cargo:rerun-if-changed=shaders");
    println!("cargo:rerun-if-changed=src/kernels/wgsl_comments.rs");
    for name in NATIVE_ONLY {
        assert!(shaders.join(name).is_file(), "build.rs: no shaders/{name}");
    }
    let wasm = env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "wasm32");
    let mut files = Vec::new();
    collect(&shaders, &mut files);
    let mut names: Vec<(String, PathBuf)> = files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&shaders).expect("under shaders/");
            let name: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            (name.join("/"), path)
        })
        .filter(|(name, _)| !(wasm && NATIVE_ONLY.contains(&name.as_str())))
        .collect();
    names.sort();
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut out = String::from("static SHADERS: &[(&str, &str)] = &[\n");
    for (name, path) in &names {
        let path = if wasm {
            let text = fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("build.rs: {}: {e}", path.display()));
            let code = wgsl_comments::strip_comments(&text);
            assert!(
                !code.contains("/*") && !code.contains("*/"),
                "build.rs: shaders/{name} has a block comment; use // comments"
            );
            let stripped = out_dir.join("wgsl").join(name);
            fs::create_dir_all(stripped.parent().expect("a file under wgsl/"))
                .expect("create $OUT_DIR/wgsl/");
            fs::write(&stripped, code).expect("write a comment-free shader file");
            stripped
        } else {
            path.clone()
        };
        out.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            path.display().to_string()
        ));
    }
    out.push_str("];\n");
    fs::write(out_dir.join("shaders.rs"), out).expect("write shaders.rs");
}

/// Every `.wgsl` file under `dir`, recursively.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "wgsl") {
            out.push(path);
        }
    }
}

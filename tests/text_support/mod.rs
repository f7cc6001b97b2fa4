//! Shared helpers of the tokenizer and chat template tests: where the test data lives, and what
//! to do when it is missing (fail under CI=true, print a skip reason elsewhere).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use tritium::formats::gguf::GgufFile;
use tritium::storage::FileSource;
use tritium::text::Tokenizer;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// `path` if it exists. When it does not: a failure under CI=true; elsewhere `None` after
/// printing why the test skips.
pub fn require(path: &Path, fetch_with: &str) -> Option<PathBuf> {
    if path.exists() {
        return Some(path.to_path_buf());
    }
    let msg = format!("{} is missing: run {fetch_with}", path.display());
    assert!(!in_ci(), "{msg}");
    eprintln!("SKIPPED (local run without test data): {msg}");
    None
}

/// models/testdata (llama.cpp's vocab test vectors and the Llama-3 tokenizer.json).
pub fn testdata_dir() -> Option<PathBuf> {
    let dir = root().join("models/testdata");
    // The last file the script writes.
    require(
        &dir.join("llama3-tokenizer.json"),
        "scripts/fetch-test-data.sh",
    )?;
    Some(dir)
}

/// models/SmolLM2-135M-Instruct.Q4_1.gguf.
pub fn smollm2() -> Option<PathBuf> {
    require(
        &root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
        "scripts/fetch-models.sh",
    )
}

pub fn read_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn read_gguf(path: &Path) -> GgufFile {
    let src = FileSource::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    GgufFile::read(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn gguf_tokenizer(path: &Path) -> Tokenizer {
    Tokenizer::from_gguf(&read_gguf(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&read_text(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

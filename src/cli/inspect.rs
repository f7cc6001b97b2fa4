//! `tritium inspect`: what a model file or folder holds.

use std::path::Path;
use std::process::ExitCode;

use super::{human_bytes, model};
use crate::cli::Error;
use crate::formats::ModelDescription;

pub fn run(path: &Path, json: bool) -> Result<ExitCode, Error> {
    let desc = model::open(path)?.describe()?;
    if json {
        let mut v = serde_json::to_value(&desc).map_err(|e| Error::Usage(e.to_string()))?;
        v["total_bytes"] = desc.total_bytes().into();
        v["total_elements"] = desc.total_elements().into();
        v["tensor_count"] = desc.tensors.len().into();
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| Error::Usage(e.to_string()))?
        );
    } else {
        print!("{}", render(&desc));
    }
    Ok(ExitCode::SUCCESS)
}

/// The human-readable report.
fn render(desc: &ModelDescription) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "format:       {}", desc.format);
    let _ = writeln!(
        s,
        "architecture: {}",
        desc.architecture.as_deref().unwrap_or("(not stated)")
    );
    let _ = writeln!(
        s,
        "tokenizer:    {}",
        desc.tokenizer.as_deref().unwrap_or("(none)")
    );
    if !desc.hyper_parameters.is_empty() {
        let _ = writeln!(s, "hyper-parameters:");
        let width = desc
            .hyper_parameters
            .iter()
            .map(|(k, _)| k.len())
            .max()
            .unwrap_or(0);
        for (k, v) in &desc.hyper_parameters {
            let _ = writeln!(s, "  {k:<width$}  {v}");
        }
    }
    let shape = |d: &[u64]| {
        format!(
            "[{}]",
            d.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
        )
    };
    let rows: Vec<[String; 5]> = desc
        .tensors
        .iter()
        .map(|t| {
            [
                t.name.clone(),
                t.dtype.clone(),
                shape(&t.shape),
                t.bytes.to_string(),
                t.location.clone(),
            ]
        })
        .collect();
    let header = ["name", "dtype", "shape", "bytes", "location"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let _ = writeln!(s, "tensors:");
    for r in std::iter::once(&header).chain(&rows) {
        let _ = writeln!(
            s,
            "  {:<w0$}  {:<w1$}  {:<w2$}  {:>w3$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        );
    }
    let _ = writeln!(
        s,
        "total: {} tensors, {} elements, {} ({} bytes)",
        desc.tensors.len(),
        desc.total_elements(),
        human_bytes(desc.total_bytes()),
        desc.total_bytes()
    );
    s
}

//! `tritium validate` (structure of an RDRR or Trellis folder) and `tritium verify` (every check
//! of `validate`, then the hashes of an RDRR folder).

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use super::model::{self, OpenModel};
use crate::cli::Error;
use crate::formats::{rdrr, trellis};

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_json(v: &serde_json::Value) -> Result<(), Error> {
    println!(
        "{}",
        serde_json::to_string_pretty(v).map_err(|e| Error::Usage(e.to_string()))?
    );
    Ok(())
}

pub fn validate(dir: &Path, json: bool) -> Result<ExitCode, Error> {
    match model::open(dir)? {
        OpenModel::Rdrr {
            files, manifest, ..
        } => {
            let report = rdrr::validate(&manifest, &files);
            let problems: Vec<String> = report.issues.iter().map(ToString::to_string).collect();
            if json {
                print_json(&json!({
                    "format": manifest.format_name(),
                    "valid": report.is_valid(),
                    "errors": problems,
                    "warnings": [],
                }))?;
            } else {
                for p in &problems {
                    println!("error: {p}");
                }
                println!(
                    "{}: {} ({} tensors, {} shards, {} problems)",
                    dir.display(),
                    if report.is_valid() { "valid" } else { "INVALID" },
                    manifest.tensors.len(),
                    manifest.shards.len(),
                    problems.len()
                );
            }
            Ok(exit(report.is_valid()))
        }
        OpenModel::Trellis(files, _) => {
            let report = trellis::validate(&files);
            if json {
                let v = serde_json::to_value(&report).map_err(|e| Error::Usage(e.to_string()))?;
                print_json(&json!({ "valid": report.is_valid(), "report": v }))?;
            } else {
                for issue in &report.issues {
                    println!("{issue}");
                }
                println!(
                    "{}: {} ({}, {} quantized weights, {} plain tensors, {} errors, {} warnings)",
                    dir.display(),
                    if report.is_valid() { "valid" } else { "INVALID" },
                    report.format.as_deref().unwrap_or("unrecognized layout"),
                    report.quantized_weights,
                    report.plain_tensors,
                    report.errors().count(),
                    report.warnings().count()
                );
            }
            Ok(exit(report.is_valid()))
        }
        OpenModel::Gguf { .. } => Err(Error::Usage(format!(
            "{}: validate checks RDRR and Trellis folders; a GGUF file is checked whenever it is read \
             (try `tritium inspect`)",
            dir.display()
        ))),
    }
}

pub fn verify(dir: &Path, json: bool) -> Result<ExitCode, Error> {
    let OpenModel::Rdrr {
        files, manifest, ..
    } = model::open(dir)?
    else {
        return Err(Error::Usage(format!(
            "{}: verify needs an RDRR folder (manifest.json)",
            dir.display()
        )));
    };
    let mut last_shown = 0u64;
    let mut progress = |p: &rdrr::VerifyProgress<'_>| {
        if !json && p.done >= last_shown + (256 << 20) {
            last_shown = p.done;
            eprint!(
                "\rhashing {:?} {}: {} / {} MiB",
                p.stage,
                p.item,
                p.done >> 20,
                p.total >> 20
            );
        }
    };
    let report = rdrr::verify(&manifest, &files, Some(&mut progress));
    if !json && last_shown > 0 {
        eprintln!();
    }
    let problems = report.problems();
    if json {
        let shards: Vec<_> = report
            .shards
            .iter()
            .map(|s| {
                json!({
                    "index": s.index, "file": s.file, "algorithm": format!("{:?}", s.algorithm),
                    "expected": s.expected, "actual": s.actual,
                    "ok": s.status == rdrr::VerifyStatus::Ok, "message": s.message(),
                })
            })
            .collect();
        let groups: Vec<_> = report
            .groups
            .iter()
            .map(|g| {
                json!({
                    "id": g.id, "expected": g.expected, "actual": g.actual,
                    "status": format!("{:?}", g.status), "message": g.message(),
                })
            })
            .collect();
        let validation: Vec<String> = report.validation.iter().map(ToString::to_string).collect();
        print_json(&json!({
            "ok": report.is_ok(), "validation": validation, "shards": shards, "groups": groups,
            "bytes_hashed": report.bytes_hashed, "problems": problems,
        }))?;
    } else {
        for p in &problems {
            println!("{p}");
        }
        println!(
            "{}: {} ({} shards, {} bytes hashed, {} groups, {} problems)",
            dir.display(),
            if report.is_ok() { "verified" } else { "FAILED" },
            report.shards.len(),
            report.bytes_hashed,
            report.groups.len(),
            problems.len()
        );
    }
    Ok(exit(report.is_ok()))
}

//! `tritium migrate`: a Trellis v2 folder (`layer_XXXX/` directories) to the v3 layout, written
//! into a new folder. Every file is written through a `.part` file and renamed into place, and
//! the result is read back and validated before the command reports success.

use std::path::Path;
use std::process::ExitCode;

use super::human_bytes;
use crate::cli::Error;
use crate::formats::trellis::{self, MigrateOptions};
use crate::storage::DirFiles;

/// `--shard-size` as clap parses it: `2GB`, `512MB`, `1000000`, ...
pub fn parse_shard_size(text: &str) -> Result<u64, String> {
    trellis::parse_shard_size(text).ok_or_else(|| {
        format!("{text:?} is not a size: give bytes or a number with KB, MB, GB or TB (2GB)")
    })
}

pub fn run(input: &Path, output: &Path, shard_size: u64) -> Result<ExitCode, Error> {
    let io = |path: &Path, e: std::io::Error| Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    if !input.is_dir() {
        return Err(Error::Usage(format!(
            "{}: not a folder (migrate reads a Trellis v2 folder)",
            input.display()
        )));
    }
    let created = match std::fs::read_dir(output) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(Error::Usage(format!(
                    "{}: the output folder already exists and is not empty; give a new or \
                     empty folder",
                    output.display()
                )));
            }
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(output).map_err(|e| io(output, e))?;
            true
        }
        Err(e) => return Err(io(output, e)),
    };

    let options = MigrateOptions { shard_size };
    let mut files = DirFiles::new(output);
    let report = match trellis::migrate_v2_to_v3(&DirFiles::new(input), &mut files, &options) {
        Ok(report) => report,
        Err(e) => {
            // The folder was new or empty: everything in it is ours.
            remove_output(output, created);
            return Err(e.into());
        }
    };

    for w in &report.warnings {
        println!("{w}");
    }
    println!(
        "{} -> {}: {}, {}, {} of tensor data ({} bytes); {} copied unchanged",
        input.display(),
        output.display(),
        count(report.shards.len(), "shard"),
        count(report.tensors, "tensor"),
        human_bytes(report.total_size),
        report.total_size,
        count(report.copied_files.len(), "file")
    );
    Ok(ExitCode::SUCCESS)
}

fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Take away what a failed migration wrote: the whole folder when we created it, else its
/// contents. Best effort; the error that caused it is what the user sees.
fn remove_output(output: &Path, created: bool) {
    if created {
        let _ = std::fs::remove_dir_all(output);
        return;
    }
    if let Ok(entries) = std::fs::read_dir(output) {
        for entry in entries.flatten() {
            let path = entry.path();
            let _ = match entry.file_type() {
                Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
                _ => std::fs::remove_file(&path),
            };
        }
    }
}

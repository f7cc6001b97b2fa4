//! The native command-line interface: `tritium inspect | validate | verify | dump | migrate`.
//! Thin: every command parses arguments, calls the library, and prints.

mod dump;
mod inspect;
mod migrate;
mod model;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tritium",
    version,
    about = "Quantized LLMs on the GPU, natively and in the browser"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show a model's architecture, hyper-parameters, tokenizer and tensors.
    Inspect {
        /// A GGUF file, an RDRR folder or a Trellis folder.
        model: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Check an RDRR or Trellis folder's structure (exit code 0 only when every check passes).
    Validate {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Recompute every shard's and group's hash of an RDRR folder and report mismatches.
    Verify {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Write one tensor, dequantized on the CPU, as raw little-endian f32 in file element order.
    Dump {
        model: PathBuf,
        tensor: String,
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Rewrite a Trellis v2 folder (layer_XXXX/ directories) as v3 in a new or empty folder.
    Migrate {
        /// The Trellis v2 folder.
        input: PathBuf,
        /// Where the v3 folder goes; it must not exist yet or be empty.
        output: PathBuf,
        /// Largest tensor data per shard: bytes, or a number with KB, MB, GB or TB (powers of 1024).
        #[arg(long, default_value = "2GB", value_parser = migrate::parse_shard_size)]
        shard_size: u64,
    },
}

/// Run the CLI and return the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect { model, json } => inspect::run(&model, json),
        Command::Validate { dir, json } => validate::validate(&dir, json),
        Command::Verify { dir, json } => validate::verify(&dir, json),
        Command::Dump {
            model,
            tensor,
            output,
        } => dump::run(&model, &tensor, &output),
        Command::Migrate {
            input,
            output,
            shard_size,
        } => migrate::run(&input, &output, shard_size),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Format a byte count for people.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

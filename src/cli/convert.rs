//! `tritium convert <input> <output>`:
//! - a GGUF file to an RDRR folder (tensors unchanged, `tokenizer.json` extracted and checked,
//!   the GGUF header kept in `gguf_metadata.json`);
//! - an RDRR folder converted from a GGUF back to a GGUF file (`--to gguf`, or an output name
//!   ending in `.gguf`);
//! - a Hugging Face checkpoint folder (`config.json`, safetensors) to RDRR or GGUF with
//!   `--quantize q4_k_m|q8_0|f16|i2_s` (see `convert_hf.rs`).
//!
//! An RDRR folder is written into a hidden folder next to the output and renamed into place
//! only when complete (its `manifest.json` last); on any error the hidden folder is removed, so
//! nothing that looks like a finished model is left behind. A GGUF is written to `<out>.part`
//! and renamed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, ValueEnum};

use super::model::{open, OpenModel};
use crate::cli::Error;
use crate::formats::gguf::GgufFile;
use crate::formats::rdrr::{self, ConvertOptions, ConvertReport, ExtraFileData, HashAlgorithm};
use crate::formats::source::{ByteSource, ModelFiles};
use crate::storage::DirFiles;
use crate::text::{ChatMessage, ChatTemplate, Tokenizer};

/// What to write.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// An RDRR folder.
    Rdrr,
    /// A GGUF file.
    Gguf,
}

/// `tritium convert` arguments.
#[derive(Args, Clone, Debug)]
pub struct ConvertArgs {
    /// A GGUF file, an RDRR folder, or a Hugging Face checkpoint folder (config.json and
    /// model.safetensors or model.safetensors.index.json).
    pub input: PathBuf,
    /// A new or empty folder (RDRR), or a file (GGUF).
    pub output: PathBuf,
    /// The output format; default: GGUF when the output ends in `.gguf` or the input is an
    /// RDRR folder, else RDRR.
    #[arg(long, value_enum)]
    pub to: Option<Target>,
    /// RDRR shard size: bytes, or a number with KB, MB, GB or TB (powers of 1024).
    #[arg(long, default_value = "64MB", value_parser = super::migrate::parse_shard_size)]
    pub shard_size: u64,
    /// Hash shards and groups with BLAKE3 instead of SHA-256.
    #[arg(long)]
    pub blake3: bool,
    /// The manifest's modelId (default: the output folder's name).
    #[arg(long)]
    pub model_id: Option<String>,
    /// Weight type for a Hugging Face checkpoint: q4_k_m, q8_0, f16 or i2_s (BitNet).
    #[arg(long, value_enum)]
    pub quantize: Option<super::convert_hf::Quantize>,
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// `tritium convert`.
pub fn run(args: &ConvertArgs) -> Result<ExitCode, Error> {
    let input = &args.input;
    let hf = input.is_dir() && input.join("config.json").is_file();
    if hf {
        return super::convert_hf::run(args);
    }
    if args.quantize.is_some() {
        return Err(Error::Usage(
            "--quantize applies to Hugging Face checkpoints; GGUF and RDRR tensors are converted \
             unchanged (use `tritium quantize` to requantize a GGUF)"
                .into(),
        ));
    }
    let started = Instant::now();
    match open(input)? {
        OpenModel::Gguf {
            files,
            file,
            header: gguf,
        } => {
            if target(args, Target::Rdrr) == Target::Gguf {
                return Err(Error::Usage(format!(
                    "{}: already a GGUF file",
                    input.display()
                )));
            }
            let opts = convert_options(args);
            let report = gguf_to_rdrr(
                &*ModelFiles::open(&files, &file)?,
                &gguf,
                &args.output,
                &opts,
            )?;
            print_report(&report, &args.output, started);
        }
        OpenModel::Rdrr {
            files, manifest, ..
        } => {
            if target(args, Target::Gguf) == Target::Rdrr {
                return Err(Error::Usage(format!(
                    "{}: already an RDRR folder",
                    input.display()
                )));
            }
            rdrr_to_gguf(&manifest, &files, &args.output).map_err(|e| e.at(input))?;
            let len = std::fs::metadata(&args.output).map_or(0, |m| m.len());
            eprintln!(
                "wrote {} ({}) in {:.1} s",
                args.output.display(),
                super::human_bytes(len),
                started.elapsed().as_secs_f64()
            );
        }
        OpenModel::Trellis { .. } => {
            return Err(Error::Usage(format!(
                "{}: converting Trellis folders is not supported (`tritium migrate` rewrites v2 \
                 as v3)",
                input.display()
            )))
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The output format: `--to`, else GGUF for a `.gguf` output name, else `default`.
pub(crate) fn target(args: &ConvertArgs, default: Target) -> Target {
    match args.to {
        Some(t) => t,
        None if args
            .output
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf")) =>
        {
            Target::Gguf
        }
        None => default,
    }
}

/// Conversion options from the flags.
pub(crate) fn convert_options(args: &ConvertArgs) -> ConvertOptions {
    let model_id = args.model_id.clone().unwrap_or_else(|| {
        args.output
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into())
    });
    ConvertOptions {
        shard_size: args.shard_size,
        hash_algorithm: if args.blake3 {
            HashAlgorithm::Blake3
        } else {
            HashAlgorithm::Sha256
        },
        ..ConvertOptions::new(model_id)
    }
}

pub(crate) fn print_report(report: &ConvertReport, output: &Path, started: Instant) {
    let m = &report.manifest;
    let spanning = m.tensors.values().filter(|t| t.is_multi_shard()).count();
    eprintln!(
        "wrote {}: {} tensors ({}) in {} shards ({}), {} groups, {} tensors span shards, \
         {} in {:.1} s",
        output.display(),
        report.tensor_count,
        super::human_bytes(report.tensor_bytes),
        m.shards.len(),
        super::human_bytes(report.shard_bytes),
        m.groups.len(),
        spanning,
        m.quantization.as_deref().unwrap_or("?"),
        started.elapsed().as_secs_f64()
    );
}

/// Texts the extracted `tokenizer.json` must encode exactly as the GGUF's own tokenizer.
const TOKENIZER_PROBES: [&str; 8] = [
    "Hello world",
    "The capital of France is",
    "  leading spaces,\ttabs\nand\n\nnewlines  ",
    "numbers 1234567 3.14159 and 2025-01-01",
    "unicode: héllo wörld — ñ 日本語 🎉 Ω≈ç√",
    "code: fn main() { println!(\"hi\"); } // it's they're we've",
    "MiXeD CaSe WORDS and_snake_case and camelCase",
    "",
];

/// `tokenizer.json` for a GGUF's tokenizer, checked to re-load and give the same ids as the
/// GGUF tokenizer on fixed texts and on a rendered chat (special tokens included). `None`, with
/// a warning, when the GGUF has no tokenizer or the check fails (the RDRR folder still carries
/// the GGUF vocabulary in its metadata, which is what `run` uses).
pub(crate) fn extract_tokenizer(file: &GgufFile) -> Option<Vec<u8>> {
    let tok = match Tokenizer::from_gguf(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("note: no tokenizer.json written: the GGUF's tokenizer does not load ({e})");
            return None;
        }
    };
    match tokenizer_json(file, &tok) {
        Ok(bytes) => Some(bytes),
        Err(why) => {
            eprintln!("warning: no tokenizer.json written: {why}");
            None
        }
    }
}

fn tokenizer_json(file: &GgufFile, tok: &Tokenizer) -> Result<Vec<u8>, String> {
    let json = with_special_tokens_added(tok)?
        .to_string(false)
        .map_err(|e| format!("the tokenizer does not serialize: {e}"))?;
    let back = Tokenizer::from_json(json.as_bytes())
        .map_err(|e| format!("the serialized tokenizer does not re-load: {e}"))?;
    let mut probes: Vec<String> = TOKENIZER_PROBES.iter().map(|s| s.to_string()).collect();
    if let Ok(template) = ChatTemplate::from_gguf(file) {
        let chat = [
            ChatMessage::new("system", "You are helpful."),
            ChatMessage::new("user", "What is 2+2?"),
            ChatMessage::new("assistant", "4."),
            ChatMessage::new("user", "Thanks!"),
        ];
        if let Ok(text) = template.render(&chat, true) {
            probes.push(text);
        }
    }
    for text in &probes {
        for add_special in [false, true] {
            // With add_special, BOS comes from tokenizer.json's post-processor.
            let want = tok.encode(text, add_special).map_err(|e| e.to_string())?;
            let got = back.encode(text, add_special).map_err(|e| e.to_string())?;
            if want != got {
                return Err(format!(
                    "re-loaded, it encodes {text:?} (add_special {add_special}) as {got:?}, \
                     not {want:?}"
                ));
            }
        }
    }
    Ok(json.into_bytes())
}

/// The GGUF tokenizer's `tokenizers::Tokenizer` with a post-processor that adds BOS (and EOS)
/// as the GGUF says (`add_bos_token`), which our GGUF tokenizer does itself when encoding, so
/// that the `tokenizer.json` encodes with special tokens exactly as the model expects.
fn with_special_tokens_added(tok: &Tokenizer) -> Result<tokenizers::Tokenizer, String> {
    use tokenizers::processors::template::TemplateProcessing;
    let mut inner = tok.inner().clone();
    let text = |id: u32| {
        tok.id_to_token(id)
            .ok_or_else(|| format!("special token {id} has no text"))
    };
    let bos = match tok.bos().filter(|_| tok.add_bos()) {
        Some(id) => Some((text(id)?, id)),
        None => None,
    };
    let eos = match tok.eos().filter(|_| tok.add_eos()) {
        Some(id) => Some((text(id)?, id)),
        None => None,
    };
    if bos.is_none() && eos.is_none() {
        return Ok(inner);
    }
    let sequence = |piece: &str| -> Vec<String> {
        let mut v: Vec<String> = bos.iter().map(|(t, _)| t.clone()).collect();
        v.push(piece.to_string());
        v.extend(eos.iter().map(|(t, _)| t.clone()));
        v
    };
    let mut pair = sequence("$A");
    pair.extend(sequence("$B:1"));
    let post = TemplateProcessing::builder()
        .try_single(sequence("$A"))
        .and_then(|b| b.try_pair(pair))
        .map_err(|e| format!("post-processor: {e}"))?
        .special_tokens(bos.into_iter().chain(eos).collect::<Vec<_>>())
        .build()
        .map_err(|e| format!("post-processor: {e}"))?;
    inner.with_post_processor(Some(post));
    Ok(inner)
}

/// GGUF to an RDRR folder at `output` (new or empty), staged and renamed into place.
pub(crate) fn gguf_to_rdrr(
    src: &dyn ByteSource,
    file: &GgufFile,
    output: &Path,
    opts: &ConvertOptions,
) -> Result<ConvertReport, Error> {
    let staged = StagedFolder::new(output)?;
    let mut extra = Vec::new();
    if let Some(bytes) = extract_tokenizer(file) {
        extra.push(ExtraFileData {
            name: rdrr::TOKENIZER_FILE.to_string(),
            role: "tokenizer".to_string(),
            bytes,
        });
    }
    let mut files = DirFiles::new(staged.path());
    let report = rdrr::convert_gguf(src, file, &mut files, opts, &extra)?;
    staged.commit()?;
    Ok(report)
}

/// An RDRR folder converted from a GGUF, back to the GGUF file `output`.
pub(crate) fn rdrr_to_gguf(
    manifest: &rdrr::Manifest,
    files: &DirFiles,
    output: &Path,
) -> Result<(), Error> {
    write_file_atomically(output, |out| Ok(rdrr::write_gguf(manifest, files, out)?))
}

/// Write `output` through `<output>.part`, synced and renamed when `write` succeeds, removed
/// when it fails.
pub(crate) fn write_file_atomically(
    output: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut part = output.as_os_str().to_owned();
    part.push(".part");
    let part = PathBuf::from(part);
    let result = (|| {
        let f = std::fs::File::create(&part).map_err(|e| io_error(&part, e))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, f);
        write(&mut out)?;
        let f = out
            .into_inner()
            .map_err(|e| io_error(&part, e.into_error()))?;
        f.sync_all().map_err(|e| io_error(&part, e))?;
        std::fs::rename(&part, output).map_err(|e| io_error(output, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    result
}

/// A folder being written under a hidden name next to its target, renamed into place by
/// [`StagedFolder::commit`] and removed when dropped uncommitted. The target must not exist
/// or be an empty folder.
pub(crate) struct StagedFolder {
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl StagedFolder {
    pub(crate) fn new(target: &Path) -> Result<StagedFolder, Error> {
        match std::fs::read_dir(target) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(Error::Usage(format!(
                        "{}: the output folder exists and is not empty; give a new or empty \
                         folder",
                        target.display()
                    )));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(target, e)),
        }
        let name = target
            .file_name()
            .ok_or_else(|| Error::Usage(format!("{}: not a folder name", target.display())))?;
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(|e| io_error(&parent, e))?;
        let tmp = parent.join(format!(
            ".{}.converting-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| io_error(&tmp, e))?;
        }
        std::fs::create_dir(&tmp).map_err(|e| io_error(&tmp, e))?;
        Ok(StagedFolder {
            tmp,
            target: target.to_path_buf(),
            committed: false,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.tmp
    }

    /// Move the finished folder to its target (replacing an empty folder there).
    pub(crate) fn commit(mut self) -> Result<(), Error> {
        if self.target.is_dir() {
            std::fs::remove_dir(&self.target).map_err(|e| io_error(&self.target, e))?;
        }
        std::fs::rename(&self.tmp, &self.target).map_err(|e| io_error(&self.target, e))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for StagedFolder {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staged_folder_appears_only_when_committed() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("model");
        let names = || -> Vec<String> {
            std::fs::read_dir(tmp.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        };
        // Dropped before commit (an error on the way): nothing is left.
        let staged = StagedFolder::new(&target).unwrap();
        std::fs::write(staged.path().join("shard_00000.bin"), b"x").unwrap();
        drop(staged);
        assert!(names().is_empty(), "{:?}", names());
        // Committed: the folder is there under its name, and only it.
        let staged = StagedFolder::new(&target).unwrap();
        std::fs::write(staged.path().join("manifest.json"), b"{}").unwrap();
        staged.commit().unwrap();
        assert_eq!(names(), ["model"]);
        assert!(target.join("manifest.json").is_file());
        // A folder that is not empty is refused.
        assert!(StagedFolder::new(&target).is_err());
    }

    #[test]
    fn a_failed_write_leaves_no_file() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("x.gguf");
        let r = write_file_atomically(&out, |w| {
            w.write_all(b"partial")
                .map_err(|e| io_error(Path::new("x"), e))?;
            Err(Error::Usage("stop".into()))
        });
        assert!(r.is_err());
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }
}

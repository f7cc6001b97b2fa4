//! `tritium convert <hf-checkpoint-dir> <out> --quantize q4_k_m|q8_0|f16|i2_s`: a Hugging Face
//! checkpoint to an RDRR folder (default) or a GGUF file (`--to gguf` or a `.gguf` output).
//!
//! The plan (names, types, Q/K permutation, BitNet's ternary weights) is
//! [`crate::formats::hf`]; here the files are read, the tensors quantized on all cores one at
//! a time, and written. The RDRR folder keeps `tokenizer.json` (the vocabulary),
//! `tokenizer_config.json`, and the GGUF view of the model in `gguf_metadata.json` (with the
//! chat template and BOS/EOS ids), so it runs like any converted model. A GGUF written from a
//! checkpoint has no vocabulary (its tokenizer stays a `tokenizer.json`): it runs from ids.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use clap::ValueEnum;
use rayon::prelude::*;

use super::convert::{
    convert_options, print_report, target, write_file_atomically, ConvertArgs, StagedFolder, Target,
};
use crate::cli::Error;
use crate::formats::gguf::{GgufError, GgufFile, GgufWriter, TensorInfo, DEFAULT_ALIGNMENT};
use crate::formats::hf::{
    self, HfCheckpoint, OutputTensor, Quantization, TokenizerConfig, TokenizerSettings,
};
use crate::formats::rdrr::{self, ExtraFileData, RdrrError};
use crate::quant::{self, GgmlType, QuantError};
use crate::storage::DirFiles;
use crate::text::Tokenizer;

/// The weight type of a converted Hugging Face checkpoint.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Quantize {
    /// llama.cpp's Q4_K_M mix (Q4_K, with Q6_K for some tensors).
    #[value(name = "q4_k_m")]
    Q4KM,
    #[value(name = "q8_0")]
    Q8_0,
    F16,
    /// BitNet's ternary weights (BitNet checkpoints only).
    #[value(name = "i2_s")]
    I2S,
}

impl Quantize {
    fn plan_type(self) -> Quantization {
        match self {
            Quantize::Q4KM => Quantization::Q4KM,
            Quantize::Q8_0 => Quantization::Q8_0,
            Quantize::F16 => Quantization::F16,
            Quantize::I2S => Quantization::I2S,
        }
    }
}

/// Encode `values` as `dtype`, blocks spread over all cores (row by row, so the bytes equal one
/// [`quant::quantize`] call). I2_S has one scale per tensor and is encoded in one piece.
fn quantize_parallel(
    dtype: GgmlType,
    values: &[f32],
    row_len: usize,
) -> Result<Vec<u8>, QuantError> {
    let rows = values.len() / row_len.max(1);
    if !quant::rows_independent(dtype) || rows < 2 || values.len() < (1 << 16) {
        return quant::quantize(dtype, values);
    }
    let rows_per_chunk = (1usize << 16).div_ceil(row_len.max(1)).max(1);
    let parts: Vec<Vec<u8>> = values
        .par_chunks(rows_per_chunk * row_len.max(1))
        .map(|chunk| quant::quantize(dtype, chunk))
        .collect::<Result<_, _>>()?;
    Ok(parts.concat())
}

/// The tokenizer files of the checkpoint and what the GGUF metadata keeps of them.
struct TokenizerFiles {
    extra: Vec<ExtraFileData>,
    settings: TokenizerSettings,
}

fn tokenizer_files(files: &DirFiles, ck: &HfCheckpoint<'_>) -> Result<TokenizerFiles, Error> {
    let mut extra = Vec::new();
    let mut settings = TokenizerSettings {
        bos_id: hf::HfConfig::token_id(&ck.config.bos_token_id),
        eos_id: hf::HfConfig::token_id(&ck.config.eos_token_id),
        chat_template: None,
    };
    let tokenizer = if files.exists_file("tokenizer.json") {
        let bytes = files.read_all("tokenizer.json")?;
        let tok = Tokenizer::from_json(&bytes)
            .map_err(|e| Error::Usage(format!("tokenizer.json does not load: {e}")))?;
        extra.push(ExtraFileData {
            name: rdrr::TOKENIZER_FILE.into(),
            role: "tokenizer".into(),
            bytes,
        });
        Some(tok)
    } else {
        eprintln!("note: the checkpoint has no tokenizer.json: the model will run from ids only");
        None
    };
    if files.exists_file("tokenizer_config.json") {
        let bytes = files.read_all("tokenizer_config.json")?;
        let tc = TokenizerConfig::parse(&bytes)?;
        let id = |text: &Option<String>| {
            let tok = tokenizer.as_ref()?;
            tok.token_to_id(text.as_deref()?)
        };
        settings.bos_id = settings.bos_id.or_else(|| id(&tc.bos_token));
        settings.eos_id = settings.eos_id.or_else(|| id(&tc.eos_token));
        settings.chat_template = tc.chat_template;
        extra.push(ExtraFileData {
            name: "tokenizer_config.json".into(),
            role: "tokenizer-config".into(),
            bytes,
        });
    }
    Ok(TokenizerFiles { extra, settings })
}

/// The GGUF view of the converted model: its metadata and tensor infos.
fn gguf_view(
    metadata: Vec<(String, crate::formats::gguf::Value)>,
    plan: &[OutputTensor],
) -> Result<GgufFile, Error> {
    let mut tensors = Vec::with_capacity(plan.len());
    let mut offset = 0u64;
    for t in plan {
        let n_bytes = t.n_bytes().ok_or_else(|| {
            Error::Usage(format!(
                "{}: shape {:?} is not a whole number of {} blocks",
                t.name, t.shape, t.dtype
            ))
        })?;
        tensors.push(TensorInfo {
            name: t.name.clone(),
            dims: t.shape.iter().rev().copied().collect(),
            dtype: t.dtype,
            offset,
            n_bytes,
        });
        offset = (offset + n_bytes).next_multiple_of(DEFAULT_ALIGNMENT);
    }
    Ok(GgufFile::from_parts(
        3,
        metadata,
        tensors,
        DEFAULT_ALIGNMENT,
    )?)
}

/// Convert a Hugging Face checkpoint folder.
pub fn run(args: &ConvertArgs) -> Result<ExitCode, Error> {
    let started = Instant::now();
    let input = &args.input;
    let q = args
        .quantize
        .ok_or_else(|| {
            Error::Usage(format!(
                "{}: a Hugging Face checkpoint needs --quantize q4_k_m, q8_0, f16 or i2_s",
                input.display()
            ))
        })?
        .plan_type();
    let files = DirFiles::new(input);
    let ck = HfCheckpoint::open(&files).map_err(|e| Error::from(e).at(input))?;
    let tok = tokenizer_files(&files, &ck).map_err(|e| e.at(input))?;
    let plan = hf::plan(&ck, q).map_err(|e| Error::from(e).at(input))?;
    let name = ck
        .config
        .name_or_path
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| input.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".into());
    let metadata = hf::gguf_metadata(&ck.config, ck.arch, q, &name, &tok.settings);
    let view = gguf_view(metadata, &plan)?;
    let bytes_of = |i: usize| -> Result<Vec<u8>, Error> {
        hf::tensor_bytes(&ck, &plan[i], &quantize_parallel).map_err(|e| Error::from(e).at(input))
    };

    match target(args, Target::Rdrr) {
        Target::Rdrr => {
            let staged = StagedFolder::new(&args.output)?;
            let mut out = DirFiles::new(staged.path());
            // The writer's callback speaks RdrrError; keep the error that stopped it.
            let mut failure: Option<Error> = None;
            let mut index = 0usize;
            let mut read = |t: &TensorInfo| -> Result<Vec<u8>, RdrrError> {
                let i = index;
                index += 1;
                bytes_of(i).map_err(|e| {
                    let message = format!("{}: {e}", t.name);
                    failure = Some(e);
                    RdrrError::Writer(message)
                })
            };
            let result = rdrr::convert_gguf_view(
                &view,
                &mut read,
                &mut out,
                &convert_options(args),
                &tok.extra,
            );
            let report = match (result, failure) {
                (Ok(r), _) => r,
                (Err(_), Some(e)) => return Err(e),
                (Err(e), None) => return Err(e.into()),
            };
            staged.commit()?;
            print_report(&report, &args.output, started);
        }
        Target::Gguf => {
            write_gguf(&view, &bytes_of, &args.output)?;
            let len = std::fs::metadata(&args.output).map_or(0, |m| m.len());
            eprintln!(
                "wrote {} ({} tensors, {}) in {:.1} s",
                args.output.display(),
                view.tensors.len(),
                super::human_bytes(len),
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Write the GGUF `view` describes, tensor bytes from `bytes_of(index)`.
fn write_gguf(
    view: &GgufFile,
    bytes_of: &dyn Fn(usize) -> Result<Vec<u8>, Error>,
    output: &Path,
) -> Result<(), Error> {
    let mut w = GgufWriter::new();
    for (k, v) in &view.metadata {
        w.add(k.clone(), v.clone())?;
    }
    for t in &view.tensors {
        w.add_tensor_info(t.name.clone(), t.dtype, &t.shape(), t.n_bytes)?;
    }
    write_file_atomically(output, |out| {
        let mut failure: Option<Error> = None;
        let result = w.write_streaming(out, &mut |i, _, sink| {
            let bytes = bytes_of(i).map_err(|e| {
                let message = e.to_string();
                failure = Some(e);
                GgufError::Io(std::io::Error::other(message))
            })?;
            sink.write_all(&bytes)?;
            Ok(())
        });
        match (result, failure) {
            (Ok(()), _) => Ok(()),
            (Err(_), Some(e)) => Err(e),
            (Err(e), None) => Err(e.into()),
        }
    })
}

/// Small helpers over the checkpoint folder.
trait FolderFiles {
    fn exists_file(&self, name: &str) -> bool;
    fn read_all(&self, name: &str) -> Result<Vec<u8>, Error>;
}

impl FolderFiles for DirFiles {
    fn exists_file(&self, name: &str) -> bool {
        crate::formats::source::ModelFiles::exists(self, name)
    }

    fn read_all(&self, name: &str) -> Result<Vec<u8>, Error> {
        Ok(crate::formats::source::ModelFiles::read_small(
            self,
            name,
            rdrr::MAX_JSON_BYTES,
        )?)
    }
}

//! `tritium quantize <in.gguf> <out.gguf> --type q4_k_m|q6_k|q8_0`: requantize a GGUF model
//! the way `llama-quantize` does without an importance matrix.
//!
//! Each tensor's type comes from [`crate::quant::ftype::plan`] (llama.cpp's rules); tensors are
//! dequantized to f32 and quantized with ggml's reference quantizers ([`crate::quant::quantize`]),
//! or copied when their type does not change. The file is laid out as llama.cpp lays it out:
//! the input's metadata in order without `general.quantization_version` / `general.file_type`
//! (and split keys), those two appended, tensors in llama.cpp's order, every tensor padded to
//! the 32-byte alignment (the last one too). It is written to `<out>.part` and renamed at the end.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use crate::cli::Error;
use crate::formats::gguf::{GgufFile, GgufWriter, Value, DEFAULT_ALIGNMENT};
use crate::quant::ftype::{self, FileType, ModelFacts, TensorIn};
use crate::quant::{self, GgmlType};
use crate::storage::FileSource;

/// `GGML_QNT_VERSION`, stored in `general.quantization_version`.
const GGML_QNT_VERSION: u32 = 2;

/// Keys llama.cpp drops from the copied metadata (it sets the first two again at the end).
const DROPPED_KEYS: [&str; 5] = [
    "general.quantization_version",
    "general.file_type",
    "split.no",
    "split.count",
    "split.tensors.count",
];

/// Parse `--type`.
pub fn parse_type(s: &str) -> Result<FileType, String> {
    FileType::parse(s).ok_or_else(|| {
        let names: Vec<String> = FileType::ALL
            .iter()
            .map(|t| t.name().to_ascii_lowercase())
            .collect();
        format!("unknown type '{s}' (one of {})", names.join(", "))
    })
}

/// What the type choice needs, from the metadata.
fn facts(file: &GgufFile) -> Result<ModelFacts, Error> {
    let arch = file
        .architecture()
        .ok_or_else(|| Error::Usage("no general.architecture".into()))?
        .to_string();
    let first = |key: &str| -> Option<u64> {
        let v = file.get(&format!("{arch}.{key}"))?;
        v.as_u64().or_else(|| match v.as_array()? {
            crate::formats::gguf::Array::U32(a) => a.first().map(|&x| u64::from(x)),
            crate::formats::gguf::Array::I32(a) => a.first().and_then(|&x| u64::try_from(x).ok()),
            _ => None,
        })
    };
    let n_layer = file.require_u64(&format!("{arch}.block_count"))?;
    let n_head = first("attention.head_count").unwrap_or(0);
    let to_u32 = |what: &str, v: u64| {
        u32::try_from(v).map_err(|_| Error::Usage(format!("{arch}.{what} = {v} is too large")))
    };
    Ok(ModelFacts {
        n_layer: to_u32("block_count", n_layer)?,
        n_expert: to_u32("expert_count", first("expert_count").unwrap_or(0))?,
        n_head: to_u32("attention.head_count", n_head)?,
        n_head_kv: to_u32(
            "attention.head_count_kv",
            first("attention.head_count_kv").unwrap_or(n_head),
        )?,
        arch,
    })
}

/// Quantize `values` (whole rows of `row_len`) on all cores; the result is the same as one
/// [`quant::quantize`] call because every block is quantized on its own.
fn quantize_parallel(dtype: GgmlType, values: &[f32], row_len: usize) -> Result<Vec<u8>, Error> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rows = values.len() / row_len.max(1);
    if threads < 2 || rows < 2 * threads || values.len() < (1 << 16) {
        return Ok(quant::quantize(dtype, values)?);
    }
    let per_thread = rows.div_ceil(threads) * row_len;
    let parts: Vec<Result<Vec<u8>, quant::QuantError>> = std::thread::scope(|s| {
        let handles: Vec<_> = values
            .chunks(per_thread)
            .map(|chunk| s.spawn(move || quant::quantize(dtype, chunk)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(quant::QuantError::Invalid("worker panicked".into())))
            })
            .collect()
    });
    let mut out = Vec::new();
    for p in parts {
        out.extend_from_slice(&p?);
    }
    Ok(out)
}

/// Build the output file in memory.
fn build(src: &FileSource, file: &GgufFile, ftype: FileType) -> Result<GgufWriter, Error> {
    if file.alignment != DEFAULT_ALIGNMENT {
        return Err(Error::Usage(format!(
            "general.alignment {} is not supported (llama.cpp writes {DEFAULT_ALIGNMENT})",
            file.alignment
        )));
    }
    let facts = facts(file)?;
    let inputs: Vec<TensorIn<'_>> = file
        .tensors
        .iter()
        .map(|t| TensorIn {
            name: &t.name,
            dims: &t.dims,
            dtype: t.dtype,
        })
        .collect();
    let plan = ftype::plan(ftype, &facts, &inputs)?;

    let mut w = GgufWriter::new();
    for (k, v) in &file.metadata {
        if !DROPPED_KEYS.contains(&k.as_str()) {
            w.add(k.clone(), v.clone())?;
        }
    }
    w.add("general.quantization_version", Value::U32(GGML_QNT_VERSION))?;
    w.add("general.file_type", Value::U32(ftype.id()))?;

    let (mut fell_back, mut bytes_in, mut bytes_out) = (0usize, 0u64, 0u64);
    for p in &plan {
        let info = &file.tensors[p.index];
        let data = file.read_tensor(src, &info.name)?;
        bytes_in += data.len() as u64;
        let out = if p.is_copy() {
            data
        } else {
            let n = usize::try_from(info.n_elements())
                .map_err(|_| Error::Usage(format!("{}: too many elements", info.name)))?;
            let values = quant::dequantize(info.dtype, &data, n)?;
            let row_len = info.dims.first().copied().unwrap_or(1) as usize;
            quantize_parallel(p.target, &values, row_len)?
        };
        if p.fell_back {
            fell_back += 1;
        }
        bytes_out += out.len() as u64;
        w.add_tensor(info.name.clone(), p.target, &info.shape(), out)?;
    }
    eprintln!(
        "{} tensors ({fell_back} with a fallback type): {:.2} MiB -> {:.2} MiB as {ftype}",
        plan.len(),
        bytes_in as f64 / 1048576.0,
        bytes_out as f64 / 1048576.0,
    );
    Ok(w)
}

/// Counts what goes through, so the last tensor can be padded as llama.cpp pads it.
struct Counting<W: Write> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

pub fn run(input: &Path, output: &Path, ftype: FileType) -> Result<ExitCode, Error> {
    let src = FileSource::open(input)?;
    let file = GgufFile::read(&src).map_err(|e| Error::from(e).at(input))?;
    let writer = build(&src, &file, ftype).map_err(|e| e.at(input))?;

    let mut tmp_name = output.as_os_str().to_owned();
    tmp_name.push(".part");
    let tmp = Path::new(&tmp_name);
    let io = |e: std::io::Error| Error::Io {
        path: output.display().to_string(),
        message: e.to_string(),
    };
    let result = (|| -> Result<(), Error> {
        let f = std::fs::File::create(tmp).map_err(io)?;
        let mut out = Counting {
            inner: std::io::BufWriter::new(f),
            written: 0,
        };
        writer.write(&mut out)?;
        let pad = out.written.next_multiple_of(DEFAULT_ALIGNMENT) - out.written;
        out.write_all(&vec![0u8; pad as usize]).map_err(io)?;
        let f = out.inner.into_inner().map_err(|e| io(e.into_error()))?;
        f.sync_all().map_err(io)?;
        std::fs::rename(tmp, output).map_err(io)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(tmp);
        return Err(e);
    }
    eprintln!("wrote {}", output.display());
    Ok(ExitCode::SUCCESS)
}

//! RDRR to GGUF: the reverse of [`super::convert_gguf`]. The header comes from the folder's
//! `gguf_metadata.json` (version, alignment, every key/value in order, the tensor order), the
//! tensors from the shards (joined across shards), one tensor in memory at a time. A GGUF
//! converted to RDRR and back has the same metadata and the same tensor bytes, names, types and
//! shapes; its layout is the standard one (tensors in order, each padded to the alignment).

use std::io::Write;

use super::gguf_metadata::{GgufMetadata, GGUF_METADATA_FILE};
use super::manifest::Manifest;
use super::{check_layout, read_tensor, RdrrError};
use crate::formats::gguf::{GgufError, GgufWriter};
use crate::formats::source::ModelFiles;

/// Write the GGUF an RDRR folder was converted from to `out`. Fails when the folder carries no
/// GGUF metadata (it did not come from a GGUF), and before writing anything when its layout
/// does not match its files ([`check_layout`]).
pub fn write_gguf(
    manifest: &Manifest,
    files: &dyn ModelFiles,
    out: &mut dyn Write,
) -> Result<(), RdrrError> {
    check_layout(manifest, files)?;
    let meta = GgufMetadata::load(manifest, files)?.ok_or_else(|| {
        RdrrError::Writer(format!(
            "the folder has no {GGUF_METADATA_FILE}: only RDRR models converted from a GGUF \
             can be written back as GGUF"
        ))
    })?;
    let header = meta.header(manifest)?;
    let mut w = GgufWriter::new()
        .version(header.version)?
        .data_alignment(header.alignment)?;
    for (key, value) in &header.metadata {
        w.add(key.clone(), value.clone())?;
    }
    for t in &header.tensors {
        w.add_tensor_info(t.name.clone(), t.dtype, &t.shape(), t.n_bytes)?;
    }
    // The writer's callback speaks GgufError; keep the RDRR error that stopped it.
    let mut failure: Option<RdrrError> = None;
    let result = w.write_streaming(out, &mut |_, name, sink| {
        let bytes = read_tensor(manifest, files, name).map_err(|e| {
            let message = e.to_string();
            failure = Some(e);
            GgufError::Io(std::io::Error::other(message))
        })?;
        sink.write_all(&bytes)?;
        Ok(())
    });
    match (result, failure) {
        (Err(_), Some(e)) => Err(e),
        (Err(e), None) => Err(e.into()),
        (Ok(()), _) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::gguf::{GgufFile, Value};
    use crate::formats::rdrr::{convert_gguf, ConvertOptions};
    use crate::formats::source::MemoryFiles;
    use crate::quant::GgmlType;

    #[test]
    fn gguf_to_rdrr_and_back_is_byte_identical() {
        let mut w = GgufWriter::new().alignment(64).unwrap();
        w.add("general.architecture", Value::String("llama".into()))
            .unwrap();
        w.add("x.f", Value::F32(0.1)).unwrap();
        let a: Vec<u8> = (0..6000u32).map(|i| (i * 7) as u8).collect();
        w.add_tensor("b.weight", GgmlType::I8, &[6000], a).unwrap();
        w.add_tensor("a.weight", GgmlType::F32, &[3], vec![9; 12])
            .unwrap();
        let mut original = w.to_bytes().unwrap();
        // gguf-py pads the last tensor too.
        original.resize(original.len().next_multiple_of(64), 0);
        let file = GgufFile::read(&original).unwrap();
        let mut rdrr = MemoryFiles::new();
        let opts = ConvertOptions {
            shard_size: 4096,
            ..ConvertOptions::new("t")
        };
        let m = convert_gguf(&original, &file, &mut rdrr, &opts, &[])
            .unwrap()
            .manifest;
        let mut back = Vec::new();
        write_gguf(&m, &rdrr, &mut back).unwrap();
        assert_eq!(back, original);
        // Without the metadata file there is nothing to write back from.
        rdrr.files.remove(GGUF_METADATA_FILE);
        assert!(write_gguf(&m, &rdrr, &mut Vec::new()).is_err());
    }
}

//! `tritium dump`: one tensor dequantized on the CPU, written as raw little-endian f32.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use super::model;
use crate::cli::Error;

pub fn run(path: &Path, tensor: &str, output: &Path) -> Result<ExitCode, Error> {
    let values = model::open(path)?.dequantize(tensor)?;
    let io = |e: std::io::Error| Error::Io {
        path: output.display().to_string(),
        message: e.to_string(),
    };
    // Write next to the target, then rename: a failed dump never leaves a partial file behind
    // under the requested name.
    let mut tmp_name = output.as_os_str().to_owned();
    tmp_name.push(".part");
    let tmp = Path::new(&tmp_name);
    let result = (|| {
        let mut f = std::io::BufWriter::new(std::fs::File::create(tmp)?);
        for v in &values {
            f.write_all(&v.to_le_bytes())?;
        }
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(tmp, output)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(tmp);
        return Err(io(e));
    }
    eprintln!(
        "{tensor}: {} values written to {}",
        values.len(),
        output.display()
    );
    Ok(ExitCode::SUCCESS)
}

//! GGUF reader: any bytes must give a parsed file or an error, never a panic, a hang or an
//! unbounded allocation. Parsed files are described, and small tensors are read and
//! dequantized, so the quantization reference is exercised on hostile bytes too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tritium_core::formats::gguf::GgufFile;
use tritium_core::quant;

fuzz_target!(|data: &[u8]| {
    let bytes = data.to_vec();
    if let Ok(file) = GgufFile::read(&bytes) {
        let _ = file.describe();
        for t in &file.tensors {
            if t.n_bytes > 1 << 20 {
                continue;
            }
            if let Ok(raw) = file.read_tensor(&bytes, &t.name) {
                if let Ok(n) = usize::try_from(t.n_elements()) {
                    let _ = quant::dequantize(t.dtype, &raw, n);
                }
            }
        }
    }
});

//! Hashing throughput in wasm: the speed fetch+verify+store is measured against.

use wasm_bindgen::prelude::*;

use super::hash::algorithm_named;
use super::to_js;
use crate::formats::rdrr::StreamHasher;

#[derive(serde::Serialize)]
struct HashBench {
    algorithm: &'static str,
    bytes: u64,
    seconds: f64,
    /// Millions of bytes per second.
    mb_per_s: f64,
    hash: String,
}

/// Hash `megabytes` MiB of pseudo-random bytes with `algorithm` (`sha256` or `blake3`), fed in
/// `chunk_kib` KiB pieces as a streamed download feeds it (one warm-up pass over 1 MiB first).
/// Resolves to `{ algorithm, bytes, seconds, mb_per_s, hash }`.
#[wasm_bindgen]
pub fn bench_hash(algorithm: String, megabytes: u32, chunk_kib: u32) -> Result<JsValue, JsValue> {
    let alg = algorithm_named(&algorithm)?;
    let chunk = (chunk_kib.max(1) as usize) << 10;
    // xorshift: cheap, incompressible enough, the same every run.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let buf: Vec<u8> = (0..chunk.max(1 << 20))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut warm = StreamHasher::new(alg);
    warm.update(&buf);
    let _ = warm.finalize_hex();

    let total = (megabytes.max(1) as u64) << 20;
    let mut hasher = StreamHasher::new(alg);
    let start = web_time::Instant::now();
    let mut done = 0u64;
    while done < total {
        let n = (total - done).min(chunk as u64) as usize;
        hasher.update(&buf[..n]);
        done += n as u64;
    }
    let hash = hasher.finalize_hex();
    let seconds = start.elapsed().as_secs_f64();
    to_js(&HashBench {
        algorithm: alg.display_name(),
        bytes: total,
        seconds,
        mb_per_s: total as f64 / seconds.max(1e-9) / 1e6,
        hash,
    })
}

//! `tritium bench gds FILE`: a file read into GPU memory by the streaming reader (cuFile, or
//! direct reads staged through page-locked memory) against the disk's own speed, a direct
//! (`O_DIRECT`) read of the same file into host memory, alternating in the same run (and which
//! of the two goes first in a round).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tritium_native_gds::gds::DeviceReader;
use tritium_native_gds::io::{AlignedBuf, AlignedSpan, ReadPath, WeightFile};
use tritium_native_gds::{Device, GdsError};

use super::error::Error;

/// What `bench gds` measures.
#[derive(Debug, Clone)]
pub struct GdsBenchArgs {
    pub file: PathBuf,
    pub device: usize,
    /// The staged path even where cuFile is available.
    pub staged: bool,
    /// Bytes per read.
    pub chunk_mib: u64,
    pub rounds: usize,
    pub json: bool,
}

fn gds_err(e: GdsError) -> Error {
    Error::Device(e.to_string())
}

/// Seconds to read the whole file into host memory, `chunk` bytes at a time.
fn host_read(f: &WeightFile, buf: &mut AlignedBuf) -> Result<f64, Error> {
    let t = Instant::now();
    let chunk = buf.len() as u64;
    let mut at = 0;
    while at < f.len() {
        let span = AlignedSpan::covering(at, chunk.min(f.len() - at)).expect("inside the file");
        f.read_span(span, buf.as_mut_slice()).map_err(gds_err)?;
        at += chunk;
    }
    Ok(t.elapsed().as_secs_f64())
}

pub fn gds(args: &GdsBenchArgs) -> Result<ExitCode, Error> {
    let f = WeightFile::open(&args.file).map_err(gds_err)?;
    if f.is_empty() {
        return Err(Error::Usage(format!("{} is empty", args.file.display())));
    }
    let chunk = (args.chunk_mib.max(1) << 20) as usize;
    let dev = Device::open(args.device).map_err(gds_err)?;
    let (free, _) = dev.memory().map_err(gds_err)?;
    // The file, or as much of it as half the free memory holds, read again from the start
    // into the same buffer.
    let dst_len = (f.len() as usize).min((free / 2).max(chunk));
    let dst = dev.alloc(dst_len).map_err(gds_err)?;
    let mut reader = DeviceReader::new(&dev, !args.staged, chunk).map_err(gds_err)?;
    let mut host = AlignedBuf::new(chunk).map_err(gds_err)?;
    let (mut host_s, mut dev_s) = (Vec::new(), Vec::new());
    for round in 0..args.rounds.max(1) {
        // Which read comes first alternates: a disk (a virtual one especially) may serve the
        // second read of the same bytes from a cache.
        if round % 2 == 0 {
            host_s.push(host_read(&f, &mut host)?);
        }
        let t = Instant::now();
        let mut at = 0u64;
        while at < f.len() {
            let n = (dst_len as u64).min(f.len() - at);
            reader.read(&dev, &f, at, n, dst.ptr()).map_err(gds_err)?;
            at += n;
        }
        reader.finish().map_err(gds_err)?;
        dev.synchronize().map_err(gds_err)?;
        dev_s.push(t.elapsed().as_secs_f64());
        if round % 2 == 1 {
            host_s.push(host_read(&f, &mut host)?);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let gbs = |s: f64| f.len() as f64 / s / 1e9;
    let (host_gbs, dev_gbs) = (gbs(median(&mut host_s)), gbs(median(&mut dev_s)));
    let direct = f.read_path() == ReadPath::Direct;
    if args.json {
        let v = serde_json::json!({
            "file": args.file.display().to_string(),
            "bytes": f.len(),
            "device": dev.info().name,
            "method": reader.method().to_string(),
            "staged_because": reader.staged_because(),
            "o_direct": direct,
            "chunk_bytes": chunk,
            "rounds": args.rounds.max(1),
            "disk_gb_per_s": host_gbs,
            "device_gb_per_s": dev_gbs,
            "ratio": dev_gbs / host_gbs,
        });
        println!("{v}");
    } else {
        println!(
            "{}: {:.2} GB into {} ({} MiB reads, median of {} rounds)",
            args.file.display(),
            f.len() as f64 / 1e9,
            dev.info().name,
            args.chunk_mib.max(1),
            args.rounds.max(1)
        );
        println!("reader: {}", reader.method());
        if let Some(why) = reader.staged_because() {
            println!("  (staged because: {why})");
        }
        if !direct {
            println!("  (the file system refused O_DIRECT: both reads go through the page cache)");
        }
        println!("disk, direct read into host memory: {host_gbs:.2} GB/s");
        println!(
            "into GPU memory:                     {dev_gbs:.2} GB/s ({:.1}% of the disk)",
            100.0 * dev_gbs / host_gbs
        );
    }
    Ok(ExitCode::SUCCESS)
}

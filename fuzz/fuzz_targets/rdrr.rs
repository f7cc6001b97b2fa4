//! RDRR manifest + tensors.json: the input is `manifest.json`, a NUL, `tensors.json`, a NUL, then
//! bytes split into two shard files. Whatever parses is validated, verified, described and has
//! its tensors read: none of it may panic, hang, or read outside the model folder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tritium_core::formats::rdrr::{self, Manifest};
use tritium_core::formats::source::MemoryFiles;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |&b| b == 0);
    let manifest = parts.next().unwrap_or_default();
    let tensors = parts.next().unwrap_or_default();
    let shards = parts.next().unwrap_or_default();
    let mut files = MemoryFiles::new();
    files.insert("manifest.json", manifest.to_vec());
    files.insert("tensors.json", tensors.to_vec());
    let (a, b) = shards.split_at(shards.len() / 2);
    files.insert("shard_00000.bin", a.to_vec());
    files.insert("shard_00001.bin", b.to_vec());

    let _ = Manifest::parse(manifest, Some(tensors));
    if let Ok(m) = Manifest::load(&files) {
        let _ = rdrr::validate(&m, &files);
        let _ = rdrr::verify(&m, &files, None);
        let _ = rdrr::describe(&m);
        for name in m.tensors.keys() {
            let _ = rdrr::read_tensor(&m, &files, name);
        }
    }
});

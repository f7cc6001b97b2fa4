//! Trellis folders and safetensors headers. The committed fixture models (v3 and v2 layouts) give
//! a valid context; the fuzzer's bytes replace one of their files (the first byte picks which),
//! so every parser along the way (index JSON, quantization config, safetensors header, packed
//! indices) sees hostile input next to otherwise valid files. Validation, description,
//! dequantization and migration must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tritium_core::formats::safetensors;
use tritium_core::formats::source::MemoryFiles;
use tritium_core::formats::trellis;

macro_rules! fixture {
    ($($path:literal),* $(,)?) => {
        &[$(($path, include_bytes!(concat!("../../tests/fixtures/trellis/", $path)) as &[u8])),*]
    };
}

const FILES: &[(&str, &[u8])] = fixture![
    "v3/config.json",
    "v3/model-00001-of-00002.safetensors",
    "v3/model-00002-of-00002.safetensors",
    "v3/model.safetensors.index.json",
    "v3/quantization_config.json",
    "v2/base_weights.safetensors",
    "v2/config.json",
    "v2/layer_0000/index.json",
    "v2/layer_0000/tensor_0000.safetensors",
    "v2/layer_0000/tensor_0001.safetensors",
    "v2/layer_0001/index.json",
    "v2/layer_0001/tensor_0000.safetensors",
    "v2/layer_0001/tensor_0001.safetensors",
    "v2/quantization_index.json",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let _ = safetensors::read_header(&bytes.to_vec());
    let target = FILES[pick as usize % FILES.len()].0;
    let layout = target.split('/').next().unwrap_or("v3");
    let mut files = MemoryFiles::new();
    for (path, content) in FILES {
        if let Some(rest) = path.strip_prefix(&format!("{layout}/")) {
            let content = if *path == target { bytes } else { content };
            files.insert(rest, content.to_vec());
        }
    }
    let _ = trellis::validate(&files);
    if let Ok(desc) = trellis::describe(&files) {
        for t in desc.tensors.iter().take(16) {
            let _ = trellis::dequantize_tensor(&files, &t.name);
        }
    }
    if layout == "v2" {
        let mut out = MemoryFiles::new();
        let _ = trellis::migrate_v2_to_v3(&files, &mut out, &trellis::MigrateOptions::default());
    }
});

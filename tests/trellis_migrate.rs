//! Trellis v2 -> v3 migration: the same decoded weights and a valid v3, shards cut by size,
//! router weights copied, and refusals (a v3 input, a broken v2 input, bad shard sizes).

use serde_json::{json, Value};
use tritium::formats::safetensors::{self as st, Dtype, SafetensorsHeader};
use tritium::formats::source::MemoryFiles;
use tritium::formats::trellis::{
    self, dequantize_tensor, migrate_v2_to_v3, validate, MigrateOptions, TrellisModel,
};

#[path = "fixtures/trellis/common.rs"]
mod common;

use common::*;

#[test]
fn migration_gives_the_same_weights_and_a_valid_v3() {
    let input = v2();
    let mut output = MemoryFiles::new();
    let report = migrate_v2_to_v3(&input, &mut output, &MigrateOptions::default()).unwrap();
    assert_eq!(report.shards, vec!["model-00001-of-00001.safetensors"]);
    assert!(report.warnings.is_empty());
    for f in [
        "config.json",
        "tokenizer_config.json",
        "quantization_index.json",
        "base_weights.safetensors",
    ] {
        assert_eq!(output.files[f], input.files[f], "{f} copied unchanged");
        assert!(report.copied_files.iter().any(|c| c == f));
    }
    let v = validate(&output);
    assert!(v.issues.is_empty(), "{:?}", v.issues);
    assert_eq!(v.format.as_deref(), Some("Trellis v3"));

    // Same decoded weights as the reference v3 fixture, and as the v2 input.
    let reference = v3();
    for name in Expected::load().weights() {
        let want = decoded_f16(&reference, &name);
        assert_eq!(decoded_f16(&output, &name), want, "{name}");
        assert_eq!(decoded_f16(&input, &name), want, "{name} (v2)");
    }
    for name in ["model.embed_tokens.weight", "model.norm.weight"] {
        assert_eq!(
            dequantize_tensor(&output, name).unwrap(),
            dequantize_tensor(&reference, name).unwrap()
        );
    }

    // Index: true total size, dotted names, metadata [out, in].
    let index: Value = serde_json::from_slice(&output.files[INDEX]).unwrap();
    let model = TrellisModel::open(&output).unwrap();
    let total: u64 = model.tensors.iter().map(|t| t.entry.byte_len()).sum();
    assert_eq!(index["metadata"]["total_size"], json!(total));
    assert_eq!(report.total_size, total);
    assert_eq!(index["metadata"]["format"], json!("trellis_v3"));
    let map = index["weight_map"].as_object().unwrap();
    assert_eq!(map[Q_IDX], json!("model-00001-of-00001.safetensors"));
    assert_eq!(
        map["model.layers.1.mlp.gate_proj.indices"],
        json!("model-00001-of-00001.safetensors")
    );
    assert_eq!(
        map["model.embed_tokens.weight"],
        json!("base_weights.safetensors")
    );
    let qc: Value = serde_json::from_slice(&output.files[QCONF]).unwrap();
    assert_eq!(
        qc["tensor_metadata"]["model.layers.1.mlp.up_proj"]["shape"],
        json!([20, 384])
    );
    assert_eq!(qc["tensor_metadata"][Q_PROJ]["bits"], json!(2));
    assert_eq!(qc["quantization_version"], json!("trellis_v3"));
    assert_eq!(qc["layer_allocation"]["0"]["self_attn.q_proj"], json!(2));
}

#[test]
fn migration_shards_by_size_and_copies_router_weights() {
    let mut input = v2();
    let router = vec![Owned {
        name: "model.layers.1.mlp.gate.weight".into(),
        dtype: Dtype::F32,
        shape: vec![4, 128],
        data: st::f32_bytes(&[0.25; 512]),
    }];
    write_file_tensors(&mut input, "router_weights.safetensors", &router);
    let mut output = MemoryFiles::new();
    let options = MigrateOptions { shard_size: 8192 };
    let report = migrate_v2_to_v3(&input, &mut output, &options).unwrap();
    let n = report.shards.len();
    assert!(n >= 3, "{n} shards");
    for (i, s) in report.shards.iter().enumerate() {
        assert_eq!(s, &format!("model-{:05}-of-{n:05}.safetensors", i + 1));
        // Every shard but a single-tensor one stays under the limit.
        let h = SafetensorsHeader::read(&output.files[s]).unwrap();
        let data: u64 = h.tensors.iter().map(|t| t.byte_len()).sum();
        assert!(data <= 8192 || h.tensors.len() == 1, "{s}: {data} bytes");
    }
    assert!(validate(&output).is_valid());
    assert_eq!(
        output.files["router_weights.safetensors"],
        input.files["router_weights.safetensors"]
    );
    assert_eq!(
        dequantize_tensor(&output, "model.layers.1.mlp.gate.weight").unwrap(),
        vec![0.25; 512]
    );
    for name in Expected::load().weights() {
        assert_eq!(
            decoded_f16(&output, &name),
            decoded_f16(&input, &name),
            "{name}"
        );
    }
}

#[test]
fn migration_refuses_v3_and_broken_v2() {
    let mut out = MemoryFiles::new();
    assert!(migrate_v2_to_v3(&v3(), &mut out, &MigrateOptions::default()).is_err());
    let mut broken = v2();
    broken.files.remove("layer_0000/tensor_0000.safetensors");
    let err = migrate_v2_to_v3(&broken, &mut out, &MigrateOptions::default()).unwrap_err();
    assert!(err.to_string().contains("does not validate"), "{err}");
    assert_eq!(trellis::parse_shard_size("2GB"), Some(2 << 30));
    assert_eq!(trellis::parse_shard_size("1.5 MB"), Some(3 << 19));
    assert_eq!(trellis::parse_shard_size("123"), Some(123));
    assert_eq!(trellis::parse_shard_size("0"), None);
    assert_eq!(trellis::parse_shard_size("2 parsecs"), None);
}

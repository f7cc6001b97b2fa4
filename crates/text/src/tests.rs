//! Unit tests of the GGUF tokenizer on tiny hand-made vocabularies: metadata errors, the
//! SentencePiece merge order and byte fallback, special tokens in text and in the stream.
//! (Real vocabularies are tested against llama.cpp in tests/tokenizer_vocab.rs.)

use crate::formats::gguf::{Array, GgufFile, GgufWriter, Value};

use super::{TextError, TextStream, Tokenizer, TokenizerKind};

fn strings(v: &[&str]) -> Value {
    Value::Array(Array::String(v.iter().map(|s| s.to_string()).collect()))
}

fn gguf(kv: Vec<(&str, Value)>) -> GgufFile {
    let mut w = GgufWriter::new();
    for (k, v) in kv {
        w.add(k, v).expect("add");
    }
    let bytes = w.to_bytes().expect("write");
    GgufFile::read(&bytes).expect("read")
}

/// A SentencePiece vocabulary: <unk> <s> </s>, 256 byte pieces, then a few pieces with scores.
fn spm_file(extra: Vec<(&str, Value)>) -> GgufFile {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2i32, 3, 3];
    let mut scores = vec![0f32, 0.0, 0.0];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (piece, score) in [
        ("▁", -1.0),
        ("a", -2.0),
        ("b", -3.0),
        ("c", -4.0),
        ("ab", -6.0),
        ("bc", -5.0),
        ("▁a", -7.0),
        ("abc", -8.0),
    ] {
        tokens.push(piece.into());
        types.push(1);
        scores.push(score);
    }
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let mut kv = vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", strings(&refs)),
        ("tokenizer.ggml.scores", Value::Array(Array::F32(scores))),
        ("tokenizer.ggml.token_type", Value::Array(Array::I32(types))),
    ];
    kv.extend(extra);
    gguf(kv)
}

fn id(t: &Tokenizer, s: &str) -> u32 {
    t.token_to_id(s).expect("in vocabulary")
}

#[test]
fn spm_merges_by_score_with_byte_fallback() {
    let t = Tokenizer::from_gguf(&spm_file(vec![])).expect("builds");
    assert_eq!(t.kind(), TokenizerKind::GgufSpm);
    // Defaults without metadata: <s>=1, </s>=2, BOS added.
    assert_eq!((t.bos(), t.eos()), (Some(1), Some(2)));
    assert!(t.add_bos());
    // "▁abc": bc (-5) merges before ab (-6), which is then impossible; ▁a (-7) before a+bc
    // (abc, -8): ▁a bc. SentencePiece's own rule (highest-scoring pair first) gives the same.
    let got = t.encode("abc", false).expect("encode");
    assert_eq!(got, [id(&t, "▁a"), id(&t, "bc")]);
    // "é" is not a piece: its two UTF-8 bytes, as <0xC3> <0xA9>.
    let got = t.encode("aé", true).expect("encode");
    assert_eq!(got, [1, id(&t, "▁a"), 3 + 0xC3, 3 + 0xA9]);
    assert_eq!(t.decode(&got, true).expect("decode"), "aé");
    assert_eq!(t.decode(&got, false).expect("decode"), "<s> aé");
    // Special tokens in text.
    let got = t.encode("a</s>", false).expect("encode");
    assert_eq!(got, [id(&t, "▁a"), 2]);
    // The stream: spaces are spaces, byte pieces wait for the whole character, and special
    // tokens can be skipped.
    let mut s = TextStream::new(true);
    let out: Vec<String> = [1, id(&t, "▁a"), 3 + 0xC3, 3 + 0xA9, 2]
        .iter()
        .map(|&i| s.push(&t, i).expect("push"))
        .collect();
    assert_eq!(out, ["", " a", "", "é", ""]);
}

#[test]
fn spm_without_space_prefix() {
    let t = Tokenizer::from_gguf(&spm_file(vec![
        ("tokenizer.ggml.add_space_prefix", Value::Bool(false)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
    ]))
    .expect("builds");
    assert!(!t.add_bos());
    assert_eq!(
        t.encode("ab c", true).expect("encode"),
        [id(&t, "ab"), id(&t, "▁"), id(&t, "c")]
    );
}

/// A byte-level BPE vocabulary: the 256 byte characters, "ab", "abc" and two special tokens.
fn bpe_file(pre: Option<&str>, model: &str) -> GgufFile {
    let mut tokens: Vec<String> = Vec::new();
    for b in 0..=255u32 {
        let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = if printable {
            char::from_u32(b)
        } else {
            let n = (0..b)
                .filter(|x| !matches!(x, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF))
                .count() as u32;
            char::from_u32(256 + n)
        };
        tokens.push(c.expect("char").to_string());
    }
    tokens.extend(["ab".into(), "abc".into(), "Ġa".into()]);
    tokens.extend(["<|end|>".into(), "<|user|>".into()]);
    let mut types = vec![1i32; tokens.len()];
    let n = types.len();
    types[n - 2] = 3;
    types[n - 1] = 4;
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let mut kv = vec![
        ("tokenizer.ggml.model", Value::String(model.into())),
        ("tokenizer.ggml.tokens", strings(&refs)),
        ("tokenizer.ggml.token_type", Value::Array(Array::I32(types))),
        ("tokenizer.ggml.merges", strings(&["a b", "ab c", "Ġ a"])),
        ("tokenizer.ggml.eos_token_id", Value::U32(n as u32 - 2)),
    ];
    if let Some(p) = pre {
        kv.push(("tokenizer.ggml.pre", Value::String(p.into())));
    }
    gguf(kv)
}

#[test]
fn byte_level_bpe_with_special_and_user_defined_tokens() {
    let t = Tokenizer::from_gguf(&bpe_file(Some("gpt-2"), "gpt2")).expect("builds");
    // 0..256: the byte characters; then ab, abc, Ġa, <|end|>, <|user|>.
    let (abc, ga, end, user) = (257, 258, 259, 260);
    assert_eq!(t.kind(), TokenizerKind::GgufBpe);
    assert!(!t.add_bos());
    assert_eq!(t.bos(), None);
    // "<|end|>" is found by its text: the end of turn and a stop id.
    assert_eq!(t.eot(), Some(end));
    assert_eq!(t.stop_ids(), [end]);
    let got = t.encode("abc a<|end|><|user|>", false).expect("encode");
    assert_eq!(got, [abc, ga, end, user]);
    assert_eq!(t.decode(&got, true).expect("decode"), "abc a<|user|>");
    assert_eq!(
        t.decode(&got, false).expect("decode"),
        "abc a<|end|><|user|>"
    );
    assert_eq!(t.token_bytes(ga), Some(&b" a"[..]));
    assert!(t.is_special(end) && !t.is_special(user));
}

#[test]
fn missing_pre_tokenizer_is_llama_cpps_default() {
    let t = Tokenizer::from_gguf(&bpe_file(None, "gpt2")).expect("builds");
    assert_eq!(t.encode("abc", false).expect("encode").len(), 1);
}

#[test]
fn metadata_errors_are_clear() {
    let err = Tokenizer::from_gguf(&bpe_file(Some("no-such-pre"), "gpt2")).expect_err("unknown");
    assert!(matches!(err, TextError::UnknownPreTokenizer(ref p) if p == "no-such-pre"));
    assert!(
        err.to_string().contains("llama-bpe"),
        "lists the known names: {err}"
    );

    let err = Tokenizer::from_gguf(&bpe_file(Some("gpt-2"), "bert")).expect_err("model");
    assert!(
        matches!(err, TextError::UnsupportedModel(ref m) if m == "bert"),
        "{err}"
    );

    let err = Tokenizer::from_gguf(&gguf(vec![(
        "general.architecture",
        Value::String("llama".into()),
    )]))
    .expect_err("no tokenizer");
    assert!(err.to_string().contains("tokenizer.ggml.model"), "{err}");

    // llama.cpp's marker of a model without a vocabulary (`tritium synth` writes it).
    let err = Tokenizer::from_gguf(&gguf(vec![(
        "tokenizer.ggml.model",
        Value::String("none".into()),
    )]))
    .expect_err("no vocabulary");
    assert!(err.to_string().contains("has no tokenizer"), "{err}");

    let err = Tokenizer::from_gguf(&gguf(vec![
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.tokens", strings(&["a", "b"])),
    ]))
    .expect_err("no merges");
    assert!(err.to_string().contains("tokenizer.ggml.merges"), "{err}");

    let err = Tokenizer::from_gguf(&gguf(vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", strings(&["a", "b", "a"])),
    ]))
    .expect_err("duplicate");
    assert!(err.to_string().contains("twice"), "{err}");

    let err = Tokenizer::from_gguf(&gguf(vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", strings(&["a", "b"])),
        ("tokenizer.ggml.scores", Value::Array(Array::F32(vec![0.0]))),
    ]))
    .expect_err("short scores");
    assert!(err.to_string().contains("tokenizer.ggml.scores"), "{err}");

    let err = Tokenizer::from_gguf(&gguf(vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", Value::U32(3)),
    ]))
    .expect_err("not an array");
    assert!(err.to_string().contains("array of strings"), "{err}");
}

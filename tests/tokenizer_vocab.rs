//! Our GGUF tokenizers against llama.cpp's own tokenizer test vectors.
//!
//! llama.cpp ships, for several vocabularies, a GGUF holding only the tokenizer
//! (`ggml-vocab-<name>.gguf`), a list of test texts (`.gguf.inp`) and the ids its tokenizer must
//! give for each (`.gguf.out`; made by transformers' tokenizer of the original model,
//! `encode(text, add_special_tokens=False)`, in llama.cpp's convert_hf_to_gguf_update.py, and
//! checked against llama.cpp's tokenizer by its test-tokenizer-0). Files: llama-cpp-python
//! 0.3.36's source package, fetched into models/testdata by scripts/fetch-test-data.sh.
//!
//! Format: `.inp` is every text followed by "\n__ggml_vocab_test__\n"; `.out` has one line per
//! text, the ids separated by spaces (an empty line for no ids). llama.cpp's test tokenizes with
//! `add_special = false` and `parse_special = false`; none of the texts contains a special
//! token's text, so our `encode(text, false)` (which parses special tokens) is the same call.
//!
//! Every case must match exactly: no tolerance. Each case is also decoded back and must give the
//! text back exactly (SentencePiece: the decoder drops the one space the encoder prepended), and
//! streamed one id at a time (SentencePiece: the stream keeps that space, as generated text
//! continues a prompt).
//!
//! Missing test data fails the test under CI=true; elsewhere the test prints why it skips.

mod text_support;
use text_support as common;

use tritium::text::{TextStream, TokenizerKind};

/// (vocabulary, tokenizer kind, number of cases).
const VOCABS: &[(&str, TokenizerKind)] = &[
    ("llama-bpe", TokenizerKind::GgufBpe),
    ("gpt-2", TokenizerKind::GgufBpe),
    ("llama-spm", TokenizerKind::GgufSpm),
    ("qwen2", TokenizerKind::GgufBpe),
];

const SEP: &str = "\n__ggml_vocab_test__\n";

/// The test texts, split as llama.cpp's test-tokenizer-0 splits them.
fn read_inputs(raw: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < raw.len() {
        match raw[pos..].find(SEP) {
            Some(i) => {
                out.push(raw[pos..pos + i].to_string());
                pos += i + SEP.len();
            }
            None => {
                out.push(raw[pos..].to_string());
                break;
            }
        }
    }
    out
}

fn read_outputs(raw: &str) -> Vec<Vec<u32>> {
    raw.lines()
        .map(|l| {
            l.split_whitespace()
                .map(|t| t.parse().expect("an id"))
                .collect()
        })
        .collect()
}

fn check_vocab(name: &str, kind: TokenizerKind) {
    let Some(dir) = common::testdata_dir() else {
        return;
    };
    let gguf_path = dir.join(format!("ggml-vocab-{name}.gguf"));
    let tok = common::gguf_tokenizer(&gguf_path);
    assert_eq!(tok.kind(), kind);
    let inputs = read_inputs(&common::read_text(
        &dir.join(format!("ggml-vocab-{name}.gguf.inp")),
    ));
    let outputs = read_outputs(&common::read_text(
        &dir.join(format!("ggml-vocab-{name}.gguf.out")),
    ));
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{name}: .inp and .out disagree"
    );
    assert_eq!(
        inputs.len(),
        46,
        "{name}: llama.cpp 0.3.36's vectors have 46 cases"
    );

    let mut failures = Vec::new();
    for (text, want) in inputs.iter().zip(&outputs) {
        let got = tok.encode(text, false).expect("encode");
        if &got != want {
            failures.push(format!("{text:?}\n   want {want:?}\n    got {got:?}"));
            continue;
        }
        // Decoding gives the text back.
        let back = tok.decode(&got, false).expect("decode");
        if &back != text {
            failures.push(format!("{text:?}: decodes to {back:?}"));
        }
        // The stream, one id at a time, gives the same bytes (SentencePiece: before the
        // decoder drops its leading space).
        let mut stream = TextStream::new(false);
        let mut streamed = String::new();
        for &id in &got {
            let piece = stream.push(&tok, id).expect("push");
            assert!(
                !piece.contains('\u{FFFD}'),
                "{name}: {text:?}: partial character emitted"
            );
            streamed.push_str(&piece);
        }
        streamed.push_str(&stream.finish());
        let expect_stream = match kind {
            TokenizerKind::GgufSpm if !text.is_empty() => format!(" {text}"),
            _ => text.clone(),
        };
        if streamed != expect_stream {
            failures.push(format!("{text:?}: streams to {streamed:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} cases differ from llama.cpp:\n{}",
        failures.len(),
        inputs.len(),
        failures.join("\n")
    );
}

#[test]
fn llama_bpe_matches_llama_cpp() {
    check_vocab(VOCABS[0].0, VOCABS[0].1);
}

#[test]
fn gpt2_matches_llama_cpp() {
    check_vocab(VOCABS[1].0, VOCABS[1].1);
}

#[test]
fn llama_spm_matches_llama_cpp() {
    check_vocab(VOCABS[2].0, VOCABS[2].1);
}

#[test]
fn qwen2_matches_llama_cpp() {
    check_vocab(VOCABS[3].0, VOCABS[3].1);
}

/// Special tokens: ids, matching in text, skipping in decode. (The ids typed here were checked
/// with llama.cpp; llama_cpp_goldens covers them all from its output.)
#[test]
fn special_ids_follow_llama_cpp() {
    let Some(dir) = common::testdata_dir() else {
        return;
    };
    // llama-bpe (Llama 3): BOS from the file, add_bos by the llama3 pre-tokenizer's default,
    // end of generation: <|end_of_text|> 128001, <|eot_id|> 128009.
    let t = common::gguf_tokenizer(&dir.join("ggml-vocab-llama-bpe.gguf"));
    assert_eq!(
        (t.bos(), t.eos(), t.eot()),
        (Some(128000), Some(128001), Some(128009))
    );
    assert!(t.add_bos());
    assert_eq!(t.stop_ids(), [128001, 128009]);
    assert_eq!(t.vocab_size(), 128256);
    assert_eq!(t.encode("Hello", true).expect("encode"), [128000, 9906]);
    // Special tokens in text are one id each; decode can leave them out.
    let ids = t
        .encode(
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
            false,
        )
        .expect("encode");
    assert_eq!(ids, [128006, 882, 128007, 271, 13347, 128009]);
    assert_eq!(t.decode(&ids, true).expect("decode"), "user\n\nHi");
    assert!(t.is_special(128009) && !t.is_special(13347));

    // llama-spm (Llama 2): <s>=1, </s>=2, add_bos_token true in the file.
    let t = common::gguf_tokenizer(&dir.join("ggml-vocab-llama-spm.gguf"));
    assert_eq!((t.bos(), t.eos()), (Some(1), Some(2)));
    assert_eq!(
        t.encode("Hello world", true).expect("encode"),
        [1, 15043, 3186]
    );
    assert_eq!(t.stop_ids(), [2]);

    // qwen2: <|endoftext|> is BOS, EOS and pad; <|im_end|> is the end of turn. llama.cpp also
    // ends generation on 128247, an ordinary token whose text is "</s>" (its end-of-generation
    // list is by text); llama_cpp_goldens checks the same list against llama.cpp.
    let t = common::gguf_tokenizer(&dir.join("ggml-vocab-qwen2.gguf"));
    assert_eq!(
        (t.bos(), t.eos(), t.eot()),
        (Some(151643), Some(151643), Some(151645))
    );
    assert!(!t.add_bos());
    assert_eq!(t.id_to_token(128247).as_deref(), Some("</s>"));
    assert_eq!(t.stop_ids(), [128247, 151643, 151645]);
    // User-defined tokens ([PAD151646] ...) are matched whole and decode as text.
    let ids = t.encode("a[PAD151646]b", false).expect("encode");
    assert_eq!(ids, [64, 151646, 65]);
    assert_eq!(t.decode(&ids, true).expect("decode"), "a[PAD151646]b");

    // gpt-2: <|endoftext|> for everything, no BOS added.
    let t = common::gguf_tokenizer(&dir.join("ggml-vocab-gpt-2.gguf"));
    assert_eq!((t.bos(), t.eos()), (Some(50256), Some(50256)));
    assert!(!t.add_bos());
    assert_eq!(t.encode("Hello world", true).expect("encode"), [15496, 995]);
}

#[test]
fn out_of_range_ids_are_errors() {
    let Some(dir) = common::testdata_dir() else {
        return;
    };
    let t = common::gguf_tokenizer(&dir.join("ggml-vocab-gpt-2.gguf"));
    let err = t.decode(&[50257], false).expect_err("out of range");
    assert!(err.to_string().contains("50257"), "{err}");
    assert!(TextStream::new(false).push(&t, 1 << 30).is_err());
}

/// llama.cpp's own answers for our test vocabularies and SmolLM2's
/// (tests/goldens/gen_tokenizer_goldens.py, llama-cpp-python 0.3.36, vocab-only loads):
/// special ids, end-of-generation ids, the bytes of every token, and the ids of prompts with
/// special-token text, emoji, CJK, code and whitespace runs (`llama_tokenize` with
/// `parse_special`, as llama-cli tokenizes a prompt), with and without BOS.
#[test]
fn llama_cpp_goldens() {
    use sha2::{Digest, Sha256};
    let golden =
        common::read_json(&common::root().join("tests/goldens/text/llama_cpp_tokenizer.json"));
    let texts: Vec<&str> = golden["texts"]
        .as_array()
        .expect("texts")
        .iter()
        .map(|t| t.as_str().expect("text"))
        .collect();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect()
    };
    let opt = |v: &serde_json::Value| v.as_u64().map(|x| x as u32);
    let mut checked = 0;
    for (name, g) in golden["vocabs"].as_object().expect("vocabs") {
        let rel = g["file"].as_str().expect("file");
        let path = if name == "smollm2" {
            match common::smollm2() {
                Some(p) => p,
                None => continue,
            }
        } else {
            match common::testdata_dir() {
                Some(_) => common::root().join(rel),
                None => continue,
            }
        };
        let t = common::gguf_tokenizer(&path);
        assert_eq!(
            t.vocab_size() as u64,
            g["n_vocab"].as_u64().expect("n"),
            "{name}"
        );
        assert_eq!(t.bos(), opt(&g["bos"]), "{name}: BOS");
        assert_eq!(t.eos(), opt(&g["eos"]), "{name}: EOS");
        assert_eq!(
            t.add_bos(),
            g["add_bos"].as_bool().expect("bool"),
            "{name}: add_bos"
        );
        assert_eq!(
            t.add_eos(),
            g["add_eos"].as_bool().expect("bool"),
            "{name}: add_eos"
        );
        assert_eq!(
            t.stop_ids(),
            ids(&g["eog"]),
            "{name}: end-of-generation ids"
        );
        // llama.cpp picks the end-of-turn token among several candidates in hash-map order
        // (SmolLM2: <|endoftext|> rather than <|im_end|>); we pick by a fixed list. Both must be
        // end-of-generation ids, and equal where the vocabulary has only one candidate.
        match (t.eot(), opt(&g["eot"])) {
            (Some(ours), Some(theirs)) if name == "smollm2" => {
                assert!(t.stop_ids().contains(&ours) && t.stop_ids().contains(&theirs));
            }
            (ours, theirs) => assert_eq!(ours, theirs, "{name}: EOT"),
        }

        // Every token's bytes.
        let mut h = Sha256::new();
        for id in 0..t.vocab_size() as u32 {
            let p = t.token_bytes(id).expect("in range");
            h.update((p.len() as u32).to_le_bytes());
            h.update(p);
        }
        let mut bad = Vec::new();
        for (id, hex_piece) in g["piece_samples"].as_object().expect("samples") {
            let id: u32 = id.parse().expect("id");
            let want = hex::decode(hex_piece.as_str().expect("hex")).expect("hex");
            let got = t.token_bytes(id).expect("in range");
            if got != want.as_slice() {
                bad.push(format!(
                    "{id} {:?}: want {:?} got {:?}",
                    t.id_to_token(id),
                    String::from_utf8_lossy(&want),
                    String::from_utf8_lossy(got)
                ));
            }
        }
        assert!(
            bad.is_empty(),
            "{name}: token bytes differ:\n{}",
            bad.join("\n")
        );
        assert_eq!(
            hex::encode(h.finalize()),
            g["pieces_sha256"].as_str().expect("hash"),
            "{name}: the bytes of some token differ from llama.cpp's"
        );

        for (key, add_special) in [("add_special", true), ("no_add_special", false)] {
            for (text, want) in texts.iter().zip(g[key].as_array().expect("cases")) {
                let got = t.encode(text, add_special).expect("encode");
                assert_eq!(
                    got,
                    ids(want),
                    "{name}: {text:?} (add_special {add_special})"
                );
            }
        }
        checked += 1;
    }
    if checked > 0 {
        eprintln!("checked {checked} vocabularies against llama.cpp");
    }
}

/// Tokens that carry part of a character: the stream emits nothing for them and the character
/// whole once its last byte arrives. Byte-level BPE (Llama 3) splits 🦙 over tokens; SentencePiece
/// (Llama 2) spells it with four <0xXX> byte-fallback tokens (llama.cpp's vector: 🦙 is
/// 243 162 169 156, i.e. <0xF0> <0x9F> <0xA6> <0x99>).
#[test]
fn stream_holds_back_split_characters() {
    let Some(dir) = common::testdata_dir() else {
        return;
    };
    let spm = common::gguf_tokenizer(&dir.join("ggml-vocab-llama-spm.gguf"));
    let ids = spm.encode("🦙", false).expect("encode");
    assert_eq!(ids, [29871, 243, 162, 169, 156]);
    let mut s = TextStream::new(false);
    let steps: Vec<String> = ids
        .iter()
        .map(|&id| s.push(&spm, id).expect("push"))
        .collect();
    assert_eq!(steps, [" ", "", "", "", "🦙"]);
    assert!(!s.has_pending());

    let text = "🦙 東京 👋🏽 ok";
    for (name, t) in [
        (
            "llama-bpe",
            common::gguf_tokenizer(&dir.join("ggml-vocab-llama-bpe.gguf")),
        ),
        (
            "qwen2",
            common::gguf_tokenizer(&dir.join("ggml-vocab-qwen2.gguf")),
        ),
        (
            "gpt-2",
            common::gguf_tokenizer(&dir.join("ggml-vocab-gpt-2.gguf")),
        ),
    ] {
        let ids = t.encode(text, false).expect("encode");
        let mut s = TextStream::new(false);
        let mut out = String::new();
        let mut split = 0;
        for &id in &ids {
            let bytes = t.token_bytes(id).expect("bytes");
            let piece = s.push(&t, id).expect("push");
            if std::str::from_utf8(bytes).is_err() {
                split += 1;
            }
            assert!(
                !piece.contains('\u{FFFD}'),
                "{name}: partial character emitted"
            );
            out.push_str(&piece);
        }
        assert!(
            split > 0,
            "{name}: no token split a character; the test tests nothing"
        );
        assert!(!s.has_pending());
        assert_eq!(out + &s.finish(), text, "{name}");
    }
}

/// SmolLM2's GGUF tokenizer: "The capital of France is" gives llama.cpp's ids (llama-cpp-python
/// 0.3.36: tests/goldens/text/llama_cpp_tokenizer.json, and the lead's
/// tests/goldens/llama/q4_1.json), with no BOS (SmolLM2's add_bos_token is false).
#[test]
fn smollm2_prompt_ids() {
    let Some(path) = common::smollm2() else {
        return;
    };
    let t = common::gguf_tokenizer(&path);
    assert_eq!(t.kind(), TokenizerKind::GgufBpe);
    assert_eq!(
        t.encode("The capital of France is", true).expect("encode"),
        [504, 3575, 282, 4649, 314]
    );
    // llama.cpp's greedy continuation starts with id 7042, " Paris" (tests/goldens/llama/q4_1.json).
    assert_eq!(t.encode(" Paris", false).expect("encode"), [7042]);
    assert_eq!(t.decode(&[7042], false).expect("decode"), " Paris");
    assert_eq!((t.bos(), t.eos()), (Some(1), Some(2)));
    // <|endoftext|>, <|im_end|>, and <reponame> (llama.cpp ends generation on the
    // fill-in-the-middle repository token too).
    assert_eq!(t.stop_ids(), [0, 2, 4]);
}

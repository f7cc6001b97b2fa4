//! Chat templates rendered by minijinja (ours) against Python's Jinja2 set up as transformers sets
//! it up (tests/goldens/gen_chat_goldens.py, jinja2 3.1.6): SmolLM2's template read from its
//! GGUF, Qwen2's from llama.cpp's qwen2 test vocabulary, Llama 3's from its
//! tokenizer_config.json, and the BitNet converter's template (our fallback for BitNet files).
//! Exact string equality, for five conversations, with and without the generation prompt.
//!
//! Also: the fallbacks `from_gguf` picks for files without a template (ChatML, as llama.cpp;
//! the BitNet template for BitNet architectures).
//!
//! Missing model files fail the test under CI=true; elsewhere the test prints why it skips.

mod text_support;
use text_support as common;

use sha2::{Digest, Sha256};
use tritium::formats::gguf::{Array, GgufFile, GgufWriter, Value};
use tritium::text::{ChatMessage, ChatTemplate, Tokenizer};

fn golden() -> serde_json::Value {
    common::read_json(&common::root().join("tests/goldens/text/chat_templates.json"))
}

fn conversations(g: &serde_json::Value) -> Vec<Vec<ChatMessage>> {
    serde_json::from_value(g["conversations"].clone()).expect("conversations")
}

/// Render every conversation both ways and compare with Jinja2's output.
fn check(name: &str, t: &ChatTemplate, check_source: bool) {
    let g = golden();
    let want = &g["templates"][name];
    if check_source {
        assert_eq!(
            hex::encode(Sha256::digest(t.source().as_bytes())),
            want["template_sha256"].as_str().expect("sha"),
            "{name}: not the template the goldens were made from"
        );
    }
    assert_eq!(
        t.bos_token(),
        want["bos_token"].as_str().expect("bos"),
        "{name}"
    );
    assert_eq!(
        t.eos_token(),
        want["eos_token"].as_str().expect("eos"),
        "{name}"
    );
    let renders = want["renders"].as_array().expect("renders");
    let mut i = 0;
    for conv in conversations(&g) {
        for gen in [true, false] {
            let r = &renders[i];
            i += 1;
            assert_eq!(r["add_generation_prompt"].as_bool(), Some(gen));
            match (t.render(&conv, gen), r["text"].as_str()) {
                (Ok(got), Some(text)) => assert_eq!(got, text, "{name}: {conv:?} gen={gen}"),
                (Err(e), None) => {
                    let msg = r["error"].as_str().expect("error");
                    assert!(e.to_string().contains(msg), "{name}: {e} vs {msg}");
                }
                (got, _) => panic!("{name}: {conv:?} gen={gen}: {got:?} vs {r}"),
            }
        }
    }
    assert_eq!(i, renders.len());
}

#[test]
fn smollm2_template_matches_jinja2() {
    let Some(path) = common::smollm2() else {
        return;
    };
    let file = common::read_gguf(&path);
    let t = ChatTemplate::from_gguf(&file).expect("template");
    assert_eq!(t.origin(), tritium::text::TemplateOrigin::Model);
    check("smollm2", &t, true);

    // The rendered prompt tokenizes with the chat tokens as single ids (<|im_start|> = 1,
    // <|im_end|> = 2) and no BOS (SmolLM2's add_bos_token is false).
    let tok = Tokenizer::from_gguf(&file).expect("tokenizer");
    let text = t
        .render(&[ChatMessage::new("user", "Hi")], true)
        .expect("render");
    let ids = tok.encode(&text, true).expect("encode");
    assert_eq!(ids.first(), Some(&1));
    assert_eq!(ids.iter().filter(|&&i| i == 1).count(), 3);
    assert_eq!(ids.iter().filter(|&&i| i == 2).count(), 2);
    assert_eq!(tok.decode(&ids, false).expect("decode"), text);
}

#[test]
fn qwen2_template_matches_jinja2() {
    let Some(dir) = common::testdata_dir() else {
        return;
    };
    let file = common::read_gguf(&dir.join("ggml-vocab-qwen2.gguf"));
    check(
        "qwen2",
        &ChatTemplate::from_gguf(&file).expect("template"),
        true,
    );
}

#[test]
fn llama3_template_matches_jinja2() {
    let Some(dir) = common::testdata_dir() else {
        return;
    };
    let cfg = common::read_json(&dir.join("llama3-tokenizer_config.json"));
    let t = ChatTemplate::new(
        cfg["chat_template"].as_str().expect("template"),
        cfg["bos_token"].as_str().expect("bos"),
        cfg["eos_token"].as_str().expect("eos"),
    )
    .expect("template");
    check("llama3", &t, true);
}

#[test]
fn bitnet_fallback_matches_the_converters_template() {
    // Our BITNET_TEMPLATE is written differently (whitespace control) from the converter's;
    // what must agree is the rendered text.
    check(
        "bitnet",
        &ChatTemplate::bitnet("<|begin_of_text|>", "<|end_of_text|>"),
        false,
    );
}

/// A GGUF with a tiny vocabulary and no chat template.
fn gguf_without_template(arch: &str) -> GgufFile {
    let mut w = GgufWriter::new();
    w.add("general.architecture", Value::String(arch.into()))
        .expect("add");
    w.add("tokenizer.ggml.model", Value::String("gpt2".into()))
        .expect("add");
    let tokens = ["<|begin_of_text|>", "<|end_of_text|>", "a"];
    w.add(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(
            tokens.iter().map(|s| s.to_string()).collect(),
        )),
    )
    .expect("add");
    w.add("tokenizer.ggml.bos_token_id", Value::U32(0))
        .expect("add");
    w.add("tokenizer.ggml.eos_token_id", Value::U32(1))
        .expect("add");
    let bytes = w.to_bytes().expect("write");
    GgufFile::read(&bytes).expect("read")
}

#[test]
fn fallbacks_for_files_without_a_template() {
    use tritium::text::TemplateOrigin;
    let msgs = [ChatMessage::new("user", "Hi")];
    for arch in ["bitnet-b1.58", "bitnet-25", "bitnet"] {
        let t = ChatTemplate::from_gguf(&gguf_without_template(arch)).expect("template");
        assert_eq!(t.origin(), TemplateOrigin::BitNetFallback, "{arch}");
        assert_eq!(
            t.render(&msgs, true).expect("render"),
            "<|begin_of_text|>Human: Hi\n\nBITNETAssistant: <|end_of_text|>"
        );
    }
    let t = ChatTemplate::from_gguf(&gguf_without_template("llama")).expect("template");
    assert_eq!(t.origin(), TemplateOrigin::ChatMlFallback);
    assert_eq!(
        t.render(&msgs, true).expect("render"),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
}

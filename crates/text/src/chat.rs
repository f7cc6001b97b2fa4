//! [`ChatTemplate`]: a model's Jinja chat template rendered with minijinja, as transformers
//! renders it, with a fallback for models that have none.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Serde, ValueKind};
use minijinja::{Environment, Error as JinjaError, ErrorKind, Value};
use serde::{Deserialize, Serialize};

use crate::formats::gguf::{Array, GgufFile, Value as GgufValue};

use super::TextError;

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant` (templates may know others, e.g. `tool`).
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// ChatML, what llama.cpp falls back to for a model without a template.
pub const CHATML_TEMPLATE: &str = "{%- for message in messages -%}\
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

/// The fixed template Microsoft's BitNet converter writes into BitNet GGUF files: BOS, then
/// `Human: {content}\n\nBITNETAssistant: {eos}` per user turn and `{content}{eos}` per assistant
/// turn (other roles are dropped). The template has no generation prompt of its own: a user turn
/// already ends with one.
pub const BITNET_TEMPLATE: &str = "{%- for message in messages -%}\
{%- if loop.first -%}{{- bos_token -}}{%- endif -%}\
{%- if message['role'] == 'user' -%}\
{{- 'Human: ' + message['content'] + '\\n\\nBITNETAssistant: ' + eos_token -}}\
{%- elif message['role'] == 'assistant' -%}\
{{- message['content'] + eos_token -}}\
{%- endif -%}\
{%- endfor -%}";

/// Which template a [`ChatTemplate`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateOrigin {
    /// The model's own (`tokenizer.chat_template`, or given by the caller).
    Model,
    /// [`CHATML_TEMPLATE`]: the model has none.
    ChatMlFallback,
    /// [`BITNET_TEMPLATE`]: a BitNet model without a template.
    BitNetFallback,
}

/// A compiled chat template and the special-token texts it may use.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    origin: TemplateOrigin,
    bos_token: String,
    eos_token: String,
}

const NAME: &str = "chat";

impl ChatTemplate {
    /// Compile `source`; `bos_token`/`eos_token` are the texts the template sees as
    /// `bos_token`/`eos_token`.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, TextError> {
        Self::with_origin(source, bos_token, eos_token, TemplateOrigin::Model)
    }

    /// The ChatML fallback.
    pub fn chatml() -> Self {
        // The fixed template compiles (a unit test checks it); the fallback keeps this
        // infallible for callers.
        Self::with_origin(CHATML_TEMPLATE, "", "", TemplateOrigin::ChatMlFallback)
            .unwrap_or_else(|_| Self::empty(TemplateOrigin::ChatMlFallback))
    }

    /// The BitNet fallback ([`BITNET_TEMPLATE`]).
    pub fn bitnet(bos_token: &str, eos_token: &str) -> Self {
        Self::with_origin(
            BITNET_TEMPLATE,
            bos_token,
            eos_token,
            TemplateOrigin::BitNetFallback,
        )
        .unwrap_or_else(|_| Self::empty(TemplateOrigin::BitNetFallback))
    }

    /// The template of a GGUF file: `tokenizer.chat_template` when present, else the BitNet
    /// template for BitNet architectures (`bitnet-b1.58`, `bitnet-25`, `bitnet`) and ChatML for
    /// the rest. `bos_token`/`eos_token` are the texts of the file's BOS/EOS tokens.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self, TextError> {
        let (bos, eos) = special_texts(gguf);
        if let Some(source) = gguf.get_str("tokenizer.chat_template") {
            return Self::new(source, &bos, &eos);
        }
        match gguf.architecture() {
            Some("bitnet-b1.58" | "bitnet-25" | "bitnet") => Ok(Self::bitnet(&bos, &eos)),
            _ => Ok(Self::chatml()),
        }
    }

    fn with_origin(
        source: &str,
        bos_token: &str,
        eos_token: &str,
        origin: TemplateOrigin,
    ) -> Result<Self, TextError> {
        let mut env = Self::environment();
        env.add_template_owned(NAME, source.to_string())
            .map_err(template_error)?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            origin,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    fn empty(origin: TemplateOrigin) -> Self {
        ChatTemplate {
            env: Self::environment(),
            source: String::new(),
            origin,
            bos_token: String::new(),
            eos_token: String::new(),
        }
    }

    /// An environment configured as transformers configures Jinja for chat templates:
    /// `trim_blocks`, `lstrip_blocks`, loop controls, Python string/dict methods
    /// (`.strip()`, `.startswith()`, `.items()` ...), `raise_exception` and a Python-style
    /// `tojson`.
    fn environment() -> Environment<'static> {
        let mut env = Environment::new();
        let mut syntax = minijinja::syntax::SyntaxConfig::builder();
        syntax.trim_blocks(true).lstrip_blocks(true);
        if let Ok(s) = syntax.build() {
            env.set_syntax(s);
        }
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<Value, JinjaError> {
                Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_filter("tojson", tojson);
        env
    }

    /// Render a conversation. `add_generation_prompt` appends the start of an assistant turn
    /// (for templates that have one). The template's own `raise_exception` becomes an error.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TextError> {
        let template = self.env.get_template(NAME).map_err(template_error)?;
        let ctx = minijinja::context! {
            messages => Value::from(Serde(messages)),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            tools => Value::from(()),
            documents => Value::from(()),
        };
        template.render(ctx).map_err(template_error)
    }

    /// Which template this is.
    pub fn origin(&self) -> TemplateOrigin {
        self.origin
    }

    /// The template's source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }
}

/// The texts of the BOS and EOS tokens of a GGUF file (empty when it names none).
fn special_texts(gguf: &GgufFile) -> (String, String) {
    let tokens = match gguf.get("tokenizer.ggml.tokens") {
        Some(GgufValue::Array(Array::String(t))) => t.as_slice(),
        _ => &[],
    };
    let spm = gguf.get_str("tokenizer.ggml.model") == Some("llama");
    let text = |key: &str, spm_default: u64| -> String {
        let id = gguf
            .get_u64(key)
            .or(spm.then_some(spm_default))
            .and_then(|i| usize::try_from(i).ok());
        id.and_then(|i| tokens.get(i)).cloned().unwrap_or_default()
    };
    (
        text("tokenizer.ggml.bos_token_id", 1),
        text("tokenizer.ggml.eos_token_id", 2),
    )
}

fn template_error(e: JinjaError) -> TextError {
    // The alternate form includes the template line the error points at.
    let mut msg = format!("{e}");
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        let _ = write!(msg, ": {s}");
        source = s.source();
    }
    TextError::Template(msg)
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=...)`,
/// so `{"role": "user", "content": "hi"}` with Python's separators, keys in insertion order,
/// and no HTML escaping.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, JinjaError> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    py_json(&value, indent, 0, sort_keys.unwrap_or(false), &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn py_json(
    v: &Value,
    indent: Option<usize>,
    level: usize,
    sort: bool,
    out: &mut String,
) -> Result<(), JinjaError> {
    let newline = |out: &mut String, level: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * level));
        }
    };
    let sep = if indent.is_some() { "," } else { ", " };
    let string = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            let _ = write!(out, "{v}");
        }
        ValueKind::String => out.push_str(&string(v.as_str().unwrap_or_default())),
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if sort {
                keys.sort();
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, level + 1);
                out.push_str(&string(&k.to_string()));
                out.push_str(": ");
                py_json(&v.get_item(k)?, indent, level + 1, sort, out)?;
            }
            newline(out, level);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, level + 1);
                py_json(item, indent, level + 1, sort, out)?;
            }
            newline(out, level);
            out.push(']');
        }
        _ => {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!("tojson: cannot serialize a {} value", v.kind()),
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv() -> Vec<ChatMessage> {
        vec![
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
            ChatMessage::new("assistant", "Hello!"),
            ChatMessage::new("user", "2+2?"),
        ]
    }

    #[test]
    fn chatml_is_llama_cpps() {
        // llama.cpp (llm_chat_apply_template, LLM_CHAT_TEMPLATE_CHATML):
        // "<|im_start|>" role "\n" content "<|im_end|>\n" per message, then
        // "<|im_start|>assistant\n" when asked.
        let t = ChatTemplate::chatml();
        assert_eq!(t.origin(), TemplateOrigin::ChatMlFallback);
        let want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
                    <|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n";
        assert_eq!(t.render(&conv(), false).expect("render"), want);
        assert_eq!(
            t.render(&conv(), true).expect("render"),
            format!("{want}<|im_start|>assistant\n")
        );
    }

    #[test]
    fn bitnet_fallback_is_the_converters_template() {
        let t = ChatTemplate::bitnet("<|begin_of_text|>", "<|eot_id|>");
        assert_eq!(t.origin(), TemplateOrigin::BitNetFallback);
        let got = t.render(&conv(), true).expect("render");
        assert_eq!(
            got,
            "<|begin_of_text|>Human: Hi\n\nBITNETAssistant: <|eot_id|>Hello!<|eot_id|>\
             Human: 2+2?\n\nBITNETAssistant: <|eot_id|>"
        );
    }

    #[test]
    fn raise_exception_is_an_error() {
        let t = ChatTemplate::new(
            "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok",
            "",
            "",
        )
        .expect("compiles");
        let err = t.render(&conv(), false).expect_err("raises");
        assert!(err.to_string().contains("first must be user"), "{err}");
        assert_eq!(t.render(&conv()[1..], false).expect("render"), "ok");
    }

    #[test]
    fn python_methods_trim_and_tojson() {
        let t = ChatTemplate::new(
            "{% for m in messages %}{{ m.content.strip() | upper }}|{{ m['content'] | trim }}|{{ m.role.startswith('sys') }};{% endfor %}{{ messages[0] | tojson }}{{ tools is none }}",
            "",
            "",
        )
        .expect("compiles");
        let got = t
            .render(&[ChatMessage::new("system", "  a <b> \n")], false)
            .expect("render");
        assert_eq!(
            got,
            "A <B>|a <b>|True;{\"role\": \"system\", \"content\": \"  a <b> \\n\"}True"
        );
    }

    #[test]
    fn bad_template_is_an_error() {
        let err = ChatTemplate::new("{% for %}", "", "").expect_err("syntax error");
        assert!(matches!(err, TextError::Template(_)));
    }
}

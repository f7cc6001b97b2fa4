//! What `/api/show`, `/api/tags` and `tritium show` say about a model: architecture, parameter
//! count, quantization, context, chat template and license, read from its header without
//! loading any weight.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::session::{self, ModelMeta};

/// A model's description.
#[derive(Clone, Debug, Serialize)]
pub struct ModelDetails {
    /// `gguf`, `rdrr` or `trellis`.
    pub format: String,
    pub architecture: Option<String>,
    /// Elements of every tensor.
    pub parameters: u64,
    /// `135M`, `1.2B`: the count as Ollama writes it.
    pub parameter_size: String,
    /// The dtype holding most of the weight bytes (`Q4_1`, `Q4_K`, `I2_S`, ...).
    pub quantization: Option<String>,
    /// The context the model was trained for.
    pub context_length: Option<u64>,
    /// The chat template's source (the model's own, or the fallback used for it).
    pub template: Option<String>,
    pub license: Option<String>,
    /// Bytes of the model's tensors.
    pub tensor_bytes: u64,
    /// Hyper-parameters by name.
    pub hyper_parameters: BTreeMap<String, serde_json::Value>,
}

/// `135M`, `1.24B`.
pub fn parameter_size(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2}B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.0}M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.0}K", n / 1e3)
    } else {
        format!("{n}")
    }
}

/// Describe the model at `path` (a GGUF file or an RDRR or Trellis folder).
pub fn describe(path: &Path) -> Result<ModelDetails, crate::Error> {
    let opened = session::open_path(path)?;
    let desc = opened.describe()?;
    let mut by_dtype: BTreeMap<&str, u64> = BTreeMap::new();
    for t in &desc.tensors {
        // 1-D tensors (norms, biases) stay in float whatever the quantization.
        if t.shape.len() >= 2 {
            *by_dtype.entry(t.dtype.as_str()).or_default() += t.bytes;
        }
    }
    let quantization = by_dtype
        .iter()
        .max_by_key(|(_, b)| **b)
        .map(|(d, _)| d.to_string());
    let parameters = desc.total_elements();
    let (template, license) = match opened.header() {
        Ok(h) => {
            let tok = opened.tokenizer().ok();
            (
                opened
                    .chat_template(tok.as_ref())
                    .ok()
                    .map(|t| t.source().to_string()),
                h.get_str("general.license").map(str::to_string),
            )
        }
        Err(_) => (None, None),
    };
    let hyper_parameters: BTreeMap<String, serde_json::Value> =
        desc.hyper_parameters.iter().cloned().collect();
    Ok(ModelDetails {
        format: match opened.format() {
            session::Format::Gguf => "gguf",
            session::Format::Rdrr => "rdrr",
            session::Format::Trellis => "trellis",
        }
        .to_string(),
        architecture: desc.architecture.clone(),
        parameters,
        parameter_size: parameter_size(parameters),
        quantization,
        context_length: hyper_parameters
            .get("context_length")
            .and_then(serde_json::Value::as_u64),
        template,
        license,
        tensor_bytes: desc.total_bytes(),
        hyper_parameters,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn parameter_sizes_read_as_ollama_writes_them() {
        assert_eq!(super::parameter_size(134_515_008), "135M");
        assert_eq!(super::parameter_size(1_235_814_400), "1.24B");
        assert_eq!(super::parameter_size(2_000), "2K");
    }
}

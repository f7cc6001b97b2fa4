//! LoRA adapters opened from their files: a llama.cpp GGUF adapter or an RDRR adapter folder,
//! read into [`AdapterData`] against the base model it is meant for.

use super::opened::OpenedModel;
use crate::formats::rdrr::AdapterType;
use crate::formats::source::ModelFiles;
use crate::model::lora::{bad, AdapterTensor, Layout};
use crate::model::{AdapterData, Arch, ModelConfig};
use crate::Error;

impl<F: ModelFiles> OpenedModel<F> {
    /// Whether the files hold a LoRA adapter rather than a model (GGUF `general.type =
    /// adapter`; an RDRR manifest with `adapterType` or `modelType` `lora`).
    pub fn is_adapter(&self) -> bool {
        match self {
            OpenedModel::Gguf { header, .. } => header.get_str("general.type") == Some("adapter"),
            OpenedModel::Rdrr { manifest, .. } => {
                manifest.adapter_type.is_some()
                    || manifest
                        .model_type
                        .as_deref()
                        .is_some_and(|t| t.eq_ignore_ascii_case("lora"))
            }
            OpenedModel::Trellis(..) => false,
        }
    }

    /// The adapter these files hold, named `name`, read for `base` (its architecture, blocks
    /// and shapes checked).
    pub fn adapter(&self, name: &str, base: &ModelConfig) -> Result<AdapterData, Error> {
        let (layout, tensors, alpha) = match self {
            OpenedModel::Gguf { header, .. } => {
                match header.get_str("general.type") {
                    Some("adapter") => {}
                    other => {
                        return Err(bad(
                            name,
                            format!(
                                "the file is not an adapter (general.type is {}, not adapter)",
                                other.unwrap_or("missing")
                            ),
                        ))
                    }
                }
                match header.get_str("adapter.type") {
                    Some("lora") => {}
                    other => {
                        return Err(bad(
                            name,
                            format!(
                                "adapter.type is {}; only lora adapters are supported",
                                other.unwrap_or("missing")
                            ),
                        ))
                    }
                }
                if header.get("adapter.alora.invocation_tokens").is_some() {
                    return Err(bad(
                        name,
                        "activated LoRA (adapter.alora.invocation_tokens) is not supported",
                    ));
                }
                let arch = header.architecture().unwrap_or("missing");
                if Arch::from_name(arch) != Some(base.arch) {
                    return Err(bad(
                        name,
                        format!(
                            "the adapter is for architecture {arch}; the base model is {}",
                            base.arch_name
                        ),
                    ));
                }
                let tensors: Vec<AdapterTensor> = header
                    .tensors
                    .iter()
                    .map(|t| AdapterTensor {
                        name: t.name.clone(),
                        shape: t.shape(),
                    })
                    .collect();
                let alpha = header.get_f64("adapter.lora.alpha").map(|a| a as f32);
                (Layout::Gguf, tensors, alpha)
            }
            OpenedModel::Rdrr { manifest, .. } => {
                if !self.is_adapter() {
                    return Err(bad(
                        name,
                        "the manifest is not an adapter's (no adapterType lora)",
                    ));
                }
                if let Some(t) = &manifest.adapter_type {
                    if *t != AdapterType::Lora {
                        return Err(bad(
                            name,
                            format!("adapterType {t:?}; only lora adapters are supported"),
                        ));
                    }
                }
                let tensors: Vec<AdapterTensor> = manifest
                    .tensors
                    .iter()
                    .map(|(n, t)| AdapterTensor {
                        name: n.clone(),
                        shape: t.shape.clone(),
                    })
                    .collect();
                let alpha = manifest
                    .lora_config
                    .as_ref()
                    .and_then(|c| c.alpha)
                    .map(|a| a as f32);
                (Layout::Rdrr, tensors, alpha)
            }
            OpenedModel::Trellis(..) => {
                return Err(bad(name, "a Trellis checkpoint is not an adapter"));
            }
        };
        AdapterData::read(name, layout, &tensors, alpha, base, |t| self.dequantize(t))
    }
}

impl<B: crate::backend::Backend> super::Session<B> {
    /// Load the adapter `opened` holds, named `name`, for this session's model; it applies once
    /// [`crate::engine::Engine::set_adapters`] names it.
    pub fn load_adapter_from<F: ModelFiles>(
        &mut self,
        opened: &OpenedModel<F>,
        name: &str,
    ) -> Result<crate::model::AdapterId, Error> {
        let data = opened.adapter(name, self.config())?;
        self.engine.model.load_adapter(&data)
    }

    /// Load the adapter `reference` names: a GGUF adapter, an RDRR adapter folder, a name in
    /// the store or a URL (downloaded and verified as a model is). Errors name the path.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn load_adapter(
        &mut self,
        reference: &std::path::Path,
        options: &super::OpenOptions,
    ) -> Result<crate::model::AdapterId, Error> {
        let path = super::resolve(reference, options)?;
        let opened = super::open_path(&path)?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        self.load_adapter_from(&opened, &name)
            .map_err(|e| e.at(&path))
    }
}

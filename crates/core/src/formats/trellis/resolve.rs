//! From four tensors to one decodable quantized weight: orientation, bit width, the indices
//! header and every dtype/shape rule of `trellis.md`. [`inspect_weight`] collects every
//! problem (the validator's view); [`TrellisModel::resolve`] stops at the first (the reader's).

use half::f16;

use super::model::{read_f32, Part, Problem, Severity, TensorRef, TrellisModel, WeightParts};
use super::TrellisError;
use crate::formats::safetensors::Dtype;
use crate::formats::source::ModelFiles;
use crate::quant::trellis::{decode_weight, TrellisGeometry};

/// A quantized weight whose parts are consistent: ready to decode.
#[derive(Debug, Clone)]
pub struct ResolvedWeight {
    pub name: String,
    /// Rows of `W` (output features).
    pub out: usize,
    /// Columns of `W` (input features).
    pub in_: usize,
    /// Bits per weight (2..8).
    pub bits: u32,
    /// Scale groups `G` along the input axis.
    pub groups: usize,
    /// True when the indices tensor starts with the one-byte header.
    pub has_header: bool,
    pub indices: TensorRef,
    pub scales: TensorRef,
    pub su: TensorRef,
    pub sv: TensorRef,
}

impl ResolvedWeight {
    /// Bytes of the four parts together.
    pub fn byte_len(&self) -> u64 {
        [&self.indices, &self.scales, &self.su, &self.sv]
            .iter()
            .map(|t| t.entry.byte_len())
            .sum()
    }

    /// Decode to f16, row-major `[out, in]`, exactly as the reference runtime does (no
    /// Hadamard transform).
    pub fn decode(&self, files: &dyn ModelFiles) -> Result<Vec<f16>, TrellisError> {
        let indices = self.indices.read(files)?;
        let scales = read_f32(files, &self.scales)?;
        let su = read_f32(files, &self.su)?;
        let sv = read_f32(files, &self.sv)?;
        decode_weight(&indices, &scales, &su, &sv, self.out, self.in_, self.bits).map_err(
            |source| TrellisError::Decode {
                tensor: self.name.clone(),
                source,
            },
        )
    }
}

impl TrellisModel {
    /// Resolve a weight, failing on its first problem (metadata coverage is not required).
    pub fn resolve(
        &self,
        files: &dyn ModelFiles,
        weight: &WeightParts,
    ) -> Result<ResolvedWeight, TrellisError> {
        let (resolved, problems) = inspect_weight(self, files, weight, false);
        if let Some(p) = problems.into_iter().find(|p| p.severity == Severity::Error) {
            return Err(p.error);
        }
        resolved.ok_or_else(|| TrellisError::TensorNotFound {
            name: weight.name.clone(),
        })
    }
}

fn shape_error(t: &TensorRef, expected: String) -> TrellisError {
    TrellisError::PartShape {
        file: t.file.clone(),
        tensor: t.key().to_string(),
        shape: t.entry.shape.clone(),
        expected,
    }
}

fn dtype_error(t: &TensorRef, expected: &'static str) -> TrellisError {
    TrellisError::PartDtype {
        file: t.file.clone(),
        tensor: t.key().to_string(),
        dtype: t.entry.dtype.to_string(),
        expected,
    }
}

/// The length of a 1-D tensor.
fn vector_len(t: &TensorRef) -> Option<u64> {
    match t.entry.shape.as_slice() {
        [n] => Some(*n),
        _ => None,
    }
}

/// Check one quantized weight. With `deep`, also read scales/su/sv to check that scales are
/// finite and warn about signs other than +1/-1. Returns the resolved weight when it is
/// decodable, and every problem found.
pub fn inspect_weight(
    model: &TrellisModel,
    files: &dyn ModelFiles,
    weight: &WeightParts,
    deep: bool,
) -> (Option<ResolvedWeight>, Vec<Problem>) {
    let mut problems = Vec::new();
    let resolved = inspect_into(model, files, weight, deep, &mut problems);
    (resolved, problems)
}

fn inspect_into(
    model: &TrellisModel,
    files: &dyn ModelFiles,
    weight: &WeightParts,
    deep: bool,
    problems: &mut Vec<Problem>,
) -> Option<ResolvedWeight> {
    let name = &weight.name;
    let present: Vec<&str> = Part::ALL
        .iter()
        .filter(|p| weight.part(**p).is_some())
        .map(|p| p.suffix())
        .collect();
    for part in Part::ALL {
        if weight.part(part).is_none() {
            push_error(
                problems,
                TrellisError::MissingPart {
                    weight: name.clone(),
                    part: part.suffix(),
                    present: present.join(", "),
                },
            );
        }
    }
    let (Some(indices), Some(scales), Some(su), Some(sv)) = (
        weight.part(Part::Indices),
        weight.part(Part::Scales),
        weight.part(Part::Su),
        weight.part(Part::Sv),
    ) else {
        return None;
    };

    // Metadata, where there is any.
    let meta = model.meta(name);
    let meta_bits = meta.and_then(|m| {
        let b = m.bits?;
        if (2..=8).contains(&b) {
            Some(b as u32)
        } else {
            push_error(
                problems,
                TrellisError::MetadataBits {
                    meta_file: m.file.clone(),
                    weight: name.clone(),
                    bits: b,
                },
            );
            None
        }
    });
    let meta_shape = meta.and_then(|m| match m.shape.as_deref() {
        Some(&[a, b]) => Some((a, b)),
        Some(other) => {
            push_error(
                problems,
                TrellisError::MetadataShape {
                    meta_file: m.file.clone(),
                    weight: name.clone(),
                    shape: other.to_vec(),
                },
            );
            None
        }
        None => None,
    });

    // Orientation: [out, in]; a seed-order [in, out] is recognised by the sign vectors.
    let (su_len, sv_len) = (vector_len(su), vector_len(sv));
    let (out, in_) = match meta_shape {
        Some((a, b)) if a != b && (Some(a), Some(b)) == (su_len, sv_len) => (b, a),
        Some(shape) => shape,
        None => (sv_len.unwrap_or(0), su_len.unwrap_or(0)),
    };
    let mut parts_ok = true;
    for (t, len, axis, expected_len) in [(su, su_len, "in", in_), (sv, sv_len, "out", out)] {
        if t.entry.dtype != Dtype::F32 {
            push_error(problems, dtype_error(t, "F32"));
            parts_ok = false;
        }
        if len != Some(expected_len) || expected_len == 0 {
            let expected = if meta_shape.is_some() || expected_len > 0 {
                format!("[{expected_len}] ({axis} of the [out, in] = [{out}, {in_}] weight)")
            } else {
                format!("[{axis}]: a vector")
            };
            push_error(problems, shape_error(t, expected));
            parts_ok = false;
        }
    }
    if out == 0 || in_ == 0 {
        return None;
    }
    let (Ok(out), Ok(in_)) = (usize::try_from(out), usize::try_from(in_)) else {
        return None;
    };

    // Scales: f32 [G, out].
    let groups = match scales.entry.shape.as_slice() {
        &[g, o] if o == out as u64 && g >= 1 => usize::try_from(g).ok(),
        _ => None,
    };
    if scales.entry.dtype != Dtype::F32 {
        push_error(problems, dtype_error(scales, "F32"));
        parts_ok = false;
    }
    if groups.is_none() {
        push_error(
            problems,
            shape_error(
                scales,
                format!("[G, {out}] (G scale groups, one scale per output)"),
            ),
        );
    }

    // Indices: u8, with the one-byte header or already shaped [TO, TI, 32*b] without it.
    let indices_ok = match indices.entry.dtype {
        Dtype::U8 => true,
        Dtype::I16 => {
            push_error(
                problems,
                TrellisError::RetiredV1Indices {
                    file: indices.file.clone(),
                    tensor: indices.key().to_string(),
                },
            );
            false
        }
        _ => {
            push_error(problems, dtype_error(indices, "U8 (packed indices)"));
            false
        }
    };
    let mut layout = None;
    if indices_ok {
        let meta_file = meta.map(|m| m.file.clone()).unwrap_or_default();
        match indices_layout(files, indices, out, in_, meta_bits, &meta_file) {
            Ok(l) => layout = Some(l),
            Err(e) => push_error(problems, e),
        }
    }

    if deep && parts_ok {
        if let Ok(values) = read_f32(files, scales) {
            if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                push_error(
                    problems,
                    TrellisError::NonFiniteScale {
                        file: scales.file.clone(),
                        tensor: scales.key().to_string(),
                        index: index as u64,
                        value,
                    },
                );
            }
        }
        for t in [su, sv] {
            match read_f32(files, t) {
                Ok(values) => {
                    let mut odd = values
                        .iter()
                        .enumerate()
                        .filter(|(_, v)| **v != 1.0 && **v != -1.0);
                    if let Some((index, &value)) = odd.next() {
                        problems.push(Problem {
                            severity: Severity::Warning,
                            error: TrellisError::SignsNotUnit {
                                file: t.file.clone(),
                                tensor: t.key().to_string(),
                                count: 1 + odd.count() as u64,
                                index: index as u64,
                                value,
                            },
                        });
                    }
                }
                Err(e) => problems.push(Problem {
                    severity: Severity::Error,
                    error: e,
                }),
            }
        }
    }

    let (bits, has_header) = layout?;
    if !parts_ok {
        return None;
    }
    Some(ResolvedWeight {
        name: name.clone(),
        out,
        in_,
        bits,
        groups: groups?,
        has_header,
        indices: indices.clone(),
        scales: scales.clone(),
        su: su.clone(),
        sv: sv.clone(),
    })
}

fn push_error(problems: &mut Vec<Problem>, error: TrellisError) {
    problems.push(Problem {
        severity: Severity::Error,
        error,
    });
}

/// Work out the bit width of an indices tensor and whether it carries the header byte.
fn indices_layout(
    files: &dyn ModelFiles,
    indices: &TensorRef,
    out: usize,
    in_: usize,
    meta_bits: Option<u32>,
    meta_file: &str,
) -> Result<(u32, bool), TrellisError> {
    let len = indices.entry.byte_len();
    let file = indices.file.clone();
    let tensor = indices.key().to_string();
    let header = || -> Result<u8, TrellisError> {
        let src = files.open(&indices.file)?;
        let mut b = [0u8; 1];
        src.read_at(indices.entry.start, &mut b)?;
        Ok(b[0])
    };
    let geometry = |bits: u32| {
        TrellisGeometry::new(out, in_, bits).map_err(|source| TrellisError::Decode {
            tensor: tensor.clone(),
            source,
        })
    };
    let length_error = |geo: &TrellisGeometry| TrellisError::IndicesLength {
        file: file.clone(),
        tensor: tensor.clone(),
        got: len,
        out,
        in_,
        bits: geo.bits,
        tiles_out: geo.tiles_out,
        tiles_in: geo.tiles_in,
        expected: geo.packed_len() as u64,
    };

    if let Some(bits) = meta_bits {
        let geo = geometry(bits)?;
        if len == geo.stream_len() as u64 {
            return Ok((bits, false));
        }
        if len != geo.packed_len() as u64 {
            return Err(length_error(&geo));
        }
        let h = header()?;
        if !(2..=8).contains(&h) {
            return Err(TrellisError::HeaderOutOfRange {
                file,
                tensor,
                header: h,
            });
        }
        if u32::from(h) != bits {
            return Err(TrellisError::HeaderMismatch {
                file,
                tensor,
                header: h,
                bits,
                meta_file: meta_file.to_string(),
            });
        }
        return Ok((bits, true));
    }

    // No metadata: the header byte, else the headerless length, says the bit width.
    let tiles = geometry(2)?.tiles() as u64;
    if len == 0 {
        return Err(length_error(&geometry(2)?));
    }
    let h = header()?;
    if (2..=8).contains(&h) {
        let geo = geometry(u32::from(h))?;
        if len == geo.packed_len() as u64 {
            return Ok((u32::from(h), true));
        }
    }
    let per_bit = tiles * 32;
    if len % per_bit == 0 && (2..=8).contains(&(len / per_bit)) {
        return Ok(((len / per_bit) as u32, false));
    }
    if !(2..=8).contains(&h) {
        return Err(TrellisError::HeaderOutOfRange {
            file,
            tensor,
            header: h,
        });
    }
    Err(length_error(&geometry(u32::from(h))?))
}

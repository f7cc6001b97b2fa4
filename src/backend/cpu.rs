//! The CPU backend: the reference every GPU op is checked against, and the way to run where no
//! GPU exists. Weights stay in their file format and are decoded one row at a time inside the
//! matrix products (a 2B-parameter BitNet never exists as f32); the other ops are the
//! definitions in [`crate::cpu::ops`]. Natively the matrix products use every core (rayon); in
//! the browser they run on one thread.

use super::{
    AttentionShape, Backend, Elementwise, KvShape, Logits, Readback, Tensor, Weight, WeightData,
};
use crate::cpu::bitlinear::quantize_activations;
use crate::cpu::ops::{self, RopeConfig};
use crate::quant::{self, GgmlType};
use crate::Error;

/// A weight as the file stores it, row by row.
struct CpuWeight {
    name: String,
    dtype: GgmlType,
    rows: usize,
    cols: usize,
    /// Bytes of one row.
    row_bytes: usize,
    data: Vec<u8>,
    /// Multiplies every product (I2_S's own `weight_scale`, or a separate `.scale` tensor).
    scale: f32,
}

impl CpuWeight {
    /// Decode row `r` into `out` (`cols` values, before `scale`).
    fn decode_row(&self, r: usize, out: &mut [f32]) -> Result<(), Error> {
        let bytes = &self.data[r * self.row_bytes..][..self.row_bytes];
        if self.dtype == GgmlType::I2_S {
            // Rows are whole 128-weight blocks: byte j of a block holds weights j, 32 + j,
            // 64 + j, 96 + j at shifts 6, 4, 2, 0; code c means c - 1.
            for (i, o) in out.iter_mut().enumerate() {
                let (block, within) = (i / 128, i % 128);
                let code = (bytes[block * 32 + within % 32] >> (6 - 2 * (within / 32))) & 3;
                if code == 3 {
                    return Err(Error::Quant(quant::QuantError::Invalid(format!(
                        "{}: I2_S code 3 at row {r}, column {i}",
                        self.name
                    ))));
                }
                *o = f32::from(code) - 1.0;
            }
            Ok(())
        } else {
            Ok(quant::dequantize_into(self.dtype, bytes, out)?)
        }
    }
}

/// The CPU backend.
pub struct CpuBackend {
    max_batch: usize,
    tensors: Vec<Vec<f32>>,
    names: Vec<String>,
    weights: Vec<CpuWeight>,
    /// Per layer `(k, v)`, each `(max_ctx, n_kv_heads, head_dim)`.
    cache: Vec<(Vec<f32>, Vec<f32>)>,
    kv: Option<KvShape>,
    rope: Option<RopeConfig>,
    ids: Vec<u32>,
    pos0: usize,
    /// The best candidate of the last pass that read back its top-k (for chained passes).
    best: Option<u32>,
}

impl CpuBackend {
    /// A backend whose passes take at most `max_batch` tokens.
    pub fn new(max_batch: usize) -> Self {
        CpuBackend {
            max_batch: max_batch.max(1),
            tensors: Vec::new(),
            names: Vec::new(),
            weights: Vec::new(),
            cache: Vec::new(),
            kv: None,
            rope: None,
            ids: Vec::new(),
            pos0: 0,
            best: None,
        }
    }

    fn tensor(&self, t: Tensor) -> &[f32] {
        &self.tensors[t.0 as usize]
    }

    /// Take a tensor out to write it while reading others (put back with `put`).
    fn take(&mut self, t: Tensor) -> Vec<f32> {
        std::mem::take(&mut self.tensors[t.0 as usize])
    }

    fn put(&mut self, t: Tensor, v: Vec<f32>) {
        self.tensors[t.0 as usize] = v;
    }

    fn need(&self, t: Tensor, len: usize, what: &str) -> Result<(), Error> {
        let have = self.tensors[t.0 as usize].len();
        if have < len {
            return Err(Error::Usage(format!(
                "{what}: buffer {} holds {have} values, the op needs {len}",
                self.names[t.0 as usize]
            )));
        }
        Ok(())
    }

    fn n_tokens(&self) -> usize {
        self.ids.len()
    }

    fn kv(&self) -> Result<KvShape, Error> {
        self.kv
            .ok_or_else(|| Error::Usage("attention before the KV cache was created".into()))
    }

    /// `y[t, r] = f(row r of W, t)` for `n` tokens, rows in parallel natively.
    fn rows_product(
        &self,
        w: &CpuWeight,
        n: usize,
        dot: impl Fn(&[f32], usize) -> f32 + Sync,
    ) -> Result<Vec<f32>, Error> {
        let block_rows = 32;
        let blocks: Vec<usize> = (0..w.rows.div_ceil(block_rows)).collect();
        let run = |&b: &usize| -> Result<Vec<f32>, Error> {
            let mut row = vec![0f32; w.cols];
            let r0 = b * block_rows;
            let r1 = (r0 + block_rows).min(w.rows);
            // (token, row within block)
            let mut out = vec![0f32; n * (r1 - r0)];
            for r in r0..r1 {
                w.decode_row(r, &mut row)?;
                for t in 0..n {
                    out[t * (r1 - r0) + (r - r0)] = dot(&row, t);
                }
            }
            Ok(out)
        };
        #[cfg(not(target_arch = "wasm32"))]
        let parts: Vec<Result<Vec<f32>, Error>> = {
            use rayon::prelude::*;
            blocks.par_iter().map(run).collect()
        };
        #[cfg(target_arch = "wasm32")]
        let parts: Vec<Result<Vec<f32>, Error>> = blocks.iter().map(run).collect();
        let mut y = vec![0f32; n * w.rows];
        for (b, part) in parts.into_iter().enumerate() {
            let part = part?;
            let r0 = b * block_rows;
            let width = part.len() / n.max(1);
            for t in 0..n {
                y[t * w.rows + r0..][..width].copy_from_slice(&part[t * width..][..width]);
            }
        }
        Ok(y)
    }
}

/// f32 dot product with eight partial sums (the order a vectorizing compiler keeps).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

impl Backend for CpuBackend {
    fn describe(&self) -> String {
        #[cfg(not(target_arch = "wasm32"))]
        return format!("cpu ({} threads)", rayon::current_num_threads());
        #[cfg(target_arch = "wasm32")]
        return "cpu".into();
    }

    fn max_batch(&self) -> usize {
        self.max_batch
    }

    fn load_weight(&mut self, w: WeightData<'_>) -> Result<Weight, Error> {
        let n = w.rows as u64 * w.cols as u64;
        let (row_bytes, own_scale) = if w.dtype == GgmlType::I2_S {
            if w.cols % 128 != 0 {
                return Err(Error::Usage(format!(
                    "{}: I2_S rows of {} weights (must be whole 128-weight blocks)",
                    w.name, w.cols
                )));
            }
            (w.cols / 4, quant::i2s_weight_scale(w.bytes, n as usize)?)
        } else {
            let rb = w.dtype.tensor_bytes(w.cols as u64).ok_or_else(|| {
                Error::Usage(format!(
                    "{}: rows of {} {} values are not whole blocks",
                    w.name, w.cols, w.dtype
                ))
            })?;
            if !w.dtype.can_dequantize() {
                return Err(quant::QuantError::Unsupported(w.dtype).into());
            }
            (rb as usize, 1.0)
        };
        let data_len = row_bytes * w.rows;
        if w.bytes.len() < data_len {
            return Err(Error::Usage(format!(
                "{}: {} bytes, a [{}, {}] {} weight needs {data_len}",
                w.name,
                w.bytes.len(),
                w.rows,
                w.cols,
                w.dtype
            )));
        }
        self.weights.push(CpuWeight {
            name: w.name.to_string(),
            dtype: w.dtype,
            rows: w.rows,
            cols: w.cols,
            row_bytes,
            data: w.bytes[..data_len].to_vec(),
            scale: own_scale * w.scale.unwrap_or(1.0),
        });
        Ok(Weight(self.weights.len() as u32 - 1))
    }

    fn load_vector(&mut self, name: &str, values: &[f32]) -> Result<Tensor, Error> {
        self.tensors.push(values.to_vec());
        self.names.push(name.to_string());
        Ok(Tensor(self.tensors.len() as u32 - 1))
    }

    fn alloc(&mut self, name: &str, len: usize) -> Result<Tensor, Error> {
        self.load_vector(name, &vec![0f32; len])
    }

    fn init_cache(&mut self, kv: KvShape, rope: &RopeConfig) -> Result<(), Error> {
        let len = kv.max_ctx * kv.n_kv_heads * kv.head_dim;
        self.cache = (0..kv.n_layers)
            .map(|_| (vec![0f32; len], vec![0f32; len]))
            .collect();
        self.kv = Some(kv);
        self.rope = Some(rope.clone());
        Ok(())
    }

    fn bytes_used(&self) -> u64 {
        let t: usize = self.tensors.iter().map(|t| t.len() * 4).sum();
        let w: usize = self.weights.iter().map(|w| w.data.len()).sum();
        let c: usize = self
            .cache
            .iter()
            .map(|(k, v)| (k.len() + v.len()) * 4)
            .sum();
        (t + w + c) as u64
    }

    fn begin(&mut self, ids: &[u32], pos0: usize) -> Result<(), Error> {
        super::check_pass(
            ids.len(),
            self.max_batch,
            pos0,
            self.kv.map(|kv| kv.max_ctx),
        )?;
        self.ids = ids.to_vec();
        self.pos0 = pos0;
        Ok(())
    }

    fn embed(&mut self, table: Weight, out: Tensor) -> Result<(), Error> {
        let w = &self.weights[table.0 as usize];
        let (cols, n) = (w.cols, self.n_tokens());
        self.need(out, n * cols, "embedding")?;
        let mut y = self.take(out);
        let w = &self.weights[table.0 as usize];
        let mut result = Ok(());
        for (t, &id) in self.ids.iter().enumerate() {
            if id as usize >= w.rows {
                result = Err(Error::Usage(format!(
                    "token id {id} is outside the vocabulary of {} tokens",
                    w.rows
                )));
                break;
            }
            let row = &mut y[t * cols..][..cols];
            if let Err(e) = w.decode_row(id as usize, row) {
                result = Err(e);
                break;
            }
            if w.scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= w.scale);
            }
        }
        self.put(out, y);
        result
    }

    fn rms_norm(
        &mut self,
        x: Tensor,
        weight: Tensor,
        out: Tensor,
        rows: usize,
        dim: usize,
        eps: f32,
    ) -> Result<(), Error> {
        self.need(x, rows * dim, "rms_norm x")?;
        self.need(out, rows * dim, "rms_norm out")?;
        self.need(weight, dim, "rms_norm weight")?;
        let y = ops::rms_norm(
            &self.tensor(x)[..rows * dim],
            &self.tensor(weight)[..dim],
            eps,
        );
        self.tensors[out.0 as usize][..rows * dim].copy_from_slice(&y);
        Ok(())
    }

    fn matmul(&mut self, w: Weight, x: Tensor, out: Tensor, rows: usize) -> Result<(), Error> {
        let cw = &self.weights[w.0 as usize];
        self.need(x, rows * cw.cols, "matmul x")?;
        self.need(out, rows * cw.rows, "matmul out")?;
        let xs = &self.tensor(x)[..rows * cw.cols];
        let cols = cw.cols;
        let scale = cw.scale;
        let y = self.rows_product(cw, rows, |row, t| dot(row, &xs[t * cols..][..cols]) * scale)?;
        self.tensors[out.0 as usize][..y.len()].copy_from_slice(&y);
        Ok(())
    }

    fn bitlinear(&mut self, w: Weight, x: Tensor, out: Tensor, rows: usize) -> Result<(), Error> {
        let cw = &self.weights[w.0 as usize];
        if !matches!(cw.dtype, GgmlType::I2_S | GgmlType::TQ1_0 | GgmlType::TQ2_0) {
            return Err(Error::Usage(format!(
                "{}: BitLinear over {} weights (ternary types only)",
                cw.name, cw.dtype
            )));
        }
        self.need(x, rows * cw.cols, "bitlinear x")?;
        self.need(out, rows * cw.rows, "bitlinear out")?;
        let cols = cw.cols;
        let (xq, scales) = quantize_activations(&self.tensor(x)[..rows * cols], cols);
        let xq: Vec<f32> = xq.into_iter().map(f32::from).collect();
        let scale = cw.scale;
        // Ternary weights times int8 values: every product and partial sum is an integer
        // below 2^24, so the f32 sum is exact and the result is `acc * weight_scale / s_t`
        // rounded twice, as transformers computes it in f32.
        let y = self.rows_product(cw, rows, |row, t| {
            dot(row, &xq[t * cols..][..cols]) * scale / scales[t]
        })?;
        self.tensors[out.0 as usize][..y.len()].copy_from_slice(&y);
        Ok(())
    }

    fn rope(&mut self, x: Tensor, n_heads: usize) -> Result<(), Error> {
        let cfg = self
            .rope
            .clone()
            .ok_or_else(|| Error::Usage("RoPE before the RoPE table was created".into()))?;
        let len = self.n_tokens() * n_heads * cfg.head_dim;
        self.need(x, len, "rope x")?;
        let pos0 = self.pos0;
        ops::rope(&mut self.tensors[x.0 as usize][..len], n_heads, pos0, &cfg);
        Ok(())
    }

    fn attention(
        &mut self,
        layer: usize,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        out: Tensor,
        n_heads: usize,
    ) -> Result<(), Error> {
        let kv = self.kv()?;
        let n = self.n_tokens();
        let row = kv.n_kv_heads * kv.head_dim;
        self.need(q, n * n_heads * kv.head_dim, "attention q")?;
        self.need(k, n * row, "attention k")?;
        self.need(v, n * row, "attention v")?;
        self.need(out, n * n_heads * kv.head_dim, "attention out")?;
        if layer >= self.cache.len() {
            return Err(Error::Usage(format!(
                "attention of layer {layer}: no such cache layer"
            )));
        }
        let start = self.pos0 * row;
        let (kn, vn) = (
            self.tensors[k.0 as usize][..n * row].to_vec(),
            self.tensors[v.0 as usize][..n * row].to_vec(),
        );
        let (kc, vc) = &mut self.cache[layer];
        kc[start..start + n * row].copy_from_slice(&kn);
        vc[start..start + n * row].copy_from_slice(&vn);
        let (kc, vc) = &self.cache[layer];
        let y = ops::attention(
            &self.tensors[q.0 as usize][..n * n_heads * kv.head_dim],
            kc,
            vc,
            self.pos0,
            AttentionShape {
                n_heads,
                n_kv_heads: kv.n_kv_heads,
                head_dim: kv.head_dim,
            },
        );
        self.tensors[out.0 as usize][..y.len()].copy_from_slice(&y);
        Ok(())
    }

    fn elementwise(
        &mut self,
        f: Elementwise,
        out: Tensor,
        first: Option<Tensor>,
        second: Option<Tensor>,
        len: usize,
    ) -> Result<(), Error> {
        self.need(out, len, "elementwise out")?;
        let a = &self.tensor(first.unwrap_or(out))[..len];
        let b = match (f.takes_second(), second) {
            (true, Some(s)) => {
                self.need(s, len, "elementwise second operand")?;
                &self.tensor(s)[..len]
            }
            (true, None) => return Err(Error::Usage(format!("{f:?} without its second operand"))),
            (false, _) => a,
        };
        let y = match f {
            Elementwise::Add => ops::add(a, b),
            Elementwise::SiluMul => ops::silu_mul(a, b),
            Elementwise::ReluSquared => ops::relu_squared(a),
            Elementwise::ReluSquaredMul => ops::relu_squared_mul(a, b),
        };
        self.tensors[out.0 as usize][..len].copy_from_slice(&y);
        Ok(())
    }

    fn copy_row(&mut self, src: Tensor, row: usize, cols: usize, dst: Tensor) -> Result<(), Error> {
        self.need(src, (row + 1) * cols, "copy_row src")?;
        self.need(dst, cols, "copy_row dst")?;
        let v = self.tensor(src)[row * cols..][..cols].to_vec();
        self.tensors[dst.0 as usize][..cols].copy_from_slice(&v);
        Ok(())
    }

    type Pending = Logits;
    type Prepared = std::convert::Infallible;

    fn begin_chained(&mut self, pos0: usize) -> Result<(), Error> {
        let id = self.best.ok_or_else(|| {
            Error::Usage("a chained pass needs a previous pass that read back its top-k".into())
        })?;
        self.begin(&[id], pos0)
    }

    fn submit(
        &mut self,
        logits: Tensor,
        rows: usize,
        vocab: usize,
        readback: Readback,
    ) -> Result<Logits, Error> {
        self.need(logits, rows * vocab, "logits")?;
        let l = &self.tensor(logits)[..rows * vocab];
        let last = &l[(rows - 1) * vocab..];
        Ok(match readback {
            Readback::All => Logits::Full(l.to_vec()),
            Readback::Last => Logits::Full(last.to_vec()),
            Readback::TopK(k) => {
                let top = ops::top_k(last, k.max(1));
                self.best = top.first().map(|c| c.0);
                Logits::Top(top.into_iter().take(k).collect())
            }
            Readback::Nothing => Logits::None,
        })
    }

    async fn wait(&mut self, pending: Logits) -> Result<Logits, Error> {
        Ok(pending)
    }
}

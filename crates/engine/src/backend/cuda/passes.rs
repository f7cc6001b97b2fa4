//! Running recorded passes (graphs for few tokens) and reading their results back; the
//! engine's backend interface.

use super::*;

impl CudaBackend {
    /// Queue a pass's ops: replay its graph (captured on first use) for few tokens, or launch
    /// them one by one.
    pub(super) fn run_pass(&mut self, rec: &CudaRecorded) -> Result<(), Error> {
        let n = rec.batch.tokens();
        let max_len = rec
            .batch
            .spans
            .iter()
            .map(|s| s.pos0 + s.len)
            .max()
            .unwrap_or(0);
        // cuBLAS products (a weight decoded to f16 or f32) are launched, not captured.
        let graphable = self.use_graphs
            && self.profile.is_none()
            && n <= GRAPH_MAX_TOKENS
            && rec.needs.wide == 0;
        self.quantized = None;
        if !graphable {
            return self.run_ops(&rec.ops, n, max_len);
        }
        let key = (rec.plan_id, n);
        if !self.graphs.contains_key(&key) {
            self.dev.begin_capture().map_err(gds)?;
            let result = self.run_ops(&rec.ops, n, max_len);
            let graph = self.dev.end_capture();
            result?;
            self.graphs.insert(key, graph.map_err(gds)?);
        }
        let g = &self.graphs[&key];
        self.dev.launch_graph(g).map_err(gds)
    }

    pub(super) fn host(&mut self, bytes: usize) -> Result<HostBuffer, Error> {
        if let Some(i) = self.host_pool.iter().position(|h| h.bytes() >= bytes) {
            return Ok(self.host_pool.swap_remove(i));
        }
        self.dev.host_buffer(bytes.next_power_of_two()).map_err(gds)
    }

    /// Queue the pass's readback.
    pub(super) fn read(
        &mut self,
        rec: &CudaRecorded,
    ) -> Result<(PendingRead, Option<HostBuffer>), Error> {
        let Some(&Op::Read {
            logits,
            rows,
            vocab,
            what,
        }) = rec
            .ops
            .iter()
            .rev()
            .find(|op| matches!(op, Op::Read { .. }))
        else {
            return Ok((PendingRead::Nothing, None));
        };
        let full = |this: &mut Self| -> Result<(PendingRead, Option<HostBuffer>), Error> {
            let values = rows * vocab;
            let mut host = this.host(values * 4)?;
            this.dev
                .download(&mut host, this.ptr(logits), values * 4)
                .map_err(gds)?;
            Ok((PendingRead::Full { values }, Some(host)))
        };
        match what {
            Readback::Nothing => Ok((PendingRead::Nothing, None)),
            Readback::All | Readback::Last => full(self),
            Readback::TopK(k) => {
                let kk = k.max(1);
                let segs = vocab.div_ceil(TOPK_SEG);
                if kk > TOPK_MAX || segs * kk > TOPK_MERGE_MAX {
                    let (_, host) = full(self)?;
                    return Ok((
                        PendingRead::HostTop {
                            rows,
                            values: rows * vocab,
                            take: k,
                        },
                        host,
                    ));
                }
                let (_, _, ov, _) = self.topk_slots(rows, segs, kk);
                let bytes = rows * kk * 8;
                let mut host = self.host(bytes)?;
                self.dev.download(&mut host, ov, bytes).map_err(gds)?;
                Ok((
                    PendingRead::Top {
                        rows,
                        k: kk,
                        take: k,
                    },
                    Some(host),
                ))
            }
        }
    }
}

impl Backend for CudaBackend {
    type Plan = CudaPlan;
    type Recorded = CudaRecorded;
    type Pending = CudaPending;

    fn describe(&self) -> String {
        let i = self.dev.info();
        format!("cuda: {} ({})", i.name, i.arch())
    }

    fn limits(&self) -> Limits {
        Limits {
            max_batch: self.max_batch,
            max_tensor_len: u32::MAX as usize,
            runs_ahead: true,
            arithmetic: self.arithmetic,
        }
    }

    fn kv_request(&self) -> Option<KvType> {
        self.kv_request
    }

    fn set_arithmetic(&mut self, arithmetic: Arithmetic) {
        self.arithmetic = arithmetic;
    }

    /// Under fast arithmetic: int8 activations for one token where the format has an integer
    /// form (dp4a), f32 for a few tokens (the products read the weight once for all of them),
    /// f16 operands on tensor cores (cuBLAS) beyond.
    fn activations(&self, w: Weight, rows: usize) -> Activations {
        if self.arithmetic == Arithmetic::Exact {
            return Activations::F32;
        }
        match self.weights.get(w.0 as usize) {
            Some(c) if Activations::q8_for(c.dtype, c.cols, rows) => Activations::Q8,
            Some(_) if rows > GEMV_MAX_TOKENS => Activations::F16,
            _ => Activations::F32,
        }
    }

    fn reads_located(&self, dtype: GgmlType) -> bool {
        // I2_S carries its scale and codes that are checked at load in its bytes.
        self.vram_budget.is_some() && dtype != GgmlType::I2_S
    }

    fn load_weight(&mut self, w: WeightData<'_>) -> Result<Weight, Error> {
        let unsupported = |why: String| {
            Error::from(BackendError::UnsupportedWeight {
                name: w.name.to_string(),
                why,
            })
        };
        let suffix = format_suffix(w.dtype.name())
            .ok_or_else(|| unsupported(format!("{} weights on CUDA", w.dtype)))?;
        if w.cols == 0 || w.cols % 32 != 0 {
            return Err(unsupported(format!(
                "rows of {} values (CUDA takes whole 32-value chunks)",
                w.cols
            )));
        }
        let row_bytes = w.dtype.row_bytes(w.cols as u64).ok_or_else(|| {
            unsupported(format!(
                "rows of {} {} values are not whole blocks",
                w.cols, w.dtype
            ))
        })? as usize;
        let n = w.rows as u64 * w.cols as u64;
        let data_len = row_bytes * w.rows;
        let deferred = match (self.vram_budget, w.layer, w.location) {
            (Some(_), Some(layer), Some(spans)) => Some((layer, spans)),
            _ => None,
        };
        // Bytes the loader left unread (`reads_located`): read from the files once placed.
        let unread = w.bytes.is_empty() && deferred.is_some() && self.reads_located(w.dtype);
        let own_scale = match unread {
            true => 1.0,
            false => quant::tensor_scale(w.dtype, w.bytes, n as usize)?.unwrap_or(1.0),
        };
        if !unread && w.bytes.len() < data_len {
            return Err(BackendError::WeightBytes {
                name: w.name.to_string(),
                have: w.bytes.len(),
                rows: w.rows,
                cols: w.cols,
                dtype: w.dtype,
                need: data_len,
            }
            .into());
        }
        let data = w.bytes.get(..data_len).unwrap_or_default();
        // Codes the reference refuses (I2_S code 3) are refused here too, not computed.
        if w.dtype == GgmlType::I2_S {
            if let Some(at) = data
                .iter()
                .position(|&b| (0..4).any(|g| (b >> (2 * g)) & 3 == 3))
            {
                return Err(quant::QuantError::InvalidCode {
                    dtype: w.dtype,
                    index: (at * 4) as u64,
                    code: 3,
                }
                .into());
            }
        }
        let scale = own_scale * w.scale.unwrap_or(1.0);
        let dev_len = match w.dtype {
            GgmlType::Q6_K => data_len / 210 * Q6K_SLOT,
            _ => data_len,
        };
        if let Some((layer, spans)) = deferred {
            self.deferred.push(stream::Deferred {
                weight: self.weights.len(),
                layer,
                spans: spans.to_vec(),
                raw_len: data_len,
                dev_len,
                q6k: w.dtype == GgmlType::Q6_K,
            });
            self.weights.push(CudaWeight {
                name: w.name.to_string(),
                dtype: w.dtype,
                rows: w.rows,
                cols: w.cols,
                row_bytes: dev_len / w.rows,
                buf: None,
                ptr: 0,
                scale,
                suffix,
            });
            return Ok(Weight(self.weights.len() as u32 - 1));
        }
        // Q6_K's 210-byte blocks go to 224-byte slots (quant.cuh's Q6K_SLOT: 16-byte aligned
        // fields).
        let padded;
        let (data, row_bytes) = if w.dtype == GgmlType::Q6_K {
            padded = pad_blocks(data, 210, Q6K_SLOT);
            (&padded[..], row_bytes / 210 * Q6K_SLOT)
        } else {
            (data, row_bytes)
        };
        let buf = self.dev.alloc(data.len()).map_err(gds)?;
        self.dev.upload(buf.ptr(), data).map_err(gds)?;
        self.bytes += data.len() as u64;
        self.weights.push(CudaWeight {
            name: w.name.to_string(),
            dtype: w.dtype,
            rows: w.rows,
            cols: w.cols,
            row_bytes,
            ptr: buf.ptr(),
            buf: Some(buf),
            scale,
            suffix,
        });
        Ok(Weight(self.weights.len() as u32 - 1))
    }

    fn load_vector(&mut self, name: &str, values: &[f32]) -> Result<Tensor, Error> {
        let t = self.alloc(name, values.len())?;
        self.dev
            .upload(self.ptr(t), bytemuck::cast_slice(values))
            .map_err(gds)?;
        Ok(t)
    }

    fn write_vector(&mut self, t: Tensor, values: &[f32]) -> Result<(), Error> {
        if self
            .tensors
            .get(t.0 as usize)
            .is_none_or(|c| c.len < values.len())
        {
            return Err(Error::Internal("a vector written past its end"));
        }
        // A synchronous copy after the stream's work so far.
        self.dev
            .upload(self.ptr(t), bytemuck::cast_slice(values))
            .map_err(gds)
    }

    fn alloc(&mut self, name: &str, len: usize) -> Result<Tensor, Error> {
        let buf = self.dev.alloc(len * 4).map_err(gds)?;
        self.bytes += (len * 4) as u64;
        self.tensors.push(CudaTensor {
            name: name.to_string(),
            len,
            buf,
        });
        Ok(Tensor(self.tensors.len() as u32 - 1))
    }

    fn init_cache(&mut self, kv: KvShape, rope: &[RopeConfig]) -> Result<(), Error> {
        let elems = kv.n_seqs * kv.max_ctx * kv.n_kv_heads * kv.head_dim;
        let bytes = elems
            * match kv.dtype {
                KvType::F16 => 2,
                KvType::F32 => 4,
            };
        self.cache.clear();
        for _ in 0..kv.n_layers {
            let k = self.dev.alloc(bytes).map_err(gds)?;
            let v = self.dev.alloc(bytes).map_err(gds)?;
            self.cache.push((k, v));
        }
        self.bytes += (2 * bytes * kv.n_layers) as u64;
        self.rope.clear();
        for r in rope {
            let freqs = r.inv_freqs();
            let fbuf = self.dev.alloc(freqs.len().max(1) * 8).map_err(gds)?;
            self.dev
                .upload(fbuf.ptr(), bytemuck::cast_slice(&freqs))
                .map_err(gds)?;
            self.rope.push((fbuf, r.clone()));
        }
        self.kv = Some(kv);
        self.graphs.clear();
        if !self.deferred.is_empty() {
            self.start_streaming()?;
        }
        Ok(())
    }

    fn bytes_used(&self) -> u64 {
        let h = &self.have;
        self.bytes + (h.xq + h.xd + h.xh + h.wide + h.part + h.topk) as u64
    }

    fn plan(&self, pass: &Pass) -> Result<CudaPlan, Error> {
        let (needs, vocab) = self.check(pass)?;
        Ok(CudaPlan {
            id: self.next_plan.fetch_add(1, Ordering::Relaxed),
            ops: pass.ops.clone().into(),
            needs,
            vocab,
        })
    }

    fn plan_lines(&self, plan: &CudaPlan, names: &Names) -> Vec<String> {
        let mut lines = Vec::new();
        let mut i = 0;
        while i < plan.ops.len() {
            match self.fusion_at(&plan.ops[i..]) {
                Some(f) => {
                    let k = f.ops();
                    let what = match f {
                        Fused::Norm { .. } => "norm_fused",
                        Fused::ElementwiseQ8 { .. } => "elementwise_q8",
                        Fused::RopeAttention { .. } => "rope_store, attention",
                        Fused::Products { .. } => "products in one launch",
                    };
                    lines.push(format!("fused ({what}):"));
                    for op in &plan.ops[i..i + k] {
                        lines.push(format!("  {}", op.describe(names)));
                    }
                    i += k;
                }
                None => {
                    lines.push(plan.ops[i].describe(names));
                    i += 1;
                }
            }
        }
        lines
    }

    fn set_fusions(&mut self, on: bool) {
        self.fusions = on;
        self.graphs.clear();
    }

    fn record(&mut self, plan: &CudaPlan, batch: &Batch) -> Result<CudaRecorded, Error> {
        check_batch(batch, self.max_batch, self.kv.as_ref())?;
        Ok(CudaRecorded {
            plan_id: plan.id,
            ops: plan.ops.clone(),
            needs: plan.needs,
            vocab: plan.vocab,
            batch: batch.clone(),
        })
    }

    fn submit(&mut self, pass: CudaRecorded, tokens: Tokens<'_>) -> Result<CudaPending, Error> {
        self.dev.bind().map_err(gds)?;
        let n = pass.batch.tokens();
        match tokens {
            Tokens::Ids(ids) => {
                if ids.len() != n {
                    return Err(BatchError::TokenCount {
                        ids: ids.len(),
                        tokens: n,
                    }
                    .into());
                }
                if let (Some(vocab), Some(&id)) = (
                    pass.vocab,
                    ids.iter()
                        .find(|&&id| pass.vocab.is_some_and(|v| id as usize >= v)),
                ) {
                    return Err(BatchError::TokenOutOfVocab { id, n_vocab: vocab }.into());
                }
                self.upload_u32(self.tokens.ids.ptr(), ids)?;
            }
            Tokens::Chained => {
                if n != 1 {
                    return Err(BatchError::TokenCount { ids: 1, tokens: n }.into());
                }
                if !self.chained_ready {
                    return Err(BatchError::ChainWithoutTopK.into());
                }
                self.dev
                    .copy(self.tokens.ids.ptr(), self.tokens.best.ptr(), 4)
                    .map_err(gds)?;
            }
        }
        let (pos, seq): (Vec<u32>, Vec<u32>) = pass
            .batch
            .positions()
            .map(|(s, p)| (p as u32, s as u32))
            .unzip();
        self.upload_u32(self.tokens.pos.ptr(), &pos)?;
        self.upload_u32(self.tokens.seq.ptr(), &seq)?;
        // The tiles of a plain attention's flash kernel (unused by windowed or capped ones).
        if self
            .kv
            .as_ref()
            .is_some_and(|kv| Self::flash(kv, n, AttentionScores::default()))
        {
            let tiles = flash_tiles(&pass.batch);
            self.upload_u32(self.tokens.tiles.ptr(), &tiles)?;
            self.tiles = tiles.len() / 2;
        }
        self.ensure_scratch(&pass.needs)?;
        self.run_pass(&pass)?;
        let (read, host) = self.read(&pass)?;
        match read {
            PendingRead::Top { .. } => self.chained_ready = true,
            // Selected on the host: the device holds no best id for a chained pass.
            PendingRead::HostTop { .. } => self.chained_ready = false,
            _ => {}
        }
        let event = match read {
            PendingRead::Nothing => None,
            _ => Some(self.dev.record().map_err(gds)?),
        };
        Ok(CudaPending { read, event, host })
    }

    async fn wait(&mut self, pending: CudaPending) -> Result<Logits, Error> {
        if let Some(e) = &pending.event {
            e.synchronize().map_err(gds)?;
        }
        let out = match (&pending.read, &pending.host) {
            (PendingRead::Nothing, _) | (_, None) => Logits::None,
            (PendingRead::Full { values }, Some(h)) => {
                Logits::Full(bytemuck::pod_collect_to_vec(&h.as_slice()[..values * 4]))
            }
            (PendingRead::HostTop { rows, values, take }, Some(h)) => {
                let values: Vec<f32> = bytemuck::pod_collect_to_vec(&h.as_slice()[..values * 4]);
                Logits::Top(host_top(&values, *rows, *take))
            }
            (PendingRead::Top { rows, k, take }, Some(h)) => {
                let bytes = h.as_slice();
                let vals: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes[..rows * k * 4]);
                let ids: Vec<u32> =
                    bytemuck::pod_collect_to_vec(&bytes[rows * k * 4..rows * k * 8]);
                Logits::Top(
                    (0..*rows)
                        .map(|r| {
                            (0..*k)
                                .map(|j| (ids[r * k + j], vals[r * k + j]))
                                .filter(|&(id, _)| id != u32::MAX)
                                .take(*take)
                                .collect()
                        })
                        .collect(),
                )
            }
        };
        if let Some(h) = pending.host {
            self.host_pool.push(h);
        }
        Ok(out)
    }
}

impl CudaBackend {
    fn upload_u32(&self, dst: u64, values: &[u32]) -> Result<(), Error> {
        self.dev
            .upload_small(dst, bytemuck::cast_slice(values))
            .map_err(gds)
    }
}

//! The GPU forward pass of `llama`, `qwen2` and `qwen3`: one compute pass and one submit per
//! step, whether the step is a prefill ubatch, a single decode token or a verify batch.
//!
//! Per layer (x `[m, d]` is the residual stream, `m` the rows of this step):
//! ```text
//! xn = rms_norm(x) * attn_norm            q,k,v = xn · Wq,Wk,Wv (+ qwen2 biases)
//! q,k = rms_norm per head (qwen3)         q,k = rope(q,k, positions)
//! cache[positions] = k, v                 attn = attention(q, cache[0..kv_len], causal)
//! xn = attn · Wo;  x += xn                xn = rms_norm(x) * ffn_norm
//! glu = silu(xn · Wgate) * (xn · Wup)     xn = glu · Wdown;  x += xn
//! ```
//! then `xn = rms_norm(x) * output_norm`, logits `[n_out, V]` = the last `n_out` rows of xn ·
//! LM head, and the argmax of each logits row. Every buffer is created from the memory plan.
//! Ops are built once for the plan's largest batch and resized per step; matmul dispatches
//! depend on the row count, so they are built per (rows, logit rows) and cached.

use std::collections::HashMap;

use crate::gpu::buffers::{read_back, upload};
use crate::gpu::GpuContext;
use crate::kernels::attention::{
    Attention, AttnBuffers, AttnIo, AttnShape, FusedAttention, KvLayout, KvStore, KvType, MaskMode,
};
use crate::kernels::launch::Dispatch;
use crate::kernels::matmul::{embed_dispatches, matmul_dispatches, Family, GpuWeight, MatmulIo};
use crate::kernels::ops::binary::{Binary, BinaryOp};
use crate::kernels::ops::copy::{CopyParams, CopyRows};
use crate::kernels::ops::glu::{Glu, GluOp};
use crate::kernels::ops::norm::RmsNorm;
use crate::kernels::ops::rope::{rope_freqs, Rope, RopeConfig, RopeMode, RopeShape};
use crate::kernels::ops::select::Select;
use crate::kernels::ops::Io;
use crate::kv_cache::KvCache;
pub use crate::memory::alloc::Allocator;
use crate::{Error, Result};

use super::hparams::Hparams;
use super::weights::ModelWeights;

/// Matmul dispatch sets kept at most (one per (rows, logit rows) shape).
const MATMUL_CACHE: usize = 8;

/// Device buffers of one run, created from the plan by name.
#[derive(Debug)]
pub struct Buffers {
    pub x: wgpu::Buffer,
    pub xn: wgpu::Buffer,
    pub q: wgpu::Buffer,
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub attn: wgpu::Buffer,
    pub gate: wgpu::Buffer,
    pub up: wgpu::Buffer,
    pub glu: wgpu::Buffer,
    /// Split-KV partials of the decode attention.
    pub partials: wgpu::Buffer,
    /// Running (max, sum, next split) of the fused multi-row attention.
    pub attn_state: wgpu::Buffer,
    pub logits: wgpu::Buffer,
    pub tokens: wgpu::Buffer,
    pub positions: wgpu::Buffer,
    /// Per layer: K cache, V cache.
    pub kv: Vec<[wgpu::Buffer; 2]>,
}

/// One layer's ops (built once for the largest batch).
#[derive(Debug)]
struct LayerOps {
    attn_norm: RmsNorm,
    bias: Vec<BinaryOp>,
    qk_norm: Vec<RmsNorm>,
    rope_q: Rope,
    rope_k: Rope,
    store_k: KvStore,
    store_v: KvStore,
    /// One query row: split-KV over the whole context, then an in-order reduce.
    attn_decode: Attention,
    /// Several rows (prefill, verify): the fused kernel, bit-identical per row to the decode path.
    attn_multi: FusedAttention,
    ffn_norm: RmsNorm,
    glu: GluOp,
}

/// Dispatches that depend on the row count: matmuls, the embedding gather and the residual adds
/// (whose operand length is fixed at build), for one (rows, logit rows) shape.
#[derive(Debug)]
struct MatmulSet {
    embed: Vec<Dispatch>,
    /// Per layer: q, k, v, o, gate, up, down.
    layers: Vec<[Vec<Dispatch>; 7]>,
    /// Per layer: x += attention output, x += FFN output.
    adds: Vec<[BinaryOp; 2]>,
    lm_head: Vec<Dispatch>,
}

/// The forward pass of one model with its KV cache.
pub struct Forward {
    pub hp: Hparams,
    pub weights: ModelWeights,
    pub buffers: Buffers,
    pub kv: KvCache,
    layers: Vec<LayerOps>,
    final_norm: RmsNorm,
    argmax: Select,
    argmax_out: wgpu::Buffer,
    matmuls: HashMap<(u32, u32), MatmulSet>,
    family: Family,
    max_rows: u32,
    max_logit_rows: u32,
    rows: u32,
    /// Logit rows of the last step.
    pub n_logits: u32,
    /// Rows the argmax is sized for now.
    argmax_rows: u32,
    /// DSpark taps: (layer whose input is captured, the copy into the tap staging buffer).
    taps: Vec<(u32, CopyRows)>,
}

fn kv_type(t: crate::gguf::GgmlType) -> Result<KvType> {
    Ok(KvType::from_ggml(t)?)
}

impl Forward {
    /// Build every op for `params`, creating every buffer through `alloc` (which holds the plan
    /// made with the same `params`) and using uploaded `weights`.
    pub fn new(
        ctx: &GpuContext,
        hp: Hparams,
        weights: ModelWeights,
        params: &crate::memory::RunParams,
        alloc: &mut Allocator<'_>,
    ) -> Result<Forward> {
        let max_rows = u32::try_from(crate::memory::target::max_rows(params)).unwrap_or(u32::MAX);
        let max_logit_rows =
            u32::try_from(crate::memory::target::logit_rows(params)).unwrap_or(u32::MAX);
        let mut kv = Vec::with_capacity(hp.n_layer as usize);
        for il in 0..hp.n_layer {
            kv.push([
                alloc.storage(&format!("kv.k.{il}"))?,
                alloc.storage(&format!("kv.v.{il}"))?,
            ]);
        }
        let b = Buffers {
            x: alloc.storage("act.x")?,
            xn: alloc.storage("act.xn")?,
            q: alloc.storage("act.q")?,
            k: alloc.storage("act.k")?,
            v: alloc.storage("act.v")?,
            attn: alloc.storage("act.attn")?,
            gate: alloc.storage("act.gate")?,
            up: alloc.storage("act.up")?,
            glu: alloc.storage("act.glu")?,
            partials: alloc.storage("act.attn_partials")?,
            attn_state: alloc.storage("act.attn_state")?,
            logits: alloc.storage("logits")?,
            tokens: alloc.storage("io.tokens")?,
            positions: alloc.storage("io.positions")?,
            kv,
        };
        let rope_cfg = RopeConfig {
            n_rot: hp.n_rot,
            mode: if hp.rope_neox {
                RopeMode::Neox
            } else {
                RopeMode::Normal
            },
            freq_base: hp.rope_base,
            freq_scale: hp.rope_freq_scale,
        };
        let freqs = rope_freqs(&rope_cfg, weights.rope_freqs.as_deref())?;
        let freqs = crate::gpu::buffers::create_storage_init(
            ctx,
            "rope freqs",
            bytemuck::cast_slice(&freqs),
        )?;
        let (d, eps) = (hp.n_embd, hp.rms_eps);
        let k_layout = KvLayout::new(
            kv_type(params.type_k)?,
            params.n_ctx,
            hp.n_head_kv,
            hp.head_dim,
        )?;
        let v_layout = KvLayout::new(
            kv_type(params.type_v)?,
            params.n_ctx,
            hp.n_head_kv,
            hp.head_dim_v,
        )?;
        let mut layers = Vec::with_capacity(hp.n_layer as usize);
        for (il, lw) in weights.layers.iter().enumerate() {
            let [kc, vc] = &b.kv[il];
            let mut bias = Vec::new();
            if let Some([bq, bk, bv]) = &lw.bias_qkv {
                for (buf, bb, w) in [
                    (&b.q, bq, hp.q_dim()),
                    (&b.k, bk, hp.k_dim()),
                    (&b.v, bv, hp.v_dim()),
                ] {
                    bias.push(BinaryOp::new(
                        ctx,
                        Io::InPlace(buf),
                        Binary::Add { b: bb, n_b: w },
                        max_rows * w,
                    )?);
                }
            }
            let mut qk_norm = Vec::new();
            if let Some([qn, kn]) = &lw.qk_norm {
                qk_norm.push(RmsNorm::new(
                    ctx,
                    Io::InPlace(&b.q),
                    Some(qn),
                    max_rows * hp.n_head,
                    hp.head_dim,
                    eps,
                )?);
                qk_norm.push(RmsNorm::new(
                    ctx,
                    Io::InPlace(&b.k),
                    Some(kn),
                    max_rows * hp.n_head_kv,
                    hp.head_dim,
                    eps,
                )?);
            }
            let rope = |buf: &wgpu::Buffer, heads: u32| {
                let shape = RopeShape {
                    n_tokens: max_rows,
                    n_heads: heads,
                    head_dim: hp.head_dim,
                };
                Rope::new(
                    ctx,
                    Io::InPlace(buf),
                    &b.positions,
                    &freqs,
                    shape,
                    &rope_cfg,
                )
            };
            let shape = AttnShape {
                kv: k_layout,
                n_head: hp.n_head,
                max_q: max_rows,
                max_kv_len: params.n_ctx,
                scale: AttnShape::default_scale(hp.head_dim),
                mask: MaskMode::Causal,
            };
            let io = AttnIo {
                q: &b.q,
                k_cache: kc,
                v_cache: vc,
                positions: Some(&b.positions),
                mask: None,
                out: &b.attn,
            };
            let attn_decode = Attention::new(
                ctx,
                AttnShape { max_q: 1, ..shape },
                AttnBuffers::new(io, &b.partials),
            )?;
            let attn_multi = FusedAttention::new(ctx, shape, io, &b.attn_state)?;
            layers.push(LayerOps {
                attn_norm: RmsNorm::new(
                    ctx,
                    Io::Out {
                        src: &b.x,
                        dst: &b.xn,
                    },
                    Some(&lw.attn_norm),
                    max_rows,
                    d,
                    eps,
                )?,
                bias,
                qk_norm,
                rope_q: rope(&b.q, hp.n_head)?,
                rope_k: rope(&b.k, hp.n_head_kv)?,
                store_k: KvStore::new(ctx, k_layout, kc, &b.k, &b.positions, max_rows)?,
                store_v: KvStore::new(ctx, v_layout, vc, &b.v, &b.positions, max_rows)?,
                attn_decode,
                attn_multi,
                ffn_norm: RmsNorm::new(
                    ctx,
                    Io::Out {
                        src: &b.x,
                        dst: &b.xn,
                    },
                    Some(&lw.ffn_norm),
                    max_rows,
                    d,
                    eps,
                )?,
                glu: GluOp::new(ctx, Glu::Swiglu, &b.gate, &b.up, &b.glu, max_rows * hp.n_ff)?,
            });
        }
        let final_norm = RmsNorm::new(
            ctx,
            Io::Out {
                src: &b.x,
                dst: &b.xn,
            },
            Some(&weights.output_norm),
            max_rows,
            d,
            eps,
        )?;
        let argmax_out = alloc.storage("io.argmax")?;
        let argmax = Select::argmax(ctx, &b.logits, &argmax_out, max_logit_rows, hp.n_vocab)?;
        alloc
            .records
            .push(("sample.partials".to_string(), argmax.scratch.size()));
        Ok(Forward {
            kv: KvCache::new(params.n_ctx, 1),
            hp,
            weights,
            buffers: b,
            layers,
            final_norm,
            argmax,
            argmax_out,
            matmuls: HashMap::new(),
            family: Family::for_context(ctx),
            max_rows,
            max_logit_rows,
            rows: max_rows,
            n_logits: max_logit_rows,
            argmax_rows: max_logit_rows,
            taps: Vec::new(),
        })
    }

    /// Capture, from the next step on, the residual stream entering each of `layers` (`n_layer`
    /// = the output of the last layer, before the final norm) for every processed row into
    /// `staging` `[max_rows, layers.len() × d]`: row r, tap k at columns `k·d..(k+1)·d` (the
    /// DSpark fusion order). Costs one small copy dispatch per tap inside the step's pass; an
    /// empty list (the default) costs nothing.
    pub fn set_taps(
        &mut self,
        ctx: &GpuContext,
        layers: &[u32],
        staging: &wgpu::Buffer,
    ) -> Result<()> {
        let d = self.hp.n_embd;
        let width = d * layers.len() as u32;
        let mut taps = Vec::with_capacity(layers.len());
        for (k, &layer) in layers.iter().enumerate() {
            if layer > self.hp.n_layer {
                return Err(Error::Usage(format!(
                    "tap layer {layer}: the model has {} layers (taps 0..={})",
                    self.hp.n_layer, self.hp.n_layer
                )));
            }
            let params = CopyParams {
                n_rows: self.max_rows,
                n_cols: d,
                src_stride: d,
                dst_stride: width,
                src_off: 0,
                dst_off: k as u32 * d,
                _pad: [0; 2],
            };
            let mut copy = CopyRows::new(ctx, &self.buffers.x, staging, params)?;
            copy.set_rows(ctx, self.rows)?;
            taps.push((layer, copy));
        }
        self.taps = taps;
        Ok(())
    }

    /// Largest batch one step takes.
    pub fn max_rows(&self) -> u32 {
        self.max_rows
    }

    fn matmul_set(&self, ctx: &GpuContext, m: u32, n_logits: u32) -> Result<MatmulSet> {
        let b = &self.buffers;
        let mm = |w: &GpuWeight, x: &wgpu::Buffer, y: &wgpu::Buffer| {
            matmul_dispatches(ctx, self.family, w, &MatmulIo::dense(w, x, y, m))
        };
        let n = m * self.hp.n_embd;
        let add = || BinaryOp::new(ctx, Io::InPlace(&b.x), Binary::Add { b: &b.xn, n_b: n }, n);
        let mut adds = Vec::with_capacity(self.weights.layers.len());
        let mut layers = Vec::with_capacity(self.weights.layers.len());
        for lw in &self.weights.layers {
            adds.push([add()?, add()?]);
            layers.push([
                mm(&lw.wq, &b.xn, &b.q)?,
                mm(&lw.wk, &b.xn, &b.k)?,
                mm(&lw.wv, &b.xn, &b.v)?,
                mm(&lw.wo, &b.attn, &b.xn)?,
                mm(&lw.gate, &b.xn, &b.gate)?,
                mm(&lw.up, &b.xn, &b.up)?,
                mm(&lw.down, &b.glu, &b.xn)?,
            ]);
        }
        let head = self.weights.lm_head();
        let d = self.hp.n_embd;
        let io = MatmulIo {
            x: &b.xn,
            x_off: (m - n_logits) * d,
            x_stride: d,
            y: &b.logits,
            y_off: 0,
            y_stride: head.n,
            m: n_logits,
        };
        Ok(MatmulSet {
            embed: embed_dispatches(ctx, &self.weights.token_embd, &b.tokens, 0, m, &b.x, 0)?,
            layers,
            adds,
            lm_head: matmul_dispatches(ctx, self.family, head, &io)?,
        })
    }

    fn resize(&mut self, ctx: &GpuContext, m: u32, n_logits: u32) -> Result<()> {
        if m != self.rows {
            let hp = &self.hp;
            for l in &mut self.layers {
                l.attn_norm.set_rows(ctx, m)?;
                for (op, w) in l.bias.iter_mut().zip([hp.q_dim(), hp.k_dim(), hp.v_dim()]) {
                    op.set_len(ctx, m * w)?;
                }
                for (op, heads) in l.qk_norm.iter_mut().zip([hp.n_head, hp.n_head_kv]) {
                    op.set_rows(ctx, m * heads)?;
                }
                l.rope_q.set_tokens(ctx, m)?;
                l.rope_k.set_tokens(ctx, m)?;
                l.store_k.set_n_tokens(ctx, m)?;
                l.store_v.set_n_tokens(ctx, m)?;
                l.ffn_norm.set_rows(ctx, m)?;
                l.glu.set_len(ctx, m * hp.n_ff)?;
            }
            self.final_norm.set_rows(ctx, m)?;
            for (_, copy) in &mut self.taps {
                copy.set_rows(ctx, m)?;
            }
            self.rows = m;
        }
        if n_logits > 0 && n_logits != self.argmax_rows {
            self.argmax.set_rows(ctx, n_logits)?;
            self.argmax_rows = n_logits;
        }
        self.n_logits = n_logits;
        if !self.matmuls.contains_key(&(m, n_logits)) {
            // Shapes other than the hot ones (decode, full ubatches, verify) come and go with
            // prompt lengths: keep the cache small rather than grow it per shape seen.
            if self.matmuls.len() >= MATMUL_CACHE {
                self.matmuls.clear();
            }
            let set = self.matmul_set(ctx, m, n_logits)?;
            self.matmuls.insert((m, n_logits), set);
        }
        Ok(())
    }

    /// Run `tokens` at the next positions of the cache; compute logits (and their argmax) for
    /// the last `n_logits` rows (0: none, for prefill chunks before the last). One compute pass,
    /// one submit.
    pub fn step(&mut self, ctx: &GpuContext, tokens: &[u32], n_logits: u32) -> Result<()> {
        self.run(ctx, tokens, n_logits, false).map(|_| ())
    }

    /// [`Forward::step`], also reading back the residual stream after every layer
    /// (`l_out-{il}`, `[m, d]` each): one submit per layer, for comparing with the CPU oracle.
    pub fn step_captured(
        &mut self,
        ctx: &GpuContext,
        tokens: &[u32],
        n_logits: u32,
    ) -> Result<Vec<Vec<f32>>> {
        self.run(ctx, tokens, n_logits, true)
    }

    fn run(
        &mut self,
        ctx: &GpuContext,
        tokens: &[u32],
        n_logits: u32,
        capture: bool,
    ) -> Result<Vec<Vec<f32>>> {
        let m = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        if m == 0 || m > self.max_rows || n_logits > m.min(self.max_logit_rows) {
            return Err(Error::Usage(format!(
                "a step of {m} rows with {n_logits} logit rows (at most {} rows, {} logit rows)",
                self.max_rows, self.max_logit_rows
            )));
        }
        let range = self.kv.positions(0, m)?;
        let positions: Vec<u32> = range.clone().collect();
        self.resize(ctx, m, n_logits)?;
        for l in &mut self.layers {
            if m == 1 {
                l.attn_decode.set_step(ctx, 1, range.end)?;
            } else {
                l.attn_multi.set_step(ctx, m, range.end)?;
            }
        }
        upload(
            ctx,
            "tokens",
            &self.buffers.tokens,
            0,
            bytemuck::cast_slice(tokens),
        )?;
        upload(
            ctx,
            "positions",
            &self.buffers.positions,
            0,
            bytemuck::cast_slice(&positions),
        )?;
        let set = self
            .matmuls
            .get(&(m, n_logits))
            .ok_or_else(|| Error::Usage("matmul set missing".into()))?;
        let mut list: Vec<&Dispatch> = set.embed.iter().collect();
        let taps_at = |layer: u32| {
            self.taps
                .iter()
                .filter(move |t| t.0 == layer)
                .map(|t| &t.1.dispatch)
        };
        list.extend(taps_at(0));
        // Indices of `list` where each layer ends.
        let mut layer_ends = Vec::with_capacity(self.layers.len());
        for ((l, mm), [add_attn, add_ffn]) in self.layers.iter().zip(&set.layers).zip(&set.adds) {
            let [q, k, v, o, gate, up, down] = mm;
            list.push(&l.attn_norm.dispatch);
            list.extend(q.iter().chain(k).chain(v));
            list.extend(l.bias.iter().map(|op| &op.dispatch));
            list.extend(l.qk_norm.iter().map(|op| &op.dispatch));
            list.push(&l.rope_q.dispatch);
            list.push(&l.rope_k.dispatch);
            list.push(&l.store_k.dispatch);
            list.push(&l.store_v.dispatch);
            if m == 1 {
                list.extend(l.attn_decode.dispatches());
            } else {
                list.extend(l.attn_multi.dispatches());
            }
            list.extend(o);
            list.push(&add_attn.dispatch);
            list.push(&l.ffn_norm.dispatch);
            list.extend(gate.iter().chain(up));
            list.push(&l.glu.dispatch);
            list.extend(down);
            list.push(&add_ffn.dispatch);
            list.extend(taps_at(layer_ends.len() as u32 + 1));
            layer_ends.push(list.len());
        }
        if n_logits > 0 {
            list.push(&self.final_norm.dispatch);
            list.extend(&set.lm_head);
            list.extend(self.argmax.dispatches());
        }
        let mut captured = Vec::new();
        if capture {
            let mut start = 0;
            for end in layer_ends {
                crate::kernels::launch::submit(ctx, "forward layer", &list[start..end])?;
                let bytes = read_back(ctx, &self.buffers.x, 0, u64::from(m * self.hp.n_embd) * 4)?;
                captured.push(bytemuck::pod_collect_to_vec(&bytes));
                start = end;
            }
            crate::kernels::launch::submit(ctx, "forward head", &list[start..])?;
        } else {
            crate::kernels::launch::submit(ctx, "forward", &list)?;
        }
        self.kv.commit(0, m)?;
        Ok(captured)
    }

    /// Argmax of each logits row of the last step.
    pub fn argmax(&self, ctx: &GpuContext) -> Result<Vec<u32>> {
        let bytes = read_back(ctx, &self.argmax_out, 0, u64::from(self.n_logits) * 4)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Logits `[n_logits, V]` of the last step.
    pub fn logits(&self, ctx: &GpuContext) -> Result<Vec<f32>> {
        let n = u64::from(self.n_logits) * u64::from(self.hp.n_vocab) * 4;
        let bytes = read_back(ctx, &self.buffers.logits, 0, n)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}

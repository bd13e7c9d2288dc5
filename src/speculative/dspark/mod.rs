//! A DSpark drafter on the device (docs/DSPARK.md): its own KV cache filled by the
//! K/V-only [`inject`] pass in chunks of `U` rows, and a draft pass over a fixed block of γ
//! query rows:
//! ```text
//! tokens [x0, M × (γ−1)] at drafter positions p0..p0+γ−1
//! x = embed(tokens) (+ the log-SNR rows [γ, d] of a conditioned drafter, weights::SnrAdd)
//! per layer a Qwen3 block whose attention sees cache[0..p0) ∪ block
//!     (non-causal; the block's K/V are appended behind the context and overwritten later)
//! h = final_norm(x) [γ, d];  U = h · LM head [γ, V]
//! per slot j: e = W1[prev] (gather), L_j = U_j + W2·e, d_{j+1} = argmax L_j (or the host's
//!             sample), c_j = sigmoid(w·[h_j ; e] + b), prev = d_{j+1}
//! ```
//! Greedy drafting is one submit and reads back only the ids and confidences; sampled drafting
//! submits once per slot and reads that slot's corrected logits for the host to sample.

pub mod inject;
pub mod weights;

use crate::gguf::{GgmlType, GgufFile};
use crate::gpu::buffers::{read_back, upload};
use crate::gpu::GpuContext;
use crate::kernels::attention::{KvLayout, KvType, MaskMode};
use crate::kernels::launch::{submit, Dispatch};
use crate::kernels::matmul::{embed_dispatches, matmul_dispatches, Family, MatmulIo};
use crate::kernels::ops::dspark::{chain_ops, ChainIo, SlotOps};
use crate::memory::alloc::Allocator;
use crate::model::forward::{Forward, ForwardSpec};
use crate::model::weights::ModelWeights;
use crate::model::{DrafterMeta, Hparams};
use crate::{Error, Result};

use inject::Inject;
use weights::{HeadWeights, SnrAdd};

/// How a drafter is built for a run.
#[derive(Debug, Clone, PartialEq)]
pub struct DrafterConfig {
    /// Drafter cache rows for context (the target's context, or a position window).
    pub ctx_rows: u32,
    /// `U`: rows per injection chunk.
    pub inject_chunk: u32,
    pub type_k: GgmlType,
    pub type_v: GgmlType,
}

/// One block's drafts.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    /// The draft tokens, in order (γ anchor-first, γ − 1 otherwise).
    pub tokens: Vec<u32>,
    /// Per draft: the confidence head's survival probability (1.0 without one).
    pub conf: Vec<f32>,
}

/// The per-slot Markov dispatches: gather `W1[prev]`, `W2 · e`.
#[derive(Debug)]
struct SlotMarkov {
    gather: Vec<Dispatch>,
    matvec: Vec<Dispatch>,
}

/// A loaded DSpark drafter with its cache state.
pub struct Dspark {
    pub meta: DrafterMeta,
    fwd: Forward,
    heads: HeadWeights,
    inject: Inject,
    slots: Vec<SlotOps>,
    markov: Vec<SlotMarkov>,
    /// The log-SNR add after the embedding gather (conditioned drafters).
    snr: Option<SnrAdd>,
    out: wgpu::Buffer,
    _keep: Vec<wgpu::Buffer>,
    mask: u32,
    /// Drafter cache rows for context.
    ctx_rows: u32,
    /// Target position of drafter cache row 0.
    base: u32,
    /// Context rows injected (cache rows `0..filled` hold target positions `base..`).
    filled: u32,
    /// Device bytes created outside the plan's named buffers (weights).
    pub allocations: Vec<(String, u64)>,
    /// Position-window rebases so far.
    pub rebases: u64,
}

impl Dspark {
    /// Loads a drafter for `target` (checked against it) and builds its passes, taking every
    /// buffer from `alloc`'s plan.
    pub fn load(
        ctx: &GpuContext,
        file: &GgufFile,
        target_hp: &Hparams,
        target: &ModelWeights,
        cfg: &DrafterConfig,
        alloc: &mut Allocator<'_>,
    ) -> Result<Dspark> {
        let meta = DrafterMeta::from_gguf(file)?;
        crate::model::shapes::check_drafter_shapes(file, &meta)?;
        weights::check_meta(&meta, target_hp, target.lm_head().n)?;
        let (model, heads) = weights::load(ctx, file, &meta, target)?;
        let allocations = model.allocations.clone();
        Dspark::build(ctx, meta, model, heads, allocations, cfg, alloc)
    }

    /// Another drafter on this one's weights (a server slot's): its own cache, staging and
    /// passes from `alloc`'s plan, no weight uploaded again.
    pub fn sibling(
        &self,
        ctx: &GpuContext,
        cfg: &DrafterConfig,
        alloc: &mut Allocator<'_>,
    ) -> Result<Dspark> {
        let model = self.fwd.weights.clone();
        let heads = self.heads.clone();
        Dspark::build(ctx, self.meta.clone(), model, heads, Vec::new(), cfg, alloc)
    }

    /// Builds the passes of a drafter whose weights are on the device.
    fn build(
        ctx: &GpuContext,
        meta: DrafterMeta,
        model: ModelWeights,
        heads: HeadWeights,
        allocations: Vec<(String, u64)>,
        cfg: &DrafterConfig,
        alloc: &mut Allocator<'_>,
    ) -> Result<Dspark> {
        let hp = meta.hp.clone();
        let gamma = meta.block_size;
        let spec = ForwardSpec {
            drafter: true,
            max_rows: gamma,
            max_logit_rows: gamma,
            kv_rows: cfg.ctx_rows + gamma,
            type_k: cfg.type_k,
            type_v: cfg.type_v,
            mask: MaskMode::None,
            fused_only: true,
            argmax: false,
            rope_in_qkv: true,
        };
        let fwd = Forward::with_spec(ctx, hp.clone(), model, &spec, alloc)?;
        let snr = SnrAdd::new(ctx, &fwd, &heads, gamma)?;
        let layouts = [
            KvLayout::new(
                KvType::from_ggml(cfg.type_k)?,
                spec.kv_rows,
                hp.n_head_kv,
                hp.head_dim,
            )?,
            KvLayout::new(
                KvType::from_ggml(cfg.type_v)?,
                spec.kv_rows,
                hp.n_head_kv,
                hp.head_dim_v,
            )?,
        ];
        let inject = Inject::new(
            ctx,
            &meta,
            &fwd.weights,
            &heads,
            &fwd.buffers,
            &fwd.rope_freqs,
            layouts,
            cfg.inject_chunk,
            alloc,
        )?;
        let out = alloc.storage("drafter.draft.out")?;
        let r = meta.markov_rank;
        let (e, bias) = if r > 0 {
            (
                Some(alloc.storage("drafter.draft.markov")?),
                Some(alloc.storage("drafter.draft.bias")?),
            )
        } else {
            (None, None)
        };
        let io = ChainIo {
            logits: &fwd.buffers.logits,
            bias: bias.as_ref(),
            out: &out,
            hidden: &fwd.buffers.xn,
            e: e.as_ref(),
            conf: heads.conf.as_ref(),
        };
        let (slots, mut keep) = chain_ops(ctx, io, gamma, hp.n_vocab, hp.n_embd, r)?;
        let mut markov = Vec::new();
        if let (Some([w1, w2]), Some(e), Some(bias)) = (&heads.markov, &e, &bias) {
            let family = Family::for_context(ctx);
            for j in 0..gamma {
                let io = MatmulIo {
                    x: e,
                    x_off: j * r,
                    x_stride: r,
                    y: bias,
                    y_off: 0,
                    y_stride: hp.n_vocab,
                    m: 1,
                    gate: None,
                    split: None,
                    paired: None,
                };
                markov.push(SlotMarkov {
                    gather: embed_dispatches(ctx, w1, &out, j, 1, e, j * r)?,
                    matvec: matmul_dispatches(ctx, family, w2, &io)?,
                });
            }
        }
        keep.extend(e);
        keep.extend(bias);
        let mask = meta.mask_token_id.unwrap_or(0);
        Ok(Dspark {
            meta,
            fwd,
            heads,
            inject,
            slots,
            markov,
            snr,
            out,
            _keep: keep,
            mask,
            ctx_rows: cfg.ctx_rows,
            base: 0,
            filled: 0,
            allocations,
            rebases: 0,
        })
    }

    /// Sets up the draft step's and a full injection chunk's matmuls now, so their pipelines
    /// build in the background ([`Forward::warm`]).
    pub fn warm(&mut self, ctx: &GpuContext) -> Result<()> {
        let gamma = self.meta.block_size;
        self.fwd.warm(ctx, &[(gamma, gamma)])?;
        let n_kv = self.meta.hp.n_head_kv;
        let u = self.inject.max_rows;
        self.inject
            .resize(ctx, u, &self.fwd.weights, &self.heads, n_kv)
    }

    /// Where the target's forward writes tap rows (`[U, m·d_t]`), for `Forward::set_taps`.
    pub fn taps_buffer(&self) -> &wgpu::Buffer {
        &self.inject.taps
    }

    /// `U`: most rows one injection takes.
    pub fn inject_chunk(&self) -> u32 {
        self.inject.max_rows
    }

    /// Most drafts one block gives.
    pub fn max_drafts(&self) -> u32 {
        self.meta.max_drafts()
    }

    /// Target positions injected so far (`base + filled`): the next row must be this one.
    pub fn next_position(&self) -> u32 {
        self.base + self.filled
    }

    /// Target position of drafter cache row 0 (moves with each window rebase).
    pub fn base(&self) -> u32 {
        self.base
    }

    /// The last draft's corrected logits `[γ, V]` (Markov bias added; for tests and tools).
    pub fn logits(&self, ctx: &GpuContext) -> Result<Vec<f32>> {
        let n = u64::from(self.meta.block_size) * u64::from(self.meta.hp.n_vocab) * 4;
        let bytes = read_back(ctx, &self.fwd.buffers.logits, 0, n)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Forget every injected row (a new sequence).
    pub fn reset(&mut self) {
        self.base = 0;
        self.filled = 0;
    }

    /// Drop injected rows at target positions `pos..` (all of them when `pos` is before the
    /// window's base: those rows cannot be re-staged).
    pub fn truncate(&mut self, pos: u32) {
        if pos < self.base {
            self.reset();
        } else {
            self.filled = self.filled.min(pos - self.base);
        }
    }

    /// Injects the staged tap rows `0..n`, which the target computed for positions
    /// `start..start + n` (`start` must be [`Dspark::next_position`]).
    pub fn inject(&mut self, ctx: &GpuContext, n: u32, start: u32) -> Result<()> {
        if start != self.next_position() {
            return Err(Error::Usage(format!(
                "drafter injection at position {start}, but the drafter holds rows up to {}",
                self.next_position()
            )));
        }
        let n_kv = self.meta.hp.n_head_kv;
        if self.filled + n > self.ctx_rows {
            self.rebase(ctx, n)?;
        }
        self.inject
            .run(ctx, n, self.filled, &self.fwd.weights, &self.heads, n_kv)?;
        self.filled += n;
        Ok(())
    }

    /// Makes room for `n` more rows in the position window (§4.3–4.4): keeps the most recent
    /// `min(W/2, W − U)` rows, moved inside the caches to positions from 0 (K rotated by the
    /// move, V as it is: `Inject::shift_rows`, chunks of at most `U` in ascending order, each
    /// reading rows no earlier chunk wrote), so rebases come about once per `W/2` tokens and the
    /// drafter never runs at positions past `W + γ`. Nothing is kept beside the K/V for it.
    fn rebase(&mut self, ctx: &GpuContext, n: u32) -> Result<()> {
        let (w, u) = (self.ctx_rows, self.inject.max_rows);
        if w <= u {
            return Err(Error::Usage(format!(
                "drafter cache full: {} + {n} rows past its {w} context rows (a window needs \
                 more rows than the injection chunk {u})",
                self.filled
            )));
        }
        let keep = (w / 2).min(w - u);
        let shift = self.filled - keep;
        let mut c = 0;
        while c < keep {
            let m = u.min(keep - c);
            self.inject.shift_rows(ctx, shift + c, c, m)?;
            c += m;
        }
        self.base += shift;
        self.filled = keep;
        self.rebases += 1;
        Ok(())
    }

    /// Drafts after `anchor` at target position `p0` (every row before it injected). `pick`
    /// chooses each slot's token from its corrected logits `[V]` on the host (sampling);
    /// `None` takes the argmax on the device in one submit.
    pub fn draft(
        &mut self,
        ctx: &GpuContext,
        anchor: u32,
        p0: u32,
        pick: Option<crate::speculative::drafter::Pick<'_>>,
    ) -> Result<Draft> {
        if p0 != self.next_position() {
            return Err(Error::Usage(format!(
                "draft at position {p0}, but the drafter holds rows up to {}",
                self.next_position()
            )));
        }
        let gamma = self.meta.block_size;
        let v = self.meta.hp.n_vocab as usize;
        match pick {
            None => {
                self.prepare_draft(ctx, anchor)?;
                submit(ctx, "dspark draft", &self.draft_dispatches()?)?;
            }
            Some(pick) => {
                self.prepare_draft(ctx, anchor)?;
                let (mut list, _) = self.fwd.record(gamma, gamma)?;
                if let Some(snr) = &self.snr {
                    snr.insert(&mut list);
                }
                submit(ctx, "dspark draft", &list)?;
                let first = usize::from(!self.meta.sample_from_anchor);
                for j in 0..gamma as usize {
                    submit(ctx, "dspark slot", &self.slot_dispatches(j, false))?;
                    let off = (j * v * 4) as u64;
                    let bytes = read_back(ctx, &self.fwd.buffers.logits, off, (v * 4) as u64)?;
                    let logits: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes);
                    let token = if j >= first {
                        pick(j - first, &logits)
                    } else {
                        0
                    };
                    let at = ((j + 1) * 4) as u64;
                    upload(
                        ctx,
                        "draft token",
                        &self.out,
                        at,
                        bytemuck::bytes_of(&token),
                    )?;
                }
            }
        }
        self.read_draft(ctx)
    }

    /// Sets up a greedy draft after `anchor` at the next position (checked by the caller):
    /// [`Dspark::draft_dispatches`] then records it, and [`Dspark::read_draft`] reads it once
    /// submitted. Several drafters' blocks can so share one submission.
    pub fn prepare_draft(&mut self, ctx: &GpuContext, anchor: u32) -> Result<()> {
        let gamma = self.meta.block_size;
        let mut tokens = vec![self.mask; gamma as usize];
        tokens[0] = anchor;
        self.fwd.prepare(ctx, &tokens, self.filled, gamma)?;
        upload(
            ctx,
            "draft anchor",
            &self.out,
            0,
            bytemuck::bytes_of(&anchor),
        )?;
        Ok(())
    }

    /// The greedy draft pass set up by [`Dspark::prepare_draft`]: the block's forward, then per
    /// slot the Markov bias, the confidence and the on-device pick.
    pub fn draft_dispatches(&self) -> Result<Vec<&Dispatch>> {
        let gamma = self.meta.block_size;
        let (mut list, _) = self.fwd.record(gamma, gamma)?;
        if let Some(snr) = &self.snr {
            snr.insert(&mut list);
        }
        for j in 0..gamma as usize {
            list.extend(self.slot_dispatches(j, true));
        }
        Ok(list)
    }

    /// The drafts and confidences of the last submitted draft pass.
    pub fn read_draft(&self, ctx: &GpuContext) -> Result<Draft> {
        let gamma = self.meta.block_size;
        let first = usize::from(!self.meta.sample_from_anchor);
        let n = 2 * gamma as usize + 1;
        let bytes = read_back(ctx, &self.out, 0, (n * 4) as u64)?;
        let words: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
        let g = gamma as usize;
        let tokens = words[1 + first..=g].to_vec();
        let conf = if self.heads.conf.is_some() {
            words[g + 1 + first..]
                .iter()
                .map(|&w| f32::from_bits(w))
                .collect()
        } else {
            vec![1.0; g - first]
        };
        Ok(Draft { tokens, conf })
    }

    /// Slot `j`'s dispatches: the Markov gather and bias, the confidence, and (greedy) the
    /// on-device pick.
    fn slot_dispatches(&self, j: usize, greedy: bool) -> Vec<&Dispatch> {
        let mut list: Vec<&Dispatch> = Vec::new();
        if let Some(m) = self.markov.get(j) {
            list.extend(&m.gather);
            list.extend(&m.matvec);
        }
        let s = &self.slots[j];
        list.extend(&s.add_bias);
        list.extend(&s.confidence);
        if greedy {
            list.push(&s.pick);
        }
        list
    }
}

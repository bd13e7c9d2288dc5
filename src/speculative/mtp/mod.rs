//! Drafting with the MTP (multi-token prediction, `nextn`) block a `qwen35` / `qwen35moe` file
//! carries (docs/MTP.md), as llama.cpp b11434 runs it (`src/models/qwen35.cpp` `graph_mtp`,
//! `common/speculative.cpp` `draft-mtp`):
//! ```text
//! row at position p:  e = rms(embed(t_p))·enorm            h = rms(h_{p−1})·hnorm
//!                     x = eh_proj · [e ; h]                 [m, 2d] → [m, d]
//!                     one full gated-attention block over the MTP block's own K/V rows
//!                     h'_p = rms(x)·shared_head_norm        logits = LM head · h'_p
//! ```
//! `h_{p−1}` is the target's final hidden state after `output_norm` at position p − 1 (zero
//! before position 0). Every row the target commits is injected ([`Mtp::inject`]): its token
//! paired with the row before it, its K/V row written; rejected rows never are. A draft
//! ([`Mtp::draft`]) starts at the anchor (the token the target just sampled, position p0) with
//! `h_{p0−1}`, and chains: draft k + 1 is predicted from draft k and the head's own `h'`.
//! The K/V rows a draft writes past p0 are scratch, overwritten by the next injection.
//!
//! The block runs as a one-layer [`Forward`] (the target's kernels: RMSNorm, the q | gate,
//! k, v projections, RoPE, the KV store, attention, the gate, the FFN, the LM head and its
//! argmax), with the projection spliced in after its embedding gather.

pub mod weights;

use std::collections::HashMap;

use crate::gguf::GgmlType;
use crate::gpu::buffers::{create_storage, read_back, upload};
use crate::gpu::GpuContext;
use crate::kernels::attention::MaskMode;
use crate::kernels::launch::{submit, Dispatch};
use crate::kernels::matmul::{matmul_dispatches, Family, MatmulIo};
use crate::kernels::ops::copy::{CopyParams, CopyRows};
use crate::kernels::ops::norm::RmsNorm;
use crate::kernels::ops::Io;
use crate::memory::alloc::Allocator;
use crate::memory::{Budget, DeviceLimits, RunParams, TargetShape};
use crate::model::forward::{Forward, ForwardSpec};
use crate::model::hparams::{Hparams, LayerKind};
use crate::{Error, Result};

use super::drafter::{Draft, Drafter, Pick};
pub use weights::{mtp_layer, MtpWeights};

/// Matmul dispatch sets of the projection kept at most (one per row count).
const EH_CACHE: usize = 16;

/// How one sequence's MTP drafter is built.
#[derive(Debug, Clone, PartialEq)]
pub struct MtpConfig {
    /// K/V rows (the target's context per sequence).
    pub ctx_rows: u32,
    /// Rows one injection takes at most (the target's tap staging rows).
    pub rows: u32,
    /// Drafts per cycle (`--spec-draft-n-max`).
    pub n_max: u32,
    pub type_k: GgmlType,
    pub type_v: GgmlType,
}

/// The hyperparameters of the one-layer forward the MTP block runs as: the target's, with a
/// single full-attention layer.
pub fn mtp_hparams(hp: &Hparams) -> Hparams {
    let mut h = hp.clone();
    h.n_layer = 1;
    if let Some(hy) = &mut h.hybrid {
        hy.kinds = vec![LayerKind::Attention];
        hy.n_nextn = 0;
    }
    h
}

/// What a step submits before the embedding gather.
#[derive(Debug, Clone, Copy)]
enum First {
    /// An injection: the taps normed, `h` paired with the rows (shifted by one when `shift`),
    /// the last row's `h` kept.
    Inject { shift: bool },
    /// A draft's first row: `h` of the last injected row.
    Anchor,
    /// A later draft row: the head's own `h'` of the row before.
    Chain,
}

/// The buffers and ops before the block: the target's taps normed, the rows paired, the
/// projection's input assembled.
struct Pre {
    /// `[rows, d]` the target's last-layer output of each committed row (its taps).
    staging: wgpu::Buffer,
    /// `[d]` `h` of the last injected row (after `output_norm`).
    last_h: wgpu::Buffer,
    /// `[rows, 2d]` `[rms(e)·enorm ; rms(h)·hnorm]`, via `en`, `hn` `[rows, d]`.
    cat: wgpu::Buffer,
    norm_out: RmsNorm,
    copy_last: CopyRows,
    copy_shift: CopyRows,
    save_last: CopyRows,
    copy_xn: CopyRows,
    e_norm: RmsNorm,
    h_norm: RmsNorm,
    cat_e: CopyRows,
    cat_h: CopyRows,
    _keep: Vec<wgpu::Buffer>,
}

/// A sequence's MTP drafter: the block's forward with its own K/V cache, and the state that
/// pairs rows.
pub struct Mtp {
    fwd: Forward,
    w: MtpWeights,
    pre: Pre,
    eh: HashMap<u32, Vec<Dispatch>>,
    family: Family,
    cfg: MtpConfig,
    d: u32,
    /// The next position to inject (rows `0..next` are held).
    next: u32,
    /// `last_h` must be zeroed before the next use (a reset, or a cut that lost it).
    h_stale: bool,
    /// (plan name, bytes) of every buffer this drafter created.
    pub allocations: Vec<(String, u64)>,
}

fn copy(
    ctx: &GpuContext,
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
    rows: u32,
    d: u32,
    dst_stride: u32,
    dst_off: u32,
) -> Result<CopyRows> {
    let params = CopyParams {
        n_rows: rows,
        n_cols: d,
        src_stride: d,
        dst_stride,
        src_off: 0,
        dst_off,
        _pad: [0; 2],
    };
    Ok(CopyRows::new(ctx, src, dst, params)?)
}

impl Mtp {
    /// The MTP drafter of one sequence on the shared weights `w`, its buffers planned by the
    /// target's planner for the one-layer model (`budget`, `limits`: the run's).
    pub fn new(
        ctx: &GpuContext,
        hp: &Hparams,
        w: &MtpWeights,
        cfg: &MtpConfig,
        budget: Budget,
        limits: DeviceLimits,
    ) -> Result<Mtp> {
        let mh = mtp_hparams(hp);
        let params = RunParams {
            n_ctx: cfg.ctx_rows,
            n_seq: 1,
            type_k: cfg.type_k,
            type_v: cfg.type_v,
            n_ubatch: cfg.rows,
            draft: None,
            verify_rows: 1,
            placement: Default::default(),
        };
        let shape = TargetShape {
            hp: &mh,
            tensors: &[],
        };
        let plan = crate::memory::forward_plan(shape, None, &params, budget, limits);
        let mut alloc = Allocator::new(ctx, &plan);
        let spec = ForwardSpec {
            max_logit_rows: 1,
            fused_only: true,
            rope_in_qkv: false,
            mask: MaskMode::Causal,
            ..ForwardSpec::target(&params)
        };
        let fwd = Forward::with_spec(ctx, mh, w.model.clone(), &spec, &mut alloc)?;
        let mut allocations: Vec<(String, u64)> = alloc.records.drain(..).collect();
        let pre = Pre::new(ctx, hp, w, &fwd, cfg.rows, &mut allocations)?;
        Ok(Mtp {
            fwd,
            w: w.clone(),
            pre,
            eh: HashMap::new(),
            family: Family::for_context(ctx),
            cfg: cfg.clone(),
            d: hp.n_embd,
            next: 0,
            h_stale: true,
            allocations,
        })
    }

    /// The staging buffer the target's taps (its last layer's output) land in.
    pub fn taps_buffer(&self) -> &wgpu::Buffer {
        &self.pre.staging
    }

    /// The projection's dispatches for `m` rows (`cat` → the block's `act.x`).
    fn eh_dispatches(&mut self, ctx: &GpuContext, m: u32) -> Result<()> {
        if !self.eh.contains_key(&m) {
            if self.eh.len() >= EH_CACHE {
                self.eh.clear();
            }
            let io = MatmulIo::dense(&self.w.eh_proj, &self.pre.cat, &self.fwd.buffers.x, m);
            let list = matmul_dispatches(ctx, self.family, &self.w.eh_proj, &io)?;
            self.eh.insert(m, list);
        }
        Ok(())
    }

    /// Sets the pre ops for `m` rows and the block's step at `start`, then submits what
    /// `first` says goes first, the embedding gather, the projection and the block (with
    /// logits when `logits`).
    fn run(
        &mut self,
        ctx: &GpuContext,
        tokens: &[u32],
        start: u32,
        logits: bool,
        first: First,
    ) -> Result<()> {
        let m = tokens.len() as u32;
        let n_logits = u32::from(logits);
        self.fwd.prepare(ctx, tokens, start, n_logits)?;
        self.pre.e_norm.set_rows(ctx, m)?;
        self.pre.h_norm.set_rows(ctx, m)?;
        self.pre.cat_e.set_rows(ctx, m)?;
        self.pre.cat_h.set_rows(ctx, m)?;
        self.eh_dispatches(ctx, m)?;
        let (list, _) = self.fwd.record(m, n_logits)?;
        let k = self.fwd.embed_len(m, n_logits).min(list.len());
        let p = &self.pre;
        let mut all: Vec<&Dispatch> = match first {
            First::Inject { shift } => {
                let mut v = vec![&p.norm_out.dispatch, &p.copy_last.dispatch];
                if shift {
                    v.push(&p.copy_shift.dispatch);
                }
                v.push(&p.save_last.dispatch);
                v
            }
            First::Anchor => vec![&p.copy_last.dispatch],
            First::Chain => vec![&p.copy_xn.dispatch],
        };
        all.extend(&list[..k]);
        all.extend([&p.e_norm.dispatch, &p.h_norm.dispatch]);
        all.extend([&p.cat_e.dispatch, &p.cat_h.dispatch]);
        all.extend(self.eh.get(&m).into_iter().flatten());
        all.extend(&list[k..]);
        Ok(submit(ctx, "mtp", &all)?)
    }

    /// Zeroes `last_h` when it is stale (`h` before position 0 is zero).
    fn fresh_h(&mut self, ctx: &GpuContext) -> Result<()> {
        if self.h_stale {
            let zeros = vec![0u8; self.d as usize * 4];
            upload(ctx, "mtp h", &self.pre.last_h, 0, &zeros)?;
            self.h_stale = false;
        }
        Ok(())
    }

    /// Injects the committed rows `start..start + n` (taps in staging rows `0..n`, `tokens`
    /// their tokens): each token paired with the row before it, K/V rows written.
    pub fn inject_rows(
        &mut self,
        ctx: &GpuContext,
        n: u32,
        start: u32,
        tokens: &[u32],
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        if start != self.next || tokens.len() != n as usize || n > self.cfg.rows {
            return Err(Error::Usage(format!(
                "mtp: {n} rows ({} tokens) injected at {start}, expected at {} and at most {}",
                tokens.len(),
                self.next,
                self.cfg.rows
            )));
        }
        self.fresh_h(ctx)?;
        let d = self.d;
        self.pre.norm_out.set_rows(ctx, n)?;
        if n > 1 {
            self.pre.copy_shift.set_rows_at(ctx, n - 1, 0, d)?;
        }
        self.pre.save_last.set_rows_at(ctx, 1, (n - 1) * d, 0)?;
        self.run(ctx, tokens, start, false, First::Inject { shift: n > 1 })?;
        self.next = start + n;
        Ok(())
    }

    /// Up to `n_max` drafts after `anchor` at position `p0` (greedy without `pick`).
    pub fn draft_block(
        &mut self,
        ctx: &GpuContext,
        anchor: u32,
        p0: u32,
        mut pick: Option<Pick<'_>>,
    ) -> Result<Draft> {
        if p0 != self.next {
            return Err(Error::Usage(format!(
                "mtp: draft at position {p0}, but rows up to {} are injected",
                self.next
            )));
        }
        self.fresh_h(ctx)?;
        let mut tokens = Vec::with_capacity(self.cfg.n_max as usize);
        let mut tok = anchor;
        for i in 0..self.cfg.n_max {
            let pos = p0 + i;
            if pos >= self.cfg.ctx_rows {
                break;
            }
            let first = if i == 0 { First::Anchor } else { First::Chain };
            self.run(ctx, &[tok], pos, true, first)?;
            tok = match pick.as_mut() {
                None => *self
                    .fwd
                    .argmax(ctx)?
                    .first()
                    .ok_or_else(|| Error::Usage("mtp: the head gave no argmax".into()))?,
                Some(p) => {
                    let logits = self.fwd.logits(ctx)?;
                    p(i as usize, &logits)
                }
            };
            tokens.push(tok);
        }
        let conf = vec![1.0; tokens.len()];
        Ok(Draft { tokens, conf })
    }

    /// `h` of the last injected row (`[d]`, after `output_norm`), read back (tests).
    pub fn last_h(&self, ctx: &GpuContext) -> Result<Vec<f32>> {
        let bytes = read_back(ctx, &self.pre.last_h, 0, u64::from(self.d) * 4)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}

impl Pre {
    fn new(
        ctx: &GpuContext,
        hp: &Hparams,
        w: &MtpWeights,
        fwd: &Forward,
        rows: u32,
        records: &mut Vec<(String, u64)>,
    ) -> Result<Pre> {
        let (d, eps) = (hp.n_embd, hp.rms_eps);
        let mut make = |name: &str, floats: u64| -> Result<wgpu::Buffer> {
            let bytes = floats * 4;
            records.push((format!("mtp.{name}"), bytes));
            Ok(create_storage(ctx, name, bytes)?)
        };
        let rd = u64::from(rows) * u64::from(d);
        let staging = make("taps", rd)?;
        let last_h = make("last_h", u64::from(d))?;
        let normed = make("normed", rd)?;
        let h_in = make("h_in", rd)?;
        let en = make("en", rd)?;
        let hn = make("hn", rd)?;
        let cat = make("cat", 2 * rd)?;
        let x = &fwd.buffers.x;
        let xn = &fwd.buffers.xn;
        let norm = |src: &wgpu::Buffer, dst: &wgpu::Buffer, wt: &wgpu::Buffer| {
            RmsNorm::new(ctx, Io::Out { src, dst }, Some(wt), rows, d, eps)
        };
        Ok(Pre {
            norm_out: norm(&staging, &normed, &w.target_norm)?,
            copy_last: copy(ctx, &last_h, &h_in, 1, d, d, 0)?,
            copy_shift: copy(ctx, &normed, &h_in, rows.saturating_sub(1).max(1), d, d, d)?,
            save_last: copy(ctx, &normed, &last_h, 1, d, d, 0)?,
            copy_xn: copy(ctx, xn, &h_in, 1, d, d, 0)?,
            e_norm: norm(x, &en, &w.enorm)?,
            h_norm: norm(&h_in, &hn, &w.hnorm)?,
            cat_e: copy(ctx, &en, &cat, rows, d, 2 * d, 0)?,
            cat_h: copy(ctx, &hn, &cat, rows, d, 2 * d, d)?,
            staging,
            last_h,
            cat,
            // h rows `[rows, d]` (`output_norm(staging)`, then paired with each token), the
            // normed halves.
            _keep: vec![normed, h_in, en, hn],
        })
    }
}

impl Drafter for Mtp {
    fn max_drafts(&self) -> u32 {
        self.cfg.n_max
    }
    fn has_confidence(&self) -> bool {
        false
    }
    fn next_position(&self) -> u32 {
        self.next
    }
    fn inject(&mut self, ctx: &GpuContext, n: u32, start: u32, tokens: &[u32]) -> Result<()> {
        self.inject_rows(ctx, n, start, tokens)
    }
    fn draft(
        &mut self,
        ctx: &GpuContext,
        anchor: u32,
        p0: u32,
        pick: Option<Pick<'_>>,
    ) -> Result<Draft> {
        self.draft_block(ctx, anchor, p0, pick)
    }
    fn reset(&mut self) {
        self.next = 0;
        self.h_stale = true;
    }
    fn truncate(&mut self, pos: u32) {
        // The rows before `pos` stay; `h` of row pos − 1 was not kept, so the next row pairs
        // with zero (drafts may be worse, never wrong: the target verifies them).
        if pos < self.next {
            self.next = pos;
            self.h_stale = true;
        }
    }
}

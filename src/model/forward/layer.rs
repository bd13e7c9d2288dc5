//! One layer's ops, by mixer kind, built once for the largest batch: the pre-norm, the mixer
//! (attention, optionally gated; or a Gated DeltaNet), the FFN norm and the GLU.
//!
//! Gated attention (qwen35): the q projection writes `[m, n_head, 2, head_dim]` (q then its gate
//! per head) into `act.q`; two row copies split it into q (`act.attn`, normed into `act.q`) and
//! the gate (`act.agate`); after the attention `act.q = sigmoid(gate) ⊙ attn` feeds `attn_output`.
//!
//! Gated DeltaNet (per row, in order; shapes `[m, ·]`):
//! ```text
//! mixed = xn · W_qkv  [conv_dim]     z = xn · W_gate  [value_dim]
//! alpha = xn · W_alpha  [n_v]        beta = xn · W_beta  [n_v]
//! conv  = silu(conv1d(state, mixed))                      (SsmConv: conv state updated)
//! delta = delta_rule(conv, alpha, beta)                   (DeltaRule: S state updated)
//! delta = rms_norm per head · ssm_norm;  conv = silu(z) ⊙ delta;  xn = conv · W_out
//! ```

use crate::gpu::GpuContext;
use crate::kernels::attention::{Attention, FusedAttention};
use crate::kernels::launch::Dispatch;
use crate::kernels::ops::binary::BinaryOp;
use crate::kernels::ops::copy::{CopyParams, CopyRows};
use crate::kernels::ops::delta::{ConvIo, DeltaRule, RuleIo, RuleShape, SsmConv};
use crate::kernels::ops::glu::{Glu, GluOp};
use crate::kernels::ops::norm::RmsNorm;
use crate::kernels::ops::Io;
use crate::model::hparams::Hparams;
use crate::model::weights::DeltaWeights;
use crate::{Error, Result};

use super::build::HybridBuffers;
use super::rope_store::RopeStore;
use super::Buffers;

/// One layer's ops.
#[derive(Debug)]
pub(crate) struct LayerOps {
    pub attn_norm: RmsNorm,
    pub mixer: MixerOps,
    pub ffn_norm: RmsNorm,
    /// The GLU op; `None` where the up projection applies it itself (`matmul_rows.wgsl`
    /// epilogue on CPU drivers: the same bits, one dispatch less).
    pub glu: Option<GluOp>,
    /// Gemma 3: RMSNorms of the mixer's and the FFN's output, in place on `act.xn`.
    pub post_norms: Option<[RmsNorm; 2]>,
}

#[derive(Debug)]
pub(crate) enum MixerOps {
    Attention(Box<AttnOps>),
    DeltaNet(Box<DeltaOps>),
}

/// An attention layer's ops between its projections.
#[derive(Debug)]
pub(crate) struct AttnOps {
    pub bias: Vec<BinaryOp>,
    pub qk_norm: Vec<RmsNorm>,
    /// RoPE on q and k, then k and v into the cache.
    pub rope_store: RopeStore,
    /// One query row: split-KV over the whole context, then an in-order reduce.
    pub attn_decode: Option<Attention>,
    /// Several rows (prefill, verify): the fused kernel, bit-identical per row to the decode path.
    pub attn_multi: FusedAttention,
    /// The output gate (qwen35).
    pub gate: Option<GateOps>,
    /// Index of the layer's caches in `Buffers::kv`.
    pub kv: usize,
}

/// The output gate of a gated attention layer.
#[derive(Debug)]
pub(crate) struct GateOps {
    /// `act.q` (q | gate per head) → q rows in `act.attn`.
    pub split_q: CopyRows,
    /// `act.q` → gate rows in `act.agate`.
    pub split_gate: CopyRows,
    /// `act.q = sigmoid(act.agate) ⊙ act.attn`.
    pub apply: GluOp,
}

/// A Gated DeltaNet layer's ops between its projections.
#[derive(Debug)]
pub(crate) struct DeltaOps {
    /// Which DeltaNet layer (index into the recurrent states).
    pub state: usize,
    pub conv: SsmConv,
    pub rule: DeltaRule,
    /// RMSNorm per head (`m · n_v` rows of head_v) with `ssm_norm`, in place.
    pub norm: RmsNorm,
    /// `act.conv = silu(act.z) ⊙ act.delta`.
    pub gate: GluOp,
}

impl GateOps {
    pub(crate) fn new(ctx: &GpuContext, hp: &Hparams, b: &Buffers, max_rows: u32) -> Result<Self> {
        let hb = b.hybrid()?;
        if hp.head_dim != hp.head_dim_v {
            return Err(Error::Usage(format!(
                "gated attention needs equal q and v head sizes (key_length {}, value_length {})",
                hp.head_dim, hp.head_dim_v
            )));
        }
        let half = |dst: &wgpu::Buffer, off: u32| {
            let params = CopyParams {
                n_rows: max_rows * hp.n_head,
                n_cols: hp.head_dim,
                src_stride: 2 * hp.head_dim,
                dst_stride: hp.head_dim,
                src_off: off,
                dst_off: 0,
                _pad: [0; 2],
            };
            CopyRows::new(ctx, &b.q, dst, params)
        };
        let n = max_rows * hp.q_dim();
        Ok(GateOps {
            split_q: half(&b.attn, 0)?,
            split_gate: half(&hb.agate, hp.head_dim)?,
            apply: GluOp::new(ctx, Glu::Sigmoid, &hb.agate, &b.attn, &b.q, n)?,
        })
    }

    fn set_rows(&mut self, ctx: &GpuContext, hp: &Hparams, m: u32) -> Result<()> {
        self.split_q.set_rows(ctx, m * hp.n_head)?;
        self.split_gate.set_rows(ctx, m * hp.n_head)?;
        self.apply.set_len(ctx, m * hp.q_dim())?;
        Ok(())
    }
}

impl DeltaOps {
    pub(crate) fn new(
        ctx: &GpuContext,
        hp: &Hparams,
        b: &Buffers,
        w: &DeltaWeights,
        state: usize,
        max_rows: u32,
    ) -> Result<Self> {
        let hb = b.hybrid()?;
        let h = hp
            .hybrid
            .as_ref()
            .ok_or_else(|| Error::Usage("a DeltaNet layer in a non-hybrid model".into()))?;
        let [conv_state, ssm_state] = hb
            .states
            .get(state)
            .ok_or_else(|| Error::Usage(format!("DeltaNet state {state} is not in the plan")))?;
        let [conv_ckpt, ssm_ckpt] = hb.checkpoint.get(state).ok_or_else(|| {
            Error::Usage(format!("DeltaNet checkpoint {state} is not in the plan"))
        })?;
        let bufs = [conv_state, ssm_state, conv_ckpt, ssm_ckpt];
        let (conv, rule) = conv_and_rule(ctx, hp, hb, w, bufs, max_rows)?;
        let rows = max_rows * h.n_v_heads;
        let io = Io::InPlace(&hb.delta);
        let norm = RmsNorm::new(ctx, io, Some(&w.norm), rows, h.head_v_dim, hp.rms_eps)?;
        let n = max_rows * h.value_dim();
        let gate = GluOp::new(ctx, Glu::Swiglu, &hb.z, &hb.delta, &hb.conv, n)?;
        Ok(DeltaOps {
            state,
            conv,
            rule,
            norm,
            gate,
        })
    }
}

/// A DeltaNet layer's conv and delta rule over the step's scratch and one sequence's state:
/// `[conv state, S state, conv checkpoint, S checkpoint]`.
pub(crate) fn conv_and_rule(
    ctx: &GpuContext,
    hp: &Hparams,
    hb: &HybridBuffers,
    w: &DeltaWeights,
    [conv_state, ssm_state, conv_ckpt, ssm_ckpt]: [&wgpu::Buffer; 4],
    max_rows: u32,
) -> Result<(SsmConv, DeltaRule)> {
    let h = hp
        .hybrid
        .as_ref()
        .ok_or_else(|| Error::Usage("a DeltaNet layer in a non-hybrid model".into()))?;
    let io = ConvIo {
        x: &hb.mixed,
        w: &w.conv,
        state: conv_state,
        ckpt: conv_ckpt,
        y: &hb.conv,
    };
    let conv = SsmConv::new(ctx, io, h.conv_dim(), h.d_conv, max_rows)?;
    let io = RuleIo {
        y: &hb.conv,
        alpha: &hb.alpha,
        beta: &hb.beta,
        dt: &w.dt_bias,
        a: &w.a,
        state: ssm_state,
        ckpt: ssm_ckpt,
        out: &hb.delta,
    };
    let shape = RuleShape {
        n_k: h.n_k_heads,
        n_v: h.n_v_heads,
        head_k: h.head_k_dim,
        head_v: h.head_v_dim,
        eps: hp.rms_eps,
    };
    let rule = DeltaRule::new(ctx, io, shape, max_rows)?;
    Ok((conv, rule))
}

impl LayerOps {
    /// Sets every op for `m` rows from the next submission on.
    pub(crate) fn set_rows(&mut self, ctx: &GpuContext, hp: &Hparams, m: u32) -> Result<()> {
        self.attn_norm.set_rows(ctx, m)?;
        match &mut self.mixer {
            MixerOps::Attention(a) => {
                let widths = [hp.q_dim(), hp.k_dim(), hp.v_dim()];
                for (op, w) in a.bias.iter_mut().zip(widths) {
                    op.set_len(ctx, m * w)?;
                }
                for (op, heads) in a.qk_norm.iter_mut().zip([hp.n_head, hp.n_head_kv]) {
                    op.set_rows(ctx, m * heads)?;
                }
                a.rope_store.set_tokens(ctx, m)?;
                if let Some(g) = &mut a.gate {
                    g.set_rows(ctx, hp, m)?;
                }
            }
            MixerOps::DeltaNet(d) => {
                let h = hp
                    .hybrid
                    .as_ref()
                    .ok_or_else(|| Error::Usage("a DeltaNet layer in a non-hybrid model".into()))?;
                d.conv.set_rows(ctx, m)?;
                d.rule.set_rows(ctx, m)?;
                d.norm.set_rows(ctx, m * h.n_v_heads)?;
                d.gate.set_len(ctx, m * h.value_dim())?;
            }
        }
        self.ffn_norm.set_rows(ctx, m)?;
        for op in self.post_norms.iter_mut().flatten() {
            op.set_rows(ctx, m)?;
        }
        if let Some(glu) = &mut self.glu {
            glu.set_len(ctx, m * hp.n_ff)?;
        }
        Ok(())
    }

    /// The mixer's dispatches of an `m`-row step, given its projections (`[q, k, v, o]` for
    /// attention; `[qkv, z, beta + alpha, out]` for a DeltaNet), in order. `seqs` replaces an
    /// attention layer's RoPE, KV store and attention, or a DeltaNet layer's conv and delta
    /// rule (a batch's per-sequence calls).
    pub(crate) fn mixer_dispatches<'a>(
        &'a self,
        m: u32,
        mm: &'a [Vec<Dispatch>; 7],
        list: &mut Vec<&'a Dispatch>,
        seqs: Option<Vec<&'a Dispatch>>,
    ) {
        let [p0, p1, p2, out, ..] = mm;
        list.extend(p0.iter().chain(p1).chain(p2));
        match &self.mixer {
            MixerOps::Attention(a) => {
                if let Some(g) = &a.gate {
                    list.push(&g.split_q.dispatch);
                    list.push(&g.split_gate.dispatch);
                }
                list.extend(a.bias.iter().map(|op| &op.dispatch));
                list.extend(a.qk_norm.iter().map(|op| &op.dispatch));
                match seqs {
                    Some(calls) => list.extend(calls),
                    None => {
                        list.extend(a.rope_store.dispatches());
                        match &a.attn_decode {
                            Some(decode) if m == 1 => list.extend(decode.dispatches()),
                            _ => list.extend(a.attn_multi.dispatches()),
                        }
                    }
                }
                if let Some(g) = &a.gate {
                    list.push(&g.apply.dispatch);
                }
            }
            MixerOps::DeltaNet(d) => {
                match seqs {
                    Some(calls) => list.extend(calls),
                    None => list.extend([&d.conv.dispatch, &d.rule.dispatch]),
                }
                list.push(&d.norm.dispatch);
                list.push(&d.gate.dispatch);
            }
        }
        list.extend(out);
    }
}

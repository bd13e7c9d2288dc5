//! What the GPU forward adds for Gemma 3 (`model/gemma3.rs` has the architecture):
//!
//! ```text
//! x      = gather(token_embd, tokens) · √d                     embed_scale (in place, [m, d])
//! per layer:  xn = attn(...)·Wo;  xn = rms_norm(xn) · post_attention_norm   (in place, [m, d])
//!             xn = down(...);     xn = rms_norm(xn) · post_ffw_norm         (in place, [m, d])
//!             (each then added to x inside the next norm, as for every model)
//!             sliding layers: RoPE table of rope.freq_base_swa (no scaling), window mask
//! logits = cap · tanh(logits / cap)                            softcap (in place, [n_logits, V])
//! ```
//! The FFN's GLU is GeGLU (tanh GELU) instead of SwiGLU.

use crate::gpu::buffers::create_storage_init;
use crate::gpu::GpuContext;
use crate::kernels::attention::{AttnShape, MaskMode};
use crate::kernels::attention::{KvLayout, KvType};
use crate::kernels::ops::binary::{Binary, BinaryOp};
use crate::kernels::ops::glu::Glu;
use crate::kernels::ops::norm::RmsNorm;
use crate::kernels::ops::rope::{rope_table, RopeConfig};
use crate::kernels::ops::Io;
use crate::model::gemma3::{embd_scale, ring_rows};
use crate::model::hparams::Hparams;
use crate::Result;

use super::build::{rope_config, ForwardSpec};
use super::Buffers;

/// The model-wide Gemma 3 ops of a forward pass.
#[derive(Debug)]
pub(super) struct Gemma3Ops {
    /// `act.x *= √d` after the embedding gather.
    pub embed_scale: BinaryOp,
    /// The final logit soft-cap (where the file sets one).
    pub softcap: Option<BinaryOp>,
    /// The sliding layers' RoPE: base `rope.freq_base_swa`, no scaling, and its table.
    pub swa_cfg: RopeConfig,
    pub swa_freqs: wgpu::Buffer,
    /// The sliding layers' caches are rings (`model::gemma3::ring_rows`): a truncation may
    /// drop at most the largest step's rows.
    pub ring: bool,
}

impl Gemma3Ops {
    /// The ops for `max_rows` rows and `max_logit_rows` logit rows; `None` for other models.
    pub(super) fn new(
        ctx: &GpuContext,
        hp: &Hparams,
        b: &Buffers,
        spec: &ForwardSpec,
    ) -> Result<Option<Gemma3Ops>> {
        let (max_rows, max_logit_rows) = (spec.max_rows, spec.max_logit_rows);
        let Some(g) = &hp.gemma3 else {
            return Ok(None);
        };
        let scale = Binary::Scale(embd_scale(hp.n_embd));
        let embed_scale = BinaryOp::new(ctx, Io::InPlace(&b.x), scale, max_rows * hp.n_embd)?;
        let softcap = if g.final_logit_softcap > 0.0 {
            let n = max_logit_rows.max(1) * hp.n_vocab;
            let op = Binary::Softcap(g.final_logit_softcap);
            Some(BinaryOp::new(ctx, Io::InPlace(&b.logits), op, n)?)
        } else {
            None
        };
        let swa_cfg = RopeConfig {
            freq_base: g.rope_base_swa,
            freq_scale: 1.0,
            ..rope_config(hp)
        };
        let table = rope_table(&swa_cfg, None, None)?;
        let swa_freqs =
            create_storage_init(ctx, "rope table (sliding)", bytemuck::cast_slice(&table))?;
        let ring = (0..hp.n_layer).any(|il| ring_rows(hp, il, spec.kv_rows, max_rows).is_some());
        Ok(Some(Gemma3Ops {
            embed_scale,
            softcap,
            swa_cfg,
            swa_freqs,
            ring,
        }))
    }

    /// Sets the ops for `m` rows and `n_logits` logit rows from the next submission on.
    pub(super) fn set_rows(
        &mut self,
        ctx: &GpuContext,
        hp: &Hparams,
        m: u32,
        n_logits: u32,
    ) -> Result<()> {
        self.embed_scale.set_len(ctx, m * hp.n_embd)?;
        if let Some(op) = &mut self.softcap {
            if n_logits > 0 {
                op.set_len(ctx, n_logits * hp.n_vocab)?;
            }
        }
        Ok(())
    }
}

/// The GLU of a model's FFN: GeGLU (tanh GELU) for Gemma 3, SwiGLU for the others.
pub(super) fn ffn_glu(hp: &Hparams) -> Glu {
    if hp.gemma3.is_some() {
        Glu::Geglu
    } else {
        Glu::Swiglu
    }
}

/// Layer `il`'s attention mask and score scale: Gemma 3's window on its sliding layers and its
/// attention scale; `mask` (the pass's) and `1/√head_dim` for every other model.
pub(super) fn layer_attention(hp: &Hparams, il: u32, mask: MaskMode) -> (MaskMode, f32) {
    match &hp.gemma3 {
        Some(g) if g.is_sliding(il) && mask == MaskMode::Causal => (
            MaskMode::Sliding {
                window: g.sliding_window,
            },
            g.attn_scale,
        ),
        Some(g) => (mask, g.attn_scale),
        None => (mask, AttnShape::default_scale(hp.head_dim)),
    }
}

/// Layer `il`'s K and V cache layouts: `full` (the pass's), or rings of
/// `model::gemma3::ring_rows` rows for a Gemma 3 sliding layer.
pub(super) fn layer_layouts(
    hp: &Hparams,
    il: u32,
    spec: &ForwardSpec,
    full: [KvLayout; 2],
) -> Result<[KvLayout; 2]> {
    let Some(rows) = ring_rows(hp, il, spec.kv_rows, spec.max_rows) else {
        return Ok(full);
    };
    let ring = |ty, dim| -> Result<KvLayout> {
        let layout = KvLayout::new(KvType::from_ggml(ty)?, rows, hp.n_head_kv, dim)?;
        Ok(layout.as_ring())
    };
    Ok([
        ring(spec.type_k, hp.head_dim)?,
        ring(spec.type_v, hp.head_dim_v)?,
    ])
}

/// Whether layer `il` takes the sliding layers' RoPE.
pub(super) fn sliding_rope(hp: &Hparams, il: u32) -> bool {
    hp.gemma3.as_ref().is_some_and(|g| g.is_sliding(il))
}

/// Layer `il`'s post-attention and post-FFN norms (in place on `act.xn`, `max_rows` rows of d).
pub(super) fn post_norms(
    ctx: &GpuContext,
    hp: &Hparams,
    b: &Buffers,
    weights: Option<&[wgpu::Buffer; 2]>,
    max_rows: u32,
) -> Result<Option<[RmsNorm; 2]>> {
    let Some([wa, wf]) = weights else {
        return Ok(None);
    };
    let norm = |w: &wgpu::Buffer| {
        RmsNorm::new(
            ctx,
            Io::InPlace(&b.xn),
            Some(w),
            max_rows,
            hp.n_embd,
            hp.rms_eps,
        )
    };
    Ok(Some([norm(wa)?, norm(wf)?]))
}

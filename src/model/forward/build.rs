//! Building a [`Forward`]: what sizes and names it (a [`ForwardSpec`]: the target's from its run
//! parameters, or a DSpark drafter's draft pass), its device buffers taken from the memory plan
//! by name, and every per-layer op built once for the largest batch.

use std::collections::HashMap;

use crate::gguf::GgmlType;
use crate::gpu::GpuContext;
use crate::kernels::attention::serial::use_serial;
use crate::kernels::attention::{KvLayout, KvType, MaskMode};
use crate::kernels::matmul::{glu_epilogue, Family};
use crate::kernels::ops::glu::GluOp;
use crate::kernels::ops::norm::RmsNorm;
use crate::kernels::ops::rope::{rope_table, RopeConfig, RopeMode, RopeYarn};
use crate::kernels::ops::select::Select;
use crate::kernels::ops::Io;
use crate::kv_cache::KvCache;
use crate::memory::alloc::Allocator;
use crate::memory::RunParams;
use crate::model::hparams::{Hparams, LayerKind};
use crate::model::weights::{GateUp, Mixer, ModelWeights};
use crate::Result;

use super::attn_build::{attention_ops, AttnEnv};
use super::gemma3::{ffn_glu, layer_attention, layer_layouts, post_norms, sliding_rope, Gemma3Ops};
use super::layer::{AttnOps, DeltaOps, LayerOps, MixerOps};
use super::{Forward, Route};

/// What a forward pass is built for.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardSpec {
    /// Plan names are the target's (`act.x`, `kv.k.0`, `logits`, …) or, for a drafter's draft
    /// pass, `drafter.draft.x`, `drafter.kv.k.0`, `drafter.draft.logits`, ….
    pub drafter: bool,
    /// Rows of the largest step.
    pub max_rows: u32,
    /// Rows whose logits one step computes at most.
    pub max_logit_rows: u32,
    /// Rows of the KV cache.
    pub kv_rows: u32,
    pub type_k: GgmlType,
    pub type_v: GgmlType,
    /// Causal for a model; none for a DSpark block (bidirectional over cache ∪ block).
    pub mask: MaskMode,
    /// Every step uses the fused multi-row attention (no split partials that grow with the
    /// context), even for one row.
    pub fused_only: bool,
    /// Build the on-device argmax of the logits rows.
    pub argmax: bool,
    /// Where the layer allows it (stacked q | k | v weight, f16 caches, normal RoPE pairs, no
    /// bias or q/k norm), the q | k | v matmul applies RoPE and stores k and v itself
    /// (`common/matmul_rope.wgsl`) instead of a RoPE + KV store dispatch after it. The same
    /// bits either way; one dispatch less per layer.
    pub rope_in_qkv: bool,
}

impl ForwardSpec {
    /// The target model for run parameters `p` (sizes as the planner's `memory::target`).
    pub fn target(p: &RunParams) -> ForwardSpec {
        ForwardSpec {
            drafter: false,
            max_rows: u32::try_from(crate::memory::target::max_rows(p)).unwrap_or(u32::MAX),
            max_logit_rows: u32::try_from(crate::memory::target::logit_rows(p)).unwrap_or(u32::MAX),
            kv_rows: p.n_ctx,
            type_k: p.type_k,
            type_v: p.type_v,
            mask: MaskMode::Causal,
            fused_only: false,
            argmax: true,
            rope_in_qkv: true,
        }
    }

    /// The plan name of a buffer the target calls `base`.
    pub fn name(&self, base: &str) -> String {
        if !self.drafter {
            return base.to_string();
        }
        if base.starts_with("kv.") {
            return format!("drafter.{base}");
        }
        let rest = base.split_once('.').map_or(base, |(_, r)| r);
        format!("drafter.draft.{rest}")
    }
}

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
    /// Split-KV partials of the decode attention (absent when every step is fused).
    pub partials: Option<wgpu::Buffer>,
    /// Running (max, sum, next split) of the fused multi-row attention.
    pub attn_state: wgpu::Buffer,
    pub logits: wgpu::Buffer,
    pub tokens: wgpu::Buffer,
    pub positions: wgpu::Buffer,
    /// Per attention layer (every layer of a dense model), in layer order: K cache, V cache.
    pub kv: Vec<[wgpu::Buffer; 2]>,
    /// A hybrid model's DeltaNet scratch and recurrent state.
    pub hybrid: Option<HybridBuffers>,
}

/// The buffers only a hybrid (qwen35) model has (shapes for the largest step of `n` rows).
#[derive(Debug)]
pub struct HybridBuffers {
    /// `[n, conv_dim]` pre-conv q | k | v; `[n, conv_dim]` after the conv (then the gated output).
    pub mixed: wgpu::Buffer,
    pub conv: wgpu::Buffer,
    /// `[n, value_dim]` the output gate z; the delta-rule output.
    pub z: wgpu::Buffer,
    pub delta: wgpu::Buffer,
    /// `[n, n_v]` each.
    pub alpha: wgpu::Buffer,
    pub beta: wgpu::Buffer,
    /// `[n, n_head · head_dim]` the attention layers' output gate.
    pub agate: wgpu::Buffer,
    /// Per DeltaNet layer, in layer order: conv state `[conv_dim, d_conv − 1]`, S state
    /// `[n_v, head_v, head_k]` (`rs.conv.{il}`, `rs.ssm.{il}`).
    pub states: Vec<[wgpu::Buffer; 2]>,
    /// The same, as a checkpoint a rollback restores (`rs.ckpt.conv.{il}`, `rs.ckpt.ssm.{il}`).
    pub checkpoint: Vec<[wgpu::Buffer; 2]>,
}

impl Buffers {
    /// The hybrid buffers, or an error saying the model has none.
    pub fn hybrid(&self) -> Result<&HybridBuffers> {
        self.hybrid
            .as_ref()
            .ok_or_else(|| crate::Error::Usage("this model has no recurrent layers".into()))
    }
}

fn kv_type(t: GgmlType) -> Result<KvType> {
    Ok(KvType::from_ggml(t)?)
}

fn buffers(hp: &Hparams, spec: &ForwardSpec, alloc: &mut Allocator<'_>) -> Result<Buffers> {
    let mut get = |base: &str| alloc.storage(&spec.name(base));
    let mut kv = Vec::with_capacity(hp.n_layer as usize);
    for il in hp.kv_layers() {
        kv.push([get(&format!("kv.k.{il}"))?, get(&format!("kv.v.{il}"))?]);
    }
    let hybrid = match &hp.hybrid {
        None => None,
        Some(_) => {
            let mut states = Vec::new();
            let mut checkpoint = Vec::new();
            for il in (0..hp.n_layer).filter(|&il| hp.layer_kind(il) == LayerKind::DeltaNet) {
                states.push([
                    get(&format!("rs.conv.{il}"))?,
                    get(&format!("rs.ssm.{il}"))?,
                ]);
                checkpoint.push([
                    get(&format!("rs.ckpt.conv.{il}"))?,
                    get(&format!("rs.ckpt.ssm.{il}"))?,
                ]);
            }
            Some(HybridBuffers {
                mixed: get("act.mixed")?,
                conv: get("act.conv")?,
                z: get("act.z")?,
                delta: get("act.delta")?,
                alpha: get("act.alpha")?,
                beta: get("act.beta")?,
                agate: get("act.agate")?,
                states,
                checkpoint,
            })
        }
    };
    Ok(Buffers {
        x: get("act.x")?,
        xn: get("act.xn")?,
        q: get("act.q")?,
        k: get("act.k")?,
        v: get("act.v")?,
        attn: get("act.attn")?,
        gate: get("act.gate")?,
        up: get("act.up")?,
        glu: get("act.glu")?,
        partials: if spec.fused_only {
            None
        } else {
            Some(get("act.attn_partials")?)
        },
        attn_state: get("act.attn_state")?,
        logits: get("logits")?,
        tokens: get("io.tokens")?,
        positions: get("io.positions")?,
        kv,
        hybrid,
    })
}

/// The RoPE of a model (NEOX for qwen-style and DSpark backbones).
pub fn rope_config(hp: &Hparams) -> RopeConfig {
    RopeConfig {
        n_rot: hp.n_rot,
        mode: if hp.rope_neox {
            RopeMode::Neox
        } else {
            RopeMode::Normal
        },
        freq_base: hp.rope_base,
        freq_scale: hp.rope_freq_scale,
    }
}

/// The YaRN parameters and cos/sin scale of a model ([`RopeYarn`]); `None` where the model has
/// neither YaRN nor an attention factor, whose table is then the one built before YaRN existed,
/// bit for bit, with a scale of exactly 1.
pub fn rope_yarn(hp: &Hparams) -> Option<RopeYarn> {
    if hp.rope_ext_factor == 0.0 && hp.rope_attn_factor == 1.0 {
        return None;
    }
    Some(RopeYarn {
        n_ctx_orig: hp.rope_n_ctx_orig,
        ext_factor: hp.rope_ext_factor,
        attn_factor: hp.rope_attn_factor,
        beta_fast: hp.rope_beta_fast,
        beta_slow: hp.rope_beta_slow,
    })
}

impl Forward {
    /// The target model for `params`, creating every buffer through `alloc` (which holds the
    /// plan made with the same `params`) and using uploaded `weights`.
    pub fn new(
        ctx: &GpuContext,
        hp: Hparams,
        weights: ModelWeights,
        params: &RunParams,
        alloc: &mut Allocator<'_>,
    ) -> Result<Forward> {
        Forward::with_spec(ctx, hp, weights, &ForwardSpec::target(params), alloc)
    }

    /// A forward pass built for `spec`.
    pub fn with_spec(
        ctx: &GpuContext,
        hp: Hparams,
        weights: ModelWeights,
        spec: &ForwardSpec,
        alloc: &mut Allocator<'_>,
    ) -> Result<Forward> {
        let (max_rows, max_logit_rows) = (spec.max_rows, spec.max_logit_rows);
        let b = buffers(&hp, spec, alloc)?;
        // On CPU adapters the fused pass is the serial kernel, which also decodes faster than
        // split + reduce (same bits): every step takes it there and no split ops are built.
        // (The plan, made without the adapter, still holds the small decode partials buffer.)
        let split_decode = !use_serial(ctx, kv_type(spec.type_k)?);
        let family = Family::for_context(ctx);
        let rope_cfg = rope_config(&hp);
        // YaRN's per-rotation factors and magnitude are folded into the table here, once per
        // model (see `kernels::ops::rope`): the per-token kernels do what they did before.
        let yarn = rope_yarn(&hp);
        let freqs = rope_table(&rope_cfg, yarn.as_ref(), weights.rope_freqs.as_deref())?;
        let freqs = crate::gpu::buffers::create_storage_init(
            ctx,
            "rope table",
            bytemuck::cast_slice(&freqs),
        )?;
        let (d, eps) = (hp.n_embd, hp.rms_eps);
        let k_layout = KvLayout::new(
            kv_type(spec.type_k)?,
            spec.kv_rows,
            hp.n_head_kv,
            hp.head_dim,
        )?;
        let v_layout = KvLayout::new(
            kv_type(spec.type_v)?,
            spec.kv_rows,
            hp.n_head_kv,
            hp.head_dim_v,
        )?;
        let norm = |src: &wgpu::Buffer, w: &wgpu::Buffer| {
            RmsNorm::new(ctx, Io::Out { src, dst: &b.xn }, Some(w), max_rows, d, eps)
        };
        // x += xn, then xn = rms_norm(x) * w: a residual add fused into the norm after it.
        let add_norm =
            |w: &wgpu::Buffer| RmsNorm::add_then_norm(ctx, &b.x, &b.xn, w, max_rows, d, eps);
        let gemma3 = Gemma3Ops::new(ctx, &hp, &b, spec)?;
        let mut layers = Vec::with_capacity(hp.n_layer as usize);
        let (mut n_kv, mut n_state) = (0usize, 0usize);
        for (il, lw) in weights.layers.iter().enumerate() {
            let attn_norm = if il == 0 {
                norm(&b.x, &lw.attn_norm)?
            } else {
                add_norm(&lw.attn_norm)?
            };
            let mixer = match &lw.mixer {
                Mixer::DeltaNet(dw) => {
                    n_state += 1;
                    let ops = DeltaOps::new(ctx, &hp, &b, dw, n_state - 1, max_rows)?;
                    MixerOps::DeltaNet(Box::new(ops))
                }
                Mixer::Attention(aw) => {
                    n_kv += 1;
                    let kv_index = n_kv - 1;
                    let [kc, vc] = b.kv.get(kv_index).ok_or_else(|| {
                        crate::Error::Usage(format!("layer {il}: no KV cache in the plan"))
                    })?;
                    let il = il as u32;
                    let (layer_freqs, layer_rope) = match (&gemma3, sliding_rope(&hp, il)) {
                        (Some(g), true) => (&g.swa_freqs, &g.swa_cfg),
                        _ => (&freqs, &rope_cfg),
                    };
                    let (mask, scale) = layer_attention(&hp, il, spec.mask);
                    let [kl, vl] = layer_layouts(&hp, il, spec, [k_layout, v_layout])?;
                    let env = AttnEnv {
                        spec,
                        freqs: layer_freqs,
                        rope_cfg: layer_rope,
                        layouts: [&kl, &vl],
                        split_decode,
                        mask,
                        scale,
                    };
                    let ops = attention_ops(ctx, &hp, &b, aw, [kc, vc], &env)?;
                    MixerOps::Attention(Box::new(AttnOps {
                        kv: kv_index,
                        ..ops
                    }))
                }
            };
            layers.push(LayerOps {
                attn_norm,
                mixer,
                ffn_norm: add_norm(&lw.ffn_norm)?,
                glu: if glu_applied(family, &lw.ffn) {
                    None
                } else {
                    let n = max_rows * hp.n_ff;
                    Some(GluOp::new(ctx, ffn_glu(&hp), &b.gate, &b.up, &b.glu, n)?)
                },
                post_norms: post_norms(ctx, &hp, &b, lw.post_norms.as_ref(), max_rows)?,
            });
        }
        let final_norm = add_norm(&weights.output_norm)?;
        // One MoE scratch for every layer (they run one after another).
        let moe_scratch = match weights.layers.iter().find_map(|l| match &l.ffn {
            GateUp::Moe(w) => Some(w),
            _ => None,
        }) {
            Some(w) => {
                let s = crate::kernels::ops::moe::MoeScratch::new(ctx, w, d, max_rows)?;
                for (name, buf) in s.named() {
                    alloc
                        .records
                        .push((spec.name(&format!("act.moe.{name}")), buf.size()));
                }
                Some(s)
            }
            None => None,
        };
        let argmax = if spec.argmax {
            let out = alloc.storage(&spec.name("io.argmax"))?;
            let op = Select::argmax(ctx, &b.logits, &out, max_logit_rows, hp.n_vocab)?;
            alloc
                .records
                .push((spec.name("sample.partials"), op.scratch.size()));
            Some((op, out))
        } else {
            None
        };
        Ok(Forward {
            kv: KvCache::new(spec.kv_rows, 1),
            hp,
            weights,
            buffers: b,
            layers,
            final_norm,
            argmax,
            matmuls: HashMap::new(),
            route: Route::Own,
            seq_caches: Vec::new(),
            family,
            max_rows,
            max_logit_rows,
            rows: max_rows,
            n_logits: max_logit_rows,
            argmax_rows: max_logit_rows,
            taps: Vec::new(),
            tap_row: 0,
            taps_set: (0, 0),
            rope_freqs: freqs,
            head_in: None,
            moe_scratch,
            gemma3,
            grammar_mask: None,
            mask_on: false,
        })
    }
}

/// Whether the up projection applies the GLU itself (paired gate/up weights, or the
/// `matmul_rows.wgsl` epilogue for the up weight's type), so no GLU op is built.
fn glu_applied(family: Family, ffn: &GateUp) -> bool {
    match ffn {
        GateUp::Paired(_) | GateUp::Moe(_) => true,
        GateUp::Separate { up, .. } => glu_epilogue(family, up.ty),
    }
}

//! Model weights on the device: every matrix uploaded as a [`GpuWeight`] (repacked and split as
//! the matmul kernels want), every norm vector and bias as a plain f32 storage buffer, with a
//! progress bar, and every creation recorded so tests can hold it to the memory plan.
//!
//! Expected tensors per architecture (llama.cpp names), `il` = layer:
//! `token_embd.weight [d, V]`, `output_norm.weight [d]`, `output.weight [d, V]` (absent: tied to
//! `token_embd`), `rope_freqs.weight [n_rot/2]` (llama 3, optional), and per layer
//! `blk.il.{attn_norm [d], attn_q [d, q], attn_k [d, k], attn_v [d, v], attn_output [q, d],
//! ffn_norm [d], ffn_gate [d, f], ffn_up [d, f], ffn_down [f, d]}.weight`, plus
//! `attn_{q,k,v}.bias` (qwen2) and `attn_{q,k}_norm.weight [head_dim]` (qwen3).
//!
//! On CPU drivers the target model's q, k and v projections are uploaded stacked into one
//! weight ([`Qkv::Stacked`]), and its gate and up projections paired into one
//! ([`GateUp::Paired`]), when their types allow it, so a layer runs each group as one dispatch.

use crate::gguf::{GgufFile, TensorInfo};
use crate::gpu::buffers::create_storage_init;
use crate::gpu::GpuContext;
use crate::kernels::matmul::dispatch::GLU_PAIR_ROWS;
use crate::kernels::matmul::{
    binding_limit, device_bytes, glu_epilogue, split_plan, Family, GpuWeight,
};
use crate::quant;
use crate::{Error, Result};

use super::hparams::{Hparams, LayerKind};
pub use super::mixer::{AttnWeights, DeltaWeights, Mixer};

/// The q, k and v projections of a layer.
#[derive(Debug, Clone)]
pub enum Qkv {
    /// Three weights (GPU families, drafters, mixed types).
    Separate {
        wq: GpuWeight,
        wk: GpuWeight,
        wv: GpuWeight,
    },
    /// One weight `[d, q + k + v]` whose rows are q's, then k's, then v's (`blk.il.attn_qkv`),
    /// run as one dispatch writing q, k and v (`MatmulIo::split`): on CPU drivers a dispatch is
    /// a fixed cost (the separate k and v projections took 6 ms of a 40 ms decode step on
    /// lavapipe). Its buffer takes exactly the bytes the memory plan gives the three weights.
    Stacked {
        w: GpuWeight,
        q_rows: u32,
        k_rows: u32,
    },
}

/// The gate and up projections of a layer's FFN.
#[derive(Debug, Clone)]
pub enum GateUp {
    /// Two weights (GPU families, drafters, mixed types).
    Separate { gate: GpuWeight, up: GpuWeight },
    /// One weight `[d, 2 f]` (`blk.il.ffn_gate_up`): blocks of [`GLU_PAIR_ROWS`] gate rows, each
    /// followed by the same up rows, run as one dispatch writing act(gate) * up
    /// (`MatmulIo::paired`, CPU drivers; the gate projection's dispatch saved). Its buffer takes
    /// exactly the bytes the memory plan gives the two weights.
    Paired(GpuWeight),
    /// A mixture-of-experts layer (qwen3moe, qwen35moe): router, experts and shared expert,
    /// run by `kernels::ops::moe::MoeBlock` in place of gate, up, GLU and down.
    Moe(Box<crate::kernels::ops::moe::MoeGpuWeights>),
}

/// One layer's weights (cloning shares the device buffers).
#[derive(Debug, Clone)]
pub struct LayerWeights {
    pub attn_norm: wgpu::Buffer,
    /// Attention or Gated DeltaNet.
    pub mixer: Mixer,
    /// `ffn_norm` (`post_attention_norm` in qwen35).
    pub ffn_norm: wgpu::Buffer,
    pub ffn: GateUp,
    /// `ffn_down` (a MoE layer: its `ffn_down_exps`, run by the MoE block).
    pub down: GpuWeight,
    /// Gemma 3: `post_attention_norm`, `post_ffw_norm` `[d]`, on the attention's and the FFN's
    /// output before each residual add.
    pub post_norms: Option<[wgpu::Buffer; 2]>,
}

/// Every weight of a model (cloning shares the device buffers: server slots use one copy).
#[derive(Debug, Clone)]
pub struct ModelWeights {
    pub token_embd: GpuWeight,
    /// `None` when the LM head is `token_embd` (tied embeddings).
    pub output: Option<GpuWeight>,
    pub output_norm: wgpu::Buffer,
    /// llama 3 frequency factors (`rope_freqs.weight`), dequantized on the host.
    pub rope_freqs: Option<Vec<f32>>,
    pub layers: Vec<LayerWeights>,
    /// (tensor name, device bytes) of everything created, in creation order.
    pub allocations: Vec<(String, u64)>,
}

impl LayerWeights {
    /// The attention weights, or an error naming the layer's mixer (drafters and dense models
    /// have attention in every layer).
    pub fn attn(&self) -> Result<&AttnWeights> {
        match &self.mixer {
            Mixer::Attention(a) => Ok(a),
            Mixer::DeltaNet(d) => Err(Error::Usage(format!(
                "{} belongs to a Gated DeltaNet layer where attention was expected",
                d.qkv.name
            ))),
        }
    }

    /// The separate q, k and v weights ([`AttnWeights::separate_qkv`]).
    pub fn separate_qkv(&self) -> Result<[&GpuWeight; 3]> {
        self.attn()?.separate_qkv()
    }

    /// The separate gate and up weights, or an error naming the paired weight (only the
    /// target model pairs them; drafters never do).
    pub fn separate_gate_up(&self) -> Result<[&GpuWeight; 2]> {
        match &self.ffn {
            GateUp::Separate { gate, up } => Ok([gate, up]),
            GateUp::Paired(w) => Err(Error::Usage(format!(
                "{} holds gate and up paired where separate weights were expected",
                w.name
            ))),
            GateUp::Moe(w) => Err(Error::Usage(format!(
                "{} belongs to a mixture-of-experts layer where a dense FFN was expected",
                w.router.name
            ))),
        }
    }
}

impl ModelWeights {
    /// The LM head: `output.weight`, or `token_embd.weight` when tied.
    pub fn lm_head(&self) -> &GpuWeight {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}

/// Uploads weights from a GGUF file, recording each allocation.
pub(crate) struct Loader<'a> {
    ctx: &'a GpuContext,
    file: &'a GgufFile,
    pub allocations: Vec<(String, u64)>,
    bar: indicatif::ProgressBar,
    /// Stack each layer's q, k and v weights, and pair its gate and up weights, for this family
    /// where it can ([`Qkv::Stacked`], [`GateUp::Paired`]).
    pub stack: Option<Family>,
    /// Weights placed in host memory (`memory::placement`; only routed experts are read from
    /// there today, the others are refused by [`load_placed`]).
    pub host: std::collections::HashSet<String>,
}

fn missing(name: &str) -> Error {
    Error::Gguf(crate::gguf::GgufError::MissingTensor {
        name: name.to_string(),
    })
}

impl<'a> Loader<'a> {
    /// A loader over `file`; `progress` shows a bar on stderr.
    pub fn new(ctx: &'a GpuContext, file: &'a GgufFile, progress: bool) -> Loader<'a> {
        let total: u64 = file.tensors.iter().map(|t| t.n_bytes).sum();
        let bar = if progress {
            let style = indicatif::ProgressStyle::with_template(
                "loading {bar:30} {bytes}/{total_bytes} {elapsed}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            indicatif::ProgressBar::new(total).with_style(style)
        } else {
            indicatif::ProgressBar::hidden()
        };
        Loader {
            ctx,
            file,
            allocations: Vec::new(),
            bar,
            stack: None,
            host: Default::default(),
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    fn info(&self, name: &str) -> Result<&TensorInfo> {
        self.file.tensor(name).ok_or_else(|| missing(name))
    }

    pub fn matrix(&mut self, name: &str) -> Result<GpuWeight> {
        let (t, data) = self.file.tensor_data(name)?;
        let shape = [t.row_len(), t.n_rows()];
        let w = GpuWeight::upload(self.ctx, name, t.ty, shape, data)?;
        self.allocations.push((name.to_string(), w.buffer_bytes()));
        self.bar.inc(t.n_bytes);
        Ok(w)
    }

    /// A vector (norm weight, bias) as f32 on the device, checked to have `len` elements.
    pub fn vector(&mut self, name: &str, len: u32) -> Result<wgpu::Buffer> {
        let values = self.host_f32(name)?;
        if values.len() != len as usize {
            return Err(Error::Usage(format!(
                "tensor {name} has {} elements, expected {len}",
                values.len()
            )));
        }
        let buffer = create_storage_init(self.ctx, name, bytemuck::cast_slice(&values))?;
        self.allocations.push((name.to_string(), buffer.size()));
        Ok(buffer)
    }

    pub fn host_f32(&mut self, name: &str) -> Result<Vec<f32>> {
        let (t, data) = self.file.tensor_data(name)?;
        let n = usize::try_from(t.n_elements()).map_err(|_| missing(name))?;
        self.bar.inc(t.n_bytes);
        Ok(quant::dequantize(t.ty, data, n)?)
    }

    pub fn optional_vector(&mut self, name: &str, len: u32) -> Result<Option<wgpu::Buffer>> {
        if self.file.tensor(name).is_some() {
            self.vector(name, len).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The weights `names` stacked into one weight `name` when `family` runs them as one
    /// dispatch (one type and row length, the `matmul_rows.wgsl` epilogues, one split) and the
    /// stacked layout fits the bytes planned for them; else `None`. Rows one after the other,
    /// or with `pair` (two weights of equal rows, a multiple of [`GLU_PAIR_ROWS`]) alternating
    /// blocks of [`GLU_PAIR_ROWS`] rows of each. The one buffer is padded to the sum of the
    /// parts' planned bytes and recorded under `part+part+…` with the size wgpu reports, so
    /// the record can be held to the plan (made without the adapter). Returns the rows of each
    /// part too.
    pub(super) fn stacked(
        &mut self,
        name: &str,
        names: &[String],
        family: Family,
        pair: bool,
    ) -> Result<Option<(GpuWeight, Vec<u32>)>> {
        let mut parts = Vec::with_capacity(names.len());
        for n in names {
            parts.push(self.file.tensor_data(n)?);
        }
        let (t0, _) = parts[0];
        let (ty, k, n0) = (t0.ty, t0.row_len(), t0.n_rows());
        let block = u64::from(GLU_PAIR_ROWS);
        let paired_ok = !pair || (parts.len() == 2 && n0 % block == 0);
        let same = |t: &TensorInfo| t.ty == ty && t.row_len() == k && (!pair || t.n_rows() == n0);
        if !glu_epilogue(family, ty) || !paired_ok || !parts.iter().all(|(t, _)| same(t)) {
            return Ok(None);
        }
        let limits = self.ctx.limits();
        let rows: Vec<u64> = parts.iter().map(|(t, _)| t.n_rows()).collect();
        let mut planned = Vec::with_capacity(rows.len());
        for &n in &rows {
            planned.push(device_bytes(ty, [k, n], limits)?);
        }
        let total_rows: u64 = rows.iter().sum();
        let plan = split_plan(ty, [k, total_rows], binding_limit(limits))?;
        let budget: u64 = planned.iter().sum();
        if plan.len() != 1 || plan[0].bytes > budget {
            return Ok(None);
        }
        let bytes: Vec<u8> = if pair {
            let blk = usize::try_from(block * (t0.n_bytes / n0)).unwrap_or(usize::MAX);
            let (g, u) = (parts[0].1.chunks(blk), parts[1].1.chunks(blk));
            g.zip(u)
                .flat_map(|(g, u)| g.iter().chain(u).copied())
                .collect()
        } else {
            parts.iter().flat_map(|(_, d)| d.iter().copied()).collect()
        };
        let w = GpuWeight::upload_padded(self.ctx, name, ty, [k, total_rows], &bytes, budget)?;
        // One buffer holds every part: it is recorded once, with the bytes wgpu reports, under
        // the parts' names joined by '+' (the plan has one entry per part).
        self.allocations.push((names.join("+"), w.buffer_bytes()));
        for (t, _) in &parts {
            self.bar.inc(t.n_bytes);
        }
        let rows = rows.iter().map(|&r| u32::try_from(r).unwrap_or(u32::MAX));
        Ok(Some((w, rows.collect())))
    }

    /// Layer `il`'s weights (llama.cpp names, the same in every format).
    pub fn layer(&mut self, il: u32, hp: &Hparams) -> Result<LayerWeights> {
        let p = |s: &str| format!("blk.{il}.{s}");
        let attn_norm = self.vector(&p("attn_norm.weight"), hp.n_embd)?;
        let mixer = match hp.layer_kind(il) {
            LayerKind::Attention => Mixer::Attention(Box::new(self.attention(il, hp)?)),
            LayerKind::DeltaNet => Mixer::DeltaNet(Box::new(self.delta_net(il, hp)?)),
        };
        let ffn_norm_name = if hp.hybrid.is_some() {
            "post_attention_norm.weight"
        } else {
            "ffn_norm.weight"
        };
        let ffn_norm = self.vector(&p(ffn_norm_name), hp.n_embd)?;
        if let Some(moe) = &hp.moe {
            let host = |name: &str| self.host.contains(name);
            let w = super::moe::upload_layer(self.ctx, self.file, il, hp.n_embd, moe, &host)?;
            let mut parts = vec![&w.router, &w.gate_exps, &w.up_exps, &w.down_exps];
            parts.extend(w.shared.iter().flatten());
            for part in parts {
                self.allocations
                    .push((part.name.clone(), part.buffer_bytes()));
            }
            let down = w.down_exps.clone();
            return Ok(LayerWeights {
                attn_norm,
                mixer,
                ffn_norm,
                ffn: GateUp::Moe(Box::new(w)),
                down,
                post_norms: None,
            });
        }
        let names = ["ffn_gate.weight", "ffn_up.weight"].map(p);
        let paired = match self.stack {
            Some(family) => self.stacked(&p("ffn_gate_up"), &names, family, true)?,
            None => None,
        };
        let ffn = match paired {
            Some((w, _)) => GateUp::Paired(w),
            None => GateUp::Separate {
                gate: self.matrix(&names[0])?,
                up: self.matrix(&names[1])?,
            },
        };
        let down = self.matrix(&p("ffn_down.weight"))?;
        let post_norms = match hp.gemma3 {
            Some(_) => Some([
                self.vector(&p("post_attention_norm.weight"), hp.n_embd)?,
                self.vector(&p("post_ffw_norm.weight"), hp.n_embd)?,
            ]),
            None => None,
        };
        Ok(LayerWeights {
            attn_norm,
            mixer,
            ffn_norm,
            ffn,
            down,
            post_norms,
        })
    }
}

/// Upload every weight `hp` needs from `file`, each shape checked first
/// ([`super::shapes::check_shapes`]); `progress` shows a bar on stderr.
pub fn load(
    ctx: &GpuContext,
    file: &GgufFile,
    hp: &Hparams,
    progress: bool,
) -> Result<ModelWeights> {
    load_placed(ctx, file, hp, progress, &[])
}

/// [`load`] with the weights named in `host` in host memory the kernels read directly (a
/// plan's host-placed buffers, `memory::placement`). Routed expert tensors can be placed
/// there; any other name is refused (the dense weights' stacked and paired uploads are
/// device-only).
pub fn load_placed(
    ctx: &GpuContext,
    file: &GgufFile,
    hp: &Hparams,
    progress: bool,
    host: &[String],
) -> Result<ModelWeights> {
    if let Some(name) = host.iter().find(|n| super::moe::expert_layer(n).is_none()) {
        return Err(Error::Usage(format!(
            "{name}: only routed expert tensors (blk.N.ffn_{{gate,up,down}}_exps) can be placed \
             in host memory; the pattern that placed it must not match dense tensors"
        )));
    }
    super::shapes::check_shapes(file, hp)?;
    if hp.gemma4.is_some() {
        let arch = hp.arch.name().to_string();
        return Err(super::hparams::HparamsError::NoDeviceForward { arch }.into());
    }
    let mut l = Loader::new(ctx, file, progress);
    l.stack = Some(Family::for_context(ctx));
    l.host = host.iter().cloned().collect();
    if file.shape_only {
        return Err(Error::Gguf(crate::gguf::GgufError::ShapeOnly {
            tensor: "token_embd.weight".to_string(),
        }));
    }
    l.info("token_embd.weight")?;
    let token_embd = l.matrix("token_embd.weight")?;
    let output = match file.tensor("output.weight") {
        Some(_) => Some(l.matrix("output.weight")?),
        None => None,
    };
    let output_norm = l.vector("output_norm.weight", hp.n_embd)?;
    let rope_freqs = match file.tensor("rope_freqs.weight") {
        Some(_) => Some(l.host_f32("rope_freqs.weight")?),
        None => None,
    };
    let mut layers = Vec::with_capacity(hp.n_layer as usize);
    for il in 0..hp.n_layer {
        layers.push(l.layer(il, hp)?);
    }
    l.finish();
    Ok(ModelWeights {
        token_embd,
        output,
        output_norm,
        rope_freqs,
        layers,
        allocations: l.allocations,
    })
}

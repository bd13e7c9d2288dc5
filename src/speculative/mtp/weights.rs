//! The MTP (`nextn`) block of a `qwen35` / `qwen35moe` file, uploaded beside the target's
//! weights: block `il = n_layer` (the first after the main layers), a full gated-attention
//! decoder block shaped like the trunk's attention layers, plus `nextn.eh_proj` `{2d, d}`,
//! `nextn.enorm`, `nextn.hnorm` `{d}` and the optional `nextn.embed_tokens`,
//! `nextn.shared_head_head`, `nextn.shared_head_norm`, which fall back to the target's
//! `token_embd`, LM head and `output_norm` (llama.cpp b11434, `src/models/qwen35.cpp`,
//! `load_block_mtp` and `graph_mtp`).

use crate::gguf::GgufFile;
use crate::gpu::GpuContext;
use crate::kernels::matmul::GpuWeight;
use crate::model::hparams::Hparams;
use crate::model::weights::{Loader, ModelWeights};
use crate::{Error, Result};

/// The MTP block's weights on the device (cloning shares the buffers: one copy for every slot).
#[derive(Debug, Clone)]
pub struct MtpWeights {
    /// A one-layer model: the MTP block, the embedding it gathers, its head norm and LM head.
    pub model: ModelWeights,
    /// `nextn.eh_proj` `[2d → d]`: the concatenated normed embedding and hidden state.
    pub eh_proj: GpuWeight,
    pub enorm: wgpu::Buffer,
    pub hnorm: wgpu::Buffer,
    /// The target's `output_norm`: the target's taps are its last layer's output, and the MTP
    /// head reads `h = output_norm(x)` (llama.cpp's `h_nextn`).
    pub target_norm: wgpu::Buffer,
    /// (tensor name, device bytes) of what was uploaded for the MTP block.
    pub allocations: Vec<(String, u64)>,
}

/// The MTP block's index in `file`: `n_layer` (main layers), when the file has exactly one.
pub fn mtp_layer(hp: &Hparams, file: &GgufFile) -> Result<u32> {
    let n = hp.hybrid.as_ref().map_or(0, |h| h.n_nextn);
    let arch = hp.arch.name();
    match n {
        0 => Err(Error::Usage(format!(
            "--spec-type draft-mtp: this {arch} file has no MTP layer \
             ({arch}.nextn_predict_layers is absent or 0)"
        ))),
        1 => {
            let il = hp.n_layer;
            let name = format!("blk.{il}.nextn.eh_proj.weight");
            let t = file.tensor(&name).ok_or_else(|| {
                Error::Gguf(crate::gguf::GgufError::MissingTensor { name: name.clone() })
            })?;
            let d = u64::from(hp.n_embd);
            if t.row_len() != 2 * d || t.n_rows() != d {
                return Err(Error::Usage(format!(
                    "{name} is [{}, {}], expected [{}, {d}] (2·n_embd → n_embd)",
                    t.row_len(),
                    t.n_rows(),
                    2 * d
                )));
            }
            check_block(hp, file, il)?;
            Ok(il)
        }
        n => Err(Error::Usage(format!(
            "--spec-type draft-mtp: {arch}.nextn_predict_layers is {n}; flint (as llama.cpp \
             for qwen35) runs a single MTP block"
        ))),
    }
}

/// Every tensor of the trunk's first attention layer has its twin, of the same shape, in MTP
/// block `il` (the block is "a full-attention decoder block", so it is held to one).
fn check_block(hp: &Hparams, file: &GgufFile, il: u32) -> Result<()> {
    let Some(a) =
        (0..hp.n_layer).find(|&l| hp.layer_kind(l) == crate::model::hparams::LayerKind::Attention)
    else {
        return Ok(());
    };
    let prefix = format!("blk.{a}.");
    for t in file.tensors.iter().filter(|t| t.name.starts_with(&prefix)) {
        let name = format!("blk.{il}.{}", &t.name[prefix.len()..]);
        let twin = file.tensor(&name).ok_or_else(|| {
            Error::Gguf(crate::gguf::GgufError::MissingTensor { name: name.clone() })
        })?;
        if twin.row_len() != t.row_len() || twin.n_rows() != t.n_rows() {
            return Err(Error::Usage(format!(
                "{name} is [{}, {}] but {} is [{}, {}]: the MTP block must be shaped like \
                 the trunk's attention layers",
                twin.row_len(),
                twin.n_rows(),
                t.name,
                t.row_len(),
                t.n_rows()
            )));
        }
    }
    Ok(())
}

impl MtpWeights {
    /// Uploads MTP block `mtp_layer(hp, file)` of `file`, sharing what it falls back to with
    /// the target's `target` weights.
    pub fn load(
        ctx: &GpuContext,
        file: &GgufFile,
        hp: &Hparams,
        target: &ModelWeights,
    ) -> Result<MtpWeights> {
        let il = mtp_layer(hp, file)?;
        let d = hp.n_embd;
        let p = |s: &str| format!("blk.{il}.nextn.{s}");
        let mut l = Loader::new(ctx, file, false);
        let layer = l.layer(il, hp)?;
        let eh_proj = l.matrix(&p("eh_proj.weight"))?;
        let enorm = l.vector(&p("enorm.weight"), d)?;
        let hnorm = l.vector(&p("hnorm.weight"), d)?;
        let embed = match file.tensor(&p("embed_tokens.weight")) {
            Some(_) => l.matrix(&p("embed_tokens.weight"))?,
            None => target.token_embd.clone(),
        };
        let head = match file.tensor(&p("shared_head_head.weight")) {
            Some(_) => l.matrix(&p("shared_head_head.weight"))?,
            None => target.lm_head().clone(),
        };
        let head_norm = l
            .optional_vector(&p("shared_head_norm.weight"), d)?
            .unwrap_or_else(|| target.output_norm.clone());
        let allocations = std::mem::take(&mut l.allocations);
        let model = ModelWeights {
            token_embd: embed,
            output: Some(head),
            output_norm: head_norm,
            rope_freqs: target.rope_freqs.clone(),
            layers: vec![layer],
            allocations: Vec::new(),
        };
        Ok(MtpWeights {
            model,
            eh_proj,
            enorm,
            hnorm,
            target_norm: target.output_norm.clone(),
            allocations,
        })
    }
}

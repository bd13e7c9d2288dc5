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

use crate::gguf::{GgufFile, TensorInfo};
use crate::gpu::buffers::create_storage_init;
use crate::gpu::GpuContext;
use crate::kernels::matmul::GpuWeight;
use crate::quant;
use crate::{Error, Result};

use super::hparams::{Arch, Hparams};

/// One layer's weights (cloning shares the device buffers).
#[derive(Debug, Clone)]
pub struct LayerWeights {
    pub attn_norm: wgpu::Buffer,
    pub wq: GpuWeight,
    pub wk: GpuWeight,
    pub wv: GpuWeight,
    pub wo: GpuWeight,
    /// qwen2: `[q]`, `[k]`, `[v]`.
    pub bias_qkv: Option<[wgpu::Buffer; 3]>,
    /// qwen3: `[head_dim]` each.
    pub qk_norm: Option<[wgpu::Buffer; 2]>,
    pub ffn_norm: wgpu::Buffer,
    pub gate: GpuWeight,
    pub up: GpuWeight,
    pub down: GpuWeight,
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
        self.allocations.push((name.to_string(), w.device_bytes()));
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

    /// Layer `il`'s weights (llama.cpp names, the same in every format).
    pub fn layer(&mut self, il: u32, hp: &Hparams) -> Result<LayerWeights> {
        let p = |s: &str| format!("blk.{il}.{s}");
        let bias_qkv = if hp.arch == Arch::Qwen2 || hp.qkv_bias {
            let q = self.optional_vector(&p("attn_q.bias"), hp.q_dim())?;
            let k = self.optional_vector(&p("attn_k.bias"), hp.k_dim())?;
            let v = self.optional_vector(&p("attn_v.bias"), hp.v_dim())?;
            match (q, k, v) {
                (Some(q), Some(k), Some(v)) => Some([q, k, v]),
                _ => None,
            }
        } else {
            None
        };
        let qk_norm = if hp.qk_norm {
            Some([
                self.vector(&p("attn_q_norm.weight"), hp.head_dim)?,
                self.vector(&p("attn_k_norm.weight"), hp.head_dim)?,
            ])
        } else {
            None
        };
        Ok(LayerWeights {
            attn_norm: self.vector(&p("attn_norm.weight"), hp.n_embd)?,
            wq: self.matrix(&p("attn_q.weight"))?,
            wk: self.matrix(&p("attn_k.weight"))?,
            wv: self.matrix(&p("attn_v.weight"))?,
            wo: self.matrix(&p("attn_output.weight"))?,
            bias_qkv,
            qk_norm,
            ffn_norm: self.vector(&p("ffn_norm.weight"), hp.n_embd)?,
            gate: self.matrix(&p("ffn_gate.weight"))?,
            up: self.matrix(&p("ffn_up.weight"))?,
            down: self.matrix(&p("ffn_down.weight"))?,
        })
    }
}

/// Upload every weight `hp` needs from `file`; `progress` shows a bar on stderr.
pub fn load(
    ctx: &GpuContext,
    file: &GgufFile,
    hp: &Hparams,
    progress: bool,
) -> Result<ModelWeights> {
    let mut l = Loader::new(ctx, file, progress);
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

//! A DSpark drafter's weights on the device, from either GGUF format (dspark-spec §2), checked
//! against the target at load: its backbone as a [`ModelWeights`] (embeddings and LM head
//! borrowed from the target when the drafter has none: the same device buffers, no copy), the
//! fusion `fc` and its norm, the Markov head and the confidence head.

use crate::gguf::GgufFile;
use crate::gpu::buffers::create_storage_init;
use crate::gpu::GpuContext;
use crate::kernels::matmul::GpuWeight;
use crate::model::weights::{Loader, ModelWeights};
use crate::model::{drafter_tensor_name, DrafterMeta, Hparams};
use crate::{Error, Result};

/// The drafter-only weights besides the backbone.
#[derive(Debug)]
pub struct HeadWeights {
    /// `fc` `[m·d_t → d]`.
    pub fc: GpuWeight,
    /// `enc.output_norm` `[d]` (DeepSpec `hidden_norm`).
    pub enc_norm: wgpu::Buffer,
    /// Markov head: `W1` `[V, R]` (gathered by token), `W2` `[R → V]`.
    pub markov: Option<[GpuWeight; 2]>,
    /// Confidence head `[d + R]` weights then the bias, f32.
    pub conf: Option<wgpu::Buffer>,
}

fn mismatch(what: &str, drafter: impl ToString, target: impl ToString) -> Error {
    Error::Usage(format!(
        "drafter/target mismatch: {what}: the drafter has {}, the target {}",
        drafter.to_string(),
        target.to_string()
    ))
}

fn expect(w: &GpuWeight, k: u32, n: u32) -> Result<()> {
    if w.k != k || w.n != n {
        return Err(Error::Usage(format!(
            "drafter tensor {} is [{} → {}], expected [{k} → {n}]",
            w.name, w.k, w.n
        )));
    }
    Ok(())
}

/// Checks what the drafter declares against the target before anything is uploaded.
pub fn check_meta(meta: &DrafterMeta, file: &GgufFile, target: &Hparams) -> Result<()> {
    if meta.target_hidden != target.n_embd {
        return Err(mismatch(
            "tapped hidden size (dflash.target_hidden_size)",
            meta.target_hidden,
            target.n_embd,
        ));
    }
    if let Some(&bad) = meta.target_layers.iter().find(|&&l| l > target.n_layer) {
        return Err(Error::Usage(format!(
            "drafter taps layer {bad} (layer-input convention) but the target has {} layers \
             (taps 0..={})",
            target.n_layer, target.n_layer
        )));
    }
    if meta.hp.n_vocab != target.n_vocab {
        return Err(mismatch("vocabulary size", meta.hp.n_vocab, target.n_vocab));
    }
    let mask = meta.mask_token_id.ok_or_else(|| {
        Error::Usage("the drafter has no mask token id (tokenizer.ggml.mask_token_id)".into())
    })?;
    if mask >= target.n_vocab {
        return Err(Error::Usage(format!(
            "drafter mask token {mask} is outside the target's vocabulary of {}",
            target.n_vocab
        )));
    }
    if (!meta.own_embd || !meta.own_output) && meta.hp.n_embd != target.n_embd {
        return Err(mismatch(
            "hidden size (embeddings borrowed from the target)",
            meta.hp.n_embd,
            target.n_embd,
        ));
    }
    let m = &file.metadata;
    for key in [
        "dflash.log_snr_conditioning",
        "dspark.dspark.log_snr_conditioning",
    ] {
        if m.opt(key, |m, k| m.bool(k)).ok().flatten() == Some(true) {
            return Err(Error::Usage(format!(
                "{key} = true: log-SNR conditioned drafters are not supported"
            )));
        }
    }
    Ok(())
}

/// Uploads the drafter's weights: its backbone (borrowing `target`'s embeddings and LM head
/// where it has none) and its heads, each checked against the shapes it must have.
pub fn load(
    ctx: &GpuContext,
    file: &GgufFile,
    meta: &DrafterMeta,
    target: &ModelWeights,
) -> Result<(ModelWeights, HeadWeights)> {
    let hp = &meta.hp;
    let name = |n: &'static str| drafter_tensor_name(hp.arch, n);
    let mut l = Loader::new(ctx, file, false);
    let token_embd = if meta.own_embd {
        l.matrix("token_embd.weight")?
    } else {
        target.token_embd.clone()
    };
    let output = if meta.own_output {
        Some(l.matrix("output.weight")?)
    } else {
        Some(target.lm_head().clone())
    };
    let (d, v) = (hp.n_embd, hp.n_vocab);
    expect(&token_embd, d, v)?;
    if let Some(o) = &output {
        expect(o, d, v)?;
    }
    let mut layers = Vec::with_capacity(hp.n_layer as usize);
    for il in 0..hp.n_layer {
        let lw = l.layer(il, hp)?;
        let [wq, wk, wv] = lw.separate_qkv()?;
        expect(wq, d, hp.q_dim())?;
        expect(wk, d, hp.k_dim())?;
        expect(wv, d, hp.v_dim())?;
        expect(&lw.attn()?.wo, hp.n_head * hp.head_dim_v, d)?;
        let [gate, up] = lw.separate_gate_up()?;
        expect(gate, d, hp.n_ff)?;
        expect(up, d, hp.n_ff)?;
        expect(&lw.down, hp.n_ff, d)?;
        if lw.attn()?.qk_norm.is_none() {
            return Err(Error::Usage(format!(
                "drafter layer {il} has no attn_q_norm / attn_k_norm (a Qwen3-style backbone)"
            )));
        }
        layers.push(lw);
    }
    let tap_width = u32::try_from(meta.tap_width()).unwrap_or(u32::MAX);
    let fc = l.matrix(name("fc.weight"))?;
    expect(&fc, tap_width, d)?;
    let enc_norm = l.vector(name("enc.output_norm.weight"), d)?;
    let output_norm = l.vector("output_norm.weight", d)?;
    let r = meta.markov_rank;
    let markov = if r > 0 {
        let w1 = l.matrix(name("markov_w1.weight"))?;
        let w2 = l.matrix(name("markov_w2.weight"))?;
        expect(&w1, r, v)?;
        expect(&w2, r, v)?;
        Some([w1, w2])
    } else {
        None
    };
    let conf = if meta.has_confidence {
        let mut w = l.host_f32(name("conf_proj.weight"))?;
        if w.len() != (d + r) as usize {
            return Err(Error::Usage(format!(
                "drafter {} has {} weights, expected d + R = {} + {r}",
                name("conf_proj.weight"),
                w.len(),
                d
            )));
        }
        let bias_name = name("conf_proj.bias");
        let b = match file.tensor(bias_name) {
            Some(_) => l.host_f32(bias_name)?,
            None => vec![0.0],
        };
        w.push(b.first().copied().unwrap_or(0.0));
        let buf = create_storage_init(ctx, "drafter confidence head", bytemuck::cast_slice(&w))?;
        l.allocations.push(("drafter.conf".into(), buf.size()));
        Some(buf)
    } else {
        None
    };
    l.finish();
    let allocations = std::mem::take(&mut l.allocations);
    let model = ModelWeights {
        token_embd,
        output,
        output_norm,
        rope_freqs: None,
        layers,
        allocations,
    };
    let heads = HeadWeights {
        fc,
        enc_norm,
        markov,
        conf,
    };
    Ok((model, heads))
}

//! A DSpark drafter's weights on the device, from either GGUF format (docs/DSPARK.md), checked
//! against the target at load: its backbone as a [`ModelWeights`] (embeddings and LM head
//! borrowed from the target when the drafter has none: the same device buffers, no copy), the
//! fusion `fc` and its norm, the Markov head and the confidence head, and for a log-SNR
//! conditioned drafter the `[γ, d]` rows its draft pass adds to the block's embeddings
//! (computed once here, on the host, from `log_snr_fc1` / `log_snr_fc2`: see [`log_snr_rows`]).
//! Every matrix goes through the same loader and matmul kernels as the target's, whatever its
//! type (Q2_0 in either layout, Q4_1, BF16, …).

use crate::gguf::GgufFile;
use crate::gpu::buffers::create_storage_init;
use crate::gpu::GpuContext;
use crate::kernels::launch::Dispatch;
use crate::kernels::matmul::{embed_dispatches, GpuWeight};
use crate::kernels::ops::binary::{Binary, BinaryOp};
use crate::kernels::ops::Io;
use crate::model::drafter_meta::LogSnr;
use crate::model::forward::Forward;
use crate::model::weights::{Loader, ModelWeights};
use crate::model::{drafter_tensor_name, DrafterMeta, Hparams};
use crate::{Error, Result};

/// Sinusoidal features of one log-SNR value (PrismML's `LogSnrEmbed`).
pub const LOG_SNR_FEATURES: usize = 128;

/// The drafter-only weights besides the backbone (handles: a clone shares the buffers).
#[derive(Debug, Clone)]
pub struct HeadWeights {
    /// `fc` `[m·d_t → d]`.
    pub fc: GpuWeight,
    /// `enc.output_norm` `[d]` (DeepSpec `hidden_norm`).
    pub enc_norm: wgpu::Buffer,
    /// Markov head: `W1` `[V, R]` (gathered by token), `W2` `[R → V]`.
    pub markov: Option<[GpuWeight; 2]>,
    /// Confidence head `[d + R]` weights then the bias, f32.
    pub conf: Option<wgpu::Buffer>,
    /// Log-SNR conditioning rows `[γ, d]`, f32, added to the draft rows' embeddings.
    pub log_snr: Option<wgpu::Buffer>,
}

/// The draft pass's log-SNR add: `x[γ, d] += rows[γ, d]`, in place, placed right after the
/// embedding gather (before layer 0's `attn_norm`).
#[derive(Debug)]
pub struct SnrAdd {
    /// Index in the draft step's dispatch list: the number of embedding dispatches.
    pub at: usize,
    pub op: BinaryOp,
}

impl SnrAdd {
    /// The add for `fwd`'s `γ`-row step; `None` for a drafter without conditioning.
    pub fn new(
        ctx: &GpuContext,
        fwd: &Forward,
        heads: &HeadWeights,
        gamma: u32,
    ) -> Result<Option<SnrAdd>> {
        let Some(rows) = &heads.log_snr else {
            return Ok(None);
        };
        let b = &fwd.buffers;
        // The forward lists its embedding gather first; the same call gives the same count.
        let at = embed_dispatches(ctx, &fwd.weights.token_embd, &b.tokens, 0, gamma, &b.x, 0)?;
        let n = gamma * fwd.hp.n_embd;
        let op = BinaryOp::new(ctx, Io::InPlace(&b.x), Binary::Add { b: rows, n_b: n }, n)?;
        Ok(Some(SnrAdd { at: at.len(), op }))
    }

    /// Inserts the add into a draft step's dispatch list.
    pub fn insert<'a>(&'a self, list: &mut Vec<&'a Dispatch>) {
        list.insert(self.at.min(list.len()), &self.op.dispatch);
    }
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

/// Checks what the drafter declares against the target before anything is uploaded;
/// `lm_rows` is the target's LM head rows (a vocabulary-less drafter declares only a size,
/// which must be this).
pub fn check_meta(meta: &DrafterMeta, target: &Hparams, lm_rows: u32) -> Result<()> {
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
    if meta.hp.n_vocab != lm_rows {
        return Err(Error::Usage(format!(
            "drafter/target mismatch: vocabulary size: the drafter has {} tokens, the target's \
             LM head {lm_rows} rows",
            meta.hp.n_vocab
        )));
    }
    let mask = meta.mask_token_id.ok_or_else(|| {
        Error::Usage("the drafter has no mask token id (tokenizer.ggml.mask_token_id)".into())
    })?;
    if mask >= lm_rows {
        return Err(Error::Usage(format!(
            "drafter mask token {mask} is outside the target's vocabulary of {lm_rows}"
        )));
    }
    if (!meta.own_embd || !meta.own_output) && meta.hp.n_embd != target.n_embd {
        return Err(mismatch(
            "hidden size (embeddings borrowed from the target)",
            meta.hp.n_embd,
            target.n_embd,
        ));
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
    let log_snr = match meta.log_snr {
        Some(range) => {
            let rows = log_snr_rows(&mut l, file, meta, range)?;
            let buf =
                create_storage_init(ctx, "drafter log-SNR rows", bytemuck::cast_slice(&rows))?;
            l.allocations.push(("drafter.log_snr".into(), buf.size()));
            Some(buf)
        }
        None => None,
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
        log_snr,
    };
    Ok((model, heads))
}

/// The log-SNR conditioning rows `[γ, d]` (PrismML's `LogSnrEmbed` on the draft block), on
/// the host in f64 sums, once per load:
/// ```text
/// s_j   = max if j = 0 (the anchor) else min;   t_j = 1000 · (s_j − min) / (max − min)
/// f_i   = exp(−ln(10000) · i / 64),  i < 64;    feat_j = [sin(t_j f_i) ; cos(t_j f_i)]  [128]
/// row_j = fc2 · silu(fc1 · feat_j + b1) + b2                                           [d]
/// ```
/// Only two rows differ (the anchor's and the masked slots'), so two are computed.
fn log_snr_rows(
    l: &mut Loader<'_>,
    file: &GgufFile,
    meta: &DrafterMeta,
    range: LogSnr,
) -> Result<Vec<f32>> {
    let d = meta.hp.n_embd as usize;
    let f = LOG_SNR_FEATURES;
    let mut get = |dflash: &'static str, shape: &[u64]| -> Result<Vec<f32>> {
        let name = drafter_tensor_name(meta.hp.arch, dflash);
        let t = file.tensor(name).ok_or_else(|| {
            Error::Usage(format!(
                "log-SNR conditioned drafter without tensor {name} (shape {shape:?})"
            ))
        })?;
        if t.shape != shape {
            return Err(Error::Usage(format!(
                "drafter tensor {name} has shape {:?}, expected {shape:?}",
                t.shape
            )));
        }
        l.host_f32(name)
    };
    let du = d as u64;
    let w1 = get("log_snr_fc1.weight", &[f as u64, du])?; // [d, 128]
    let b1 = get("log_snr_fc1.bias", &[du])?; // [d]
    let w2 = get("log_snr_fc2.weight", &[du, du])?; // [d, d]
    let b2 = get("log_snr_fc2.bias", &[du])?; // [d]
    let row = |s: f32| -> Vec<f32> {
        let t = (s - range.min) / (range.max - range.min) * 1000.0;
        let half = f / 2;
        let mut feat = vec![0f32; f]; // [128]
        for i in 0..half {
            let freq = (-(10000f32).ln() * i as f32 / half as f32).exp();
            feat[i] = (t * freq).sin();
            feat[half + i] = (t * freq).cos();
        }
        let dot = |w: &[f32], x: &[f32]| -> f64 {
            w.iter()
                .zip(x)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum()
        };
        let h: Vec<f32> = w1
            .chunks_exact(f)
            .zip(&b1)
            .map(|(w, &b)| {
                let z = dot(w, &feat) + f64::from(b);
                (z / (1.0 + (-z).exp())) as f32
            })
            .collect(); // [d]
        w2.chunks_exact(d)
            .zip(&b2)
            .map(|(w, &b)| (dot(w, &h) + f64::from(b)) as f32)
            .collect() // [d]
    };
    let (anchor, masked) = (row(range.max), row(range.min));
    let mut rows = Vec::with_capacity(meta.block_size as usize * d); // [γ, d]
    rows.extend_from_slice(&anchor);
    for _ in 1..meta.block_size {
        rows.extend_from_slice(&masked);
    }
    Ok(rows)
}

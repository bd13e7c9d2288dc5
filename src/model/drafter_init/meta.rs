//! The metadata of a random drafter: its backbone at the target's dimensions, the drafter keys
//! of its format (`dflash.*`, legacy `dspark.dspark.*`), log-SNR conditioning, and the
//! vocabulary (the target's `tokenizer.*` keys, or `tokenizer.ggml.model = none` and the size).

use crate::gguf::{Gguf, GgufWriter, MetaArray, MetaValue};
use crate::model::hparams::{Arch, Hparams};

use super::{mask_token_id, InitError, InitOptions};

pub(super) fn write_metadata(
    w: &mut GgufWriter,
    target: &Gguf,
    hp: &Hparams,
    opts: &InitOptions,
    arch: Arch,
    taps: &[u32],
) -> Result<(), InitError> {
    let p = arch.name();
    let key = |k: &str| format!("{p}.{k}");
    // Drafter-only keys: `dflash.<k>`, legacy `dspark.dspark.<k>`.
    let own = |k: &str| match arch {
        Arch::DsparkLegacy => format!("dspark.dspark.{k}"),
        _ => format!("dflash.{k}"),
    };
    w.set("general.architecture", MetaValue::String(p.into()));
    w.set(
        "general.name",
        MetaValue::String(format!("flint random DSpark drafter (seed {})", opts.seed)),
    );
    let u = MetaValue::U32;
    w.set(&key("block_count"), u(opts.layers));
    w.set(&key("context_length"), u(hp.n_ctx_train.min(4096)));
    w.set(&key("embedding_length"), u(hp.n_embd));
    w.set(&key("feed_forward_length"), u(super::drafter_ff(hp)));
    w.set(&key("attention.head_count"), u(hp.n_head));
    w.set(&key("attention.head_count_kv"), u(hp.n_head_kv));
    w.set(&key("attention.key_length"), u(hp.head_dim));
    w.set(&key("attention.value_length"), u(hp.head_dim_v));
    w.set(&key("rope.dimension_count"), u(hp.head_dim));
    w.set(&key("rope.freq_base"), MetaValue::F32(hp.rope_base));
    w.set(
        &key("attention.layer_norm_rms_epsilon"),
        MetaValue::F32(hp.rms_eps),
    );
    w.set(&key("vocab_size"), u(hp.n_vocab));
    let mask = mask_token_id(target, hp.n_vocab);
    w.set(&own("block_size"), u(opts.block));
    let stored = taps
        .iter()
        .map(|&t| {
            // Legacy taps are HF layer-output ids: one lower (tap 0, the embeddings, is −1).
            let t = i64::from(t) - i64::from(arch == Arch::DsparkLegacy);
            i32::try_from(t).map_err(|_| InitError::TooLarge {
                what: "tap",
                value: t.unsigned_abs(),
            })
        })
        .collect::<Result<Vec<i32>, _>>()?;
    w.set(
        &own("target_layers"),
        MetaValue::Array(MetaArray::I32(stored)),
    );
    match arch {
        Arch::DsparkLegacy => {
            w.set(&own("markov_rank"), u(opts.rank));
            w.set(&own("mask_token_id"), u(mask));
            w.set(&own("confidence_head"), MetaValue::Bool(opts.confidence));
            w.set(
                &own("confidence_head_with_markov"),
                MetaValue::Bool(opts.confidence && opts.rank > 0),
            );
        }
        _ => {
            w.set(&own("target_hidden_size"), u(hp.n_embd));
            w.set(&own("sample_from_anchor"), MetaValue::Bool(true));
            w.set(
                &own("has_confidence_head"),
                MetaValue::Bool(opts.confidence),
            );
            w.set("tokenizer.ggml.mask_token_id", u(mask));
        }
    }
    w.set(&own("log_snr_conditioning"), MetaValue::Bool(opts.log_snr));
    if opts.log_snr {
        w.set(&own("min_log_snr"), MetaValue::F32(-9.0));
        w.set(&own("max_log_snr"), MetaValue::F32(9.0));
    }
    if opts.no_vocab {
        w.set("tokenizer.ggml.model", MetaValue::String("none".into()));
    } else {
        for (k, v) in target.metadata.iter() {
            if k.starts_with("tokenizer.") && k != "tokenizer.ggml.mask_token_id" {
                w.set(k, v.clone());
            }
        }
    }
    Ok(())
}

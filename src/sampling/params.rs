//! `SamplerParams` (llama.cpp's `common_params_sampling` subset flint supports, with the same
//! defaults) and `SamplerError`, the typed validation failure naming the offending value.

/// Sampling settings. Defaults are llama.cpp's (`common/common.h`, `common_params_sampling`):
/// temp 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1.0 over the last 64 tokens,
/// presence and frequency penalties 0. The seed differs: llama.cpp's default means "random";
/// flint's default is the fixed seed 0, so runs are reproducible unless a caller picks a seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerParams {
    /// Temperature; `0` means greedy (argmax, ties to the lowest id). Must be finite and ≥ 0.
    pub temp: f32,
    /// Keep the `top_k` highest logits; `0` turns the filter off.
    pub top_k: u32,
    /// Nucleus: keep the smallest prefix (by probability) whose mass reaches `top_p`; in
    /// `(0, 1]`, `1` turns the filter off.
    pub top_p: f32,
    /// Keep tokens whose probability is at least `min_p` × the top probability; in `[0, 1]`,
    /// `0` turns the filter off.
    pub min_p: f32,
    /// Repetition penalty for tokens in the last `repeat_last_n`: positive logits are divided
    /// by it, the others multiplied. Must be finite and > 0; `1` turns it off.
    pub repeat_penalty: f32,
    /// How many of the most recently accepted tokens the penalties look at; `0` turns all
    /// three penalties off.
    pub repeat_last_n: usize,
    /// Subtracted once from the logit of every token present in the window (finite; may be
    /// negative, as in OpenAI's API).
    pub presence_penalty: f32,
    /// Subtracted `count` times from the logit of a token seen `count` times in the window.
    pub frequency_penalty: f32,
    /// Seed of the xoshiro256** generator ([`super::Xoshiro256StarStar`]).
    pub seed: u64,
}

impl Default for SamplerParams {
    fn default() -> Self {
        Self {
            temp: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 0,
        }
    }
}

impl SamplerParams {
    /// Greedy decoding (temp 0) with every filter and penalty off.
    pub fn greedy() -> Self {
        Self {
            temp: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..Self::default()
        }
    }

    /// Checks every value; the error names the first one out of range.
    pub fn validate(&self) -> Result<(), SamplerError> {
        let p = self;
        if !(p.temp.is_finite() && p.temp >= 0.0) {
            return Err(SamplerError::Temperature { temp: p.temp });
        }
        if !(p.top_p > 0.0 && p.top_p <= 1.0) {
            return Err(SamplerError::TopP { top_p: p.top_p });
        }
        if !(0.0..=1.0).contains(&p.min_p) {
            return Err(SamplerError::MinP { min_p: p.min_p });
        }
        if !(p.repeat_penalty.is_finite() && p.repeat_penalty > 0.0) {
            return Err(SamplerError::RepeatPenalty {
                repeat_penalty: p.repeat_penalty,
            });
        }
        if !p.presence_penalty.is_finite() {
            return Err(SamplerError::PresencePenalty {
                presence_penalty: p.presence_penalty,
            });
        }
        if !p.frequency_penalty.is_finite() {
            return Err(SamplerError::FrequencyPenalty {
                frequency_penalty: p.frequency_penalty,
            });
        }
        Ok(())
    }

    /// Whether any of the three penalties changes a logit.
    pub(crate) fn penalties_active(&self) -> bool {
        self.repeat_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.presence_penalty != 0.0
                || self.frequency_penalty != 0.0)
    }
}

/// Why a sampler could not be built. Every variant carries the offending value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplerError {
    #[error("temp = {temp} is invalid: it must be finite and >= 0 (0 = greedy)")]
    Temperature { temp: f32 },
    #[error("top_p = {top_p} is invalid: it must be in (0, 1] (1 = off)")]
    TopP { top_p: f32 },
    #[error("min_p = {min_p} is invalid: it must be in [0, 1] (0 = off)")]
    MinP { min_p: f32 },
    #[error("repeat_penalty = {repeat_penalty} is invalid: it must be finite and > 0 (1 = off)")]
    RepeatPenalty { repeat_penalty: f32 },
    #[error("presence_penalty = {presence_penalty} is invalid: it must be finite")]
    PresencePenalty { presence_penalty: f32 },
    #[error("frequency_penalty = {frequency_penalty} is invalid: it must be finite")]
    FrequencyPenalty { frequency_penalty: f32 },
    #[error("n_vocab = 0: a sampler needs at least one token")]
    EmptyVocab,
}

//! Parsing and bounds of `/v1/chat/completions`, `/v1/completions` and llama-server's
//! `/completion` request bodies. Fields are read one by one from the JSON value so every refusal
//! names its field and value. Every field is first held to the table of
//! [`super::fields`]: features flint does not have (`n` > 1, other samplers) are
//! refused by name rather than silently dropped; unknown fields are ignored and named (the
//! `X-Flint-Ignored` header, a warning line), or refused under `--strict-fields`.

use serde_json::{Map, Value};

use super::error::ApiError;
pub use super::messages::messages;
use super::prompt::completion_prompt;
use super::structured::{self, Structured};
use super::{bias, fields};
use crate::engine::logprobs::MAX_TOP;
use crate::sampling::SamplerParams;
use crate::tokenizer::ChatMessage;

/// Stop strings at most, and bytes per stop string.
pub const MAX_STOPS: usize = 16;
pub const MAX_STOP_BYTES: usize = 256;

/// Which endpoint a body came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
    /// llama-server's `/completion`.
    LlamaCompletion,
}

/// What to complete.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Chat(Vec<ChatMessage>),
    Text(String),
    Tokens(Vec<u32>),
}

/// A validated request.
#[derive(Debug, Clone)]
pub struct GenRequest {
    pub endpoint: Endpoint,
    pub prompt: Prompt,
    /// `n_predict` / `max_tokens` / `max_completion_tokens` (`None`: until the context is full).
    pub max_tokens: Option<u32>,
    /// `ignore_eos`: end-of-generation tokens are banned (llama-server gives them a -inf bias).
    pub ignore_eos: bool,
    /// `logit_bias`: `(token id, bias)`, added to the logits before sampling or the argmax.
    pub logit_bias: Vec<(u32, f32)>,
    /// `None`: greedy (temperature 0 and no penalties).
    pub sampling: Option<SamplerParams>,
    pub stop: Vec<String>,
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `parse_special` (completions only, default false): special-token text in `prompt`
    /// (`<|im_end|>`) becomes control tokens. Chat message contents are always plain text.
    pub parse_special: bool,
    /// `response_format`, `json_schema`, `grammar`, tools and template variables.
    pub structured: Structured,
    /// vLLM's `stop_token_ids`: generating one of these ends the answer (it is not written).
    pub stop_ids: Vec<u32>,
    /// Fields the body held that flint does not know (or that belong to another endpoint),
    /// ignored: the response names them in `X-Flint-Ignored`.
    pub ignored: Vec<String>,
    /// Log-probabilities asked for (`logprobs`, `top_logprobs`, `n_probs`, `echo`).
    pub logprobs: LogprobAsk,
}

/// What a request asks of log-probabilities and echo.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogprobAsk {
    /// `Some(n)`: every token's log-probability with its `n` best alternatives.
    pub top: Option<u32>,
    /// `echo` (`/v1/completions`): the prompt comes back before the completion, and with
    /// `logprobs` its tokens' log-probabilities too.
    pub echo: bool,
    /// llama-server's `post_sampling_probs`: probabilities (`prob`, `top_probs`) rather than
    /// log-probabilities.
    pub post_sampling: bool,
}

/// `stop_token_ids` at most.
pub const MAX_STOP_IDS: usize = 64;

/// What the server allows.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Context rows of one slot.
    pub n_ctx: u32,
    /// The served models' names. With one model (flint serves one) any `model` is accepted,
    /// as llama-server does; with several, `model` must be one of them.
    pub model_names: Vec<String>,
    /// Sampling defaults (the command line's).
    pub defaults: SamplerParams,
    /// The seed of requests without one (`serve -s`); `None`: each takes the clock.
    pub seed: Option<u64>,
    pub n_vocab: u32,
    /// `--strict-fields`: refuse unknown fields instead of ignoring them.
    pub strict_fields: bool,
    /// Chat defaults a request can override.
    pub chat: ChatDefaults,
    /// The constraint of requests that ask for none and make no tool calls (`serve
    /// --grammar-file`, `-j`, `--regex`).
    pub default_grammar: Option<crate::grammar::GrammarSpec>,
}

/// Serve-wide defaults of chat requests (`--reasoning-format`, `--chat-template-kwargs`,
/// `--reasoning-budget 0`); a request's `reasoning_format` and `chat_template_kwargs` (key by
/// key) override them.
#[derive(Debug, Clone, Default)]
pub struct ChatDefaults {
    /// `reasoning_format` `none`: reasoning is left in `content`.
    pub reasoning_none: bool,
    pub template_kwargs: Map<String, Value>,
}

type Obj = Map<String, Value>;

/// A number field within `lo..=hi` (`None` when absent or null).
fn number(o: &Obj, key: &str, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let x = v
                .as_f64()
                .ok_or_else(|| ApiError::invalid(key, format!("`{key}` must be a number")))?;
            if !x.is_finite() || x < lo || x > hi {
                return Err(ApiError::invalid(
                    key,
                    format!("`{key}` is {x}: it must be in [{lo}, {hi}]"),
                ));
            }
            Ok(Some(x))
        }
    }
}

/// An integer field within `lo..=hi`.
fn integer(o: &Obj, key: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let x = v
                .as_i64()
                .ok_or_else(|| ApiError::invalid(key, format!("`{key}` must be an integer")))?;
            if x < lo || x > hi {
                return Err(ApiError::invalid(
                    key,
                    format!("`{key}` is {x}: it must be in [{lo}, {hi}]"),
                ));
            }
            Ok(Some(x))
        }
    }
}

fn boolean(o: &Obj, key: &str) -> Result<bool, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid(key, format!("`{key}` must be a boolean"))),
    }
}

/// Parse and bound a request body.
pub fn parse(endpoint: Endpoint, body: &Value, limits: &Limits) -> Result<GenRequest, ApiError> {
    let o = body
        .as_object()
        .ok_or_else(|| ApiError::bad_body("the request body must be a JSON object"))?;
    match o.get("model") {
        None | Some(Value::Null) => {}
        Some(Value::String(m))
            if limits.model_names.len() <= 1 || limits.model_names.iter().any(|n| n == m) => {}
        Some(Value::String(m)) => {
            return Err(ApiError::invalid(
                "model",
                format!(
                    "model {m:?} is not served here (this server has {:?})",
                    limits.model_names.first().map(String::as_str).unwrap_or("")
                ),
            ))
        }
        Some(_) => return Err(ApiError::invalid("model", "`model` must be a string")),
    }
    let ignored = fields::check(endpoint, o, limits.strict_fields)?;
    if !ignored.is_empty() {
        tracing::warn!(
            target: super::reqlog::TARGET,
            "ignored field(s) this server does not know: {}",
            fields::ignored_header(&ignored)
        );
    }
    let mut structured = structured::parse(endpoint, o)?;
    if endpoint == Endpoint::Chat {
        structured.reasoning_none = match o.get("reasoning_format") {
            None | Some(Value::Null) => limits.chat.reasoning_none,
            Some(v) => v
                .as_str()
                .and_then(structured::reasoning_none)
                .ok_or_else(|| {
                    ApiError::invalid(
                        "reasoning_format",
                        format!(
                            "`reasoning_format` is {v}: it must be \"none\", \"auto\", \
                             \"deepseek\" or \"deepseek-legacy\""
                        ),
                    )
                })?,
        };
        for (k, v) in &limits.chat.template_kwargs {
            structured
                .template_kwargs
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
    }
    default_grammar(&mut structured, limits);
    if let Some(n) = integer(o, "n", i64::MIN, i64::MAX)? {
        if n != 1 {
            return Err(ApiError::invalid(
                "n",
                format!("`n` is {n}: only 1 is supported"),
            ));
        }
    }
    let logprobs = logprobs(endpoint, o)?;
    let prompt = match endpoint {
        Endpoint::Chat => Prompt::Chat(messages(o)?),
        Endpoint::Completion | Endpoint::LlamaCompletion => completion_prompt(o, limits.n_vocab)?,
    };
    // llama-server reads `n_predict` first, then `max_tokens`; -1 means until the context ends.
    let max_tokens = match integer(o, "n_predict", i64::MIN, i64::MAX)? {
        Some(-1) => None,
        Some(0) => {
            return Err(ApiError::invalid(
                "n_predict",
                "`n_predict` is 0: evaluating a prompt without generating is not supported \
                 (use -1 for no limit, or at least 1)",
            ))
        }
        Some(v) => Some(("n_predict", v)),
        None => match integer(o, "max_completion_tokens", i64::MIN, i64::MAX)? {
            Some(v) => Some(("max_completion_tokens", v)),
            None => integer(o, "max_tokens", i64::MIN, i64::MAX)?.map(|v| ("max_tokens", v)),
        },
    };
    // `echo` with `max_tokens: 0` scores the prompt alone (lm-eval's loglikelihood requests).
    let lo = i64::from(!(logprobs.echo && endpoint == Endpoint::Completion));
    let max_tokens = match max_tokens {
        Some((key, v)) if v < lo || v > i64::from(limits.n_ctx) => {
            return Err(ApiError::invalid(
                key,
                format!(
                    "`{key}` is {v}: it must be in [{lo}, {}] (the context of a slot{})",
                    limits.n_ctx,
                    if lo == 1 { "; 0 only with `echo`" } else { "" }
                ),
            ))
        }
        Some((_, v)) => Some(v as u32),
        None => None,
    };
    let stream = boolean(o, "stream")?;
    // llama-server's `/completion` parses special-token text; OpenAI's routes do not unless asked.
    let parse_special = match endpoint {
        Endpoint::Completion => boolean(o, "parse_special")?,
        Endpoint::LlamaCompletion => match o.get("parse_special") {
            None | Some(Value::Null) => true,
            Some(_) => boolean(o, "parse_special")?,
        },
        Endpoint::Chat => false,
    };
    let include_usage = match o.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(so)) => boolean(so, "include_usage")?,
        Some(_) => {
            return Err(ApiError::invalid(
                "stream_options",
                "`stream_options` must be an object",
            ))
        }
    };
    Ok(GenRequest {
        endpoint,
        prompt,
        max_tokens,
        ignore_eos: boolean(o, "ignore_eos")?,
        logit_bias: bias::parse(o.get("logit_bias"), limits.n_vocab)?,
        sampling: sampling(o, limits)?,
        stop: stops(o)?,
        stream,
        include_usage,
        parse_special,
        structured,
        stop_ids: stop_ids(o, limits.n_vocab)?,
        ignored,
        logprobs,
    })
}

/// vLLM's `stop_token_ids`: token ids of the vocabulary.
fn stop_ids(o: &Obj, n_vocab: u32) -> Result<Vec<u32>, ApiError> {
    let key = "stop_token_ids";
    let list = match o.get(key) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) if a.len() <= MAX_STOP_IDS => a,
        Some(Value::Array(a)) => {
            return Err(ApiError::invalid(
                key,
                format!("{} stop token ids: at most {MAX_STOP_IDS}", a.len()),
            ))
        }
        Some(_) => return Err(ApiError::invalid(key, "`stop_token_ids` must be an array")),
    };
    list.iter()
        .map(|v| {
            v.as_u64()
                .filter(|&t| t < u64::from(n_vocab))
                .map(|t| t as u32)
                .ok_or_else(|| {
                    ApiError::invalid(
                        key,
                        format!("`stop_token_ids` holds {v}: ids are integers in [0, {n_vocab})"),
                    )
                })
        })
        .collect()
}

/// The serve-wide constraint, for a request that asks for none and may make no call.
fn default_grammar(s: &mut Structured, limits: &Limits) {
    use crate::grammar::GrammarSpec;
    let Some(spec) = &limits.default_grammar else {
        return;
    };
    let calls = s
        .tools
        .as_ref()
        .is_some_and(|t| t.choice != super::tools::Choice::None);
    if calls || s.json.is_some() || s.lark.is_some() || s.regex.is_some() {
        return;
    }
    match spec {
        GrammarSpec::JsonSchema(v) => s.json = Some(v.clone()),
        GrammarSpec::Lark(l) => s.lark = Some(l.clone()),
        GrammarSpec::Regex(r) => s.regex = Some(r.clone()),
    }
    s.field = "grammar";
}

/// The log-probabilities a request asks for: chat's `logprobs` (boolean) and `top_logprobs`,
/// completions' `logprobs` (an integer: the alternatives) and `echo`, llama-server's `n_probs`
/// and `post_sampling_probs`. At most [`MAX_TOP`] alternatives.
fn logprobs(endpoint: Endpoint, o: &Obj) -> Result<LogprobAsk, ApiError> {
    let max = i64::from(MAX_TOP);
    let mut ask = LogprobAsk::default();
    match endpoint {
        Endpoint::Chat => {
            let on = boolean(o, "logprobs")?;
            let top = integer(o, "top_logprobs", 0, max)?;
            if top.is_some() && !on {
                return Err(ApiError::invalid(
                    "top_logprobs",
                    "`top_logprobs` needs `logprobs: true`",
                ));
            }
            ask.top = on.then_some(top.unwrap_or(0) as u32);
        }
        Endpoint::Completion => {
            if matches!(o.get("logprobs"), Some(Value::Bool(_))) {
                return Err(ApiError::invalid(
                    "logprobs",
                    format!("`logprobs` is an integer in [0, {max}] on /v1/completions"),
                ));
            }
            ask.top = integer(o, "logprobs", 0, max)?.map(|n| n as u32);
            ask.echo = boolean(o, "echo")?;
        }
        Endpoint::LlamaCompletion => {
            ask.top = integer(o, "n_probs", 0, max)?
                .filter(|&n| n > 0)
                .map(|n| n as u32);
            ask.post_sampling = boolean(o, "post_sampling_probs")?;
        }
    }
    Ok(ask)
}

/// The sampler of a request, over the server's defaults; `None` when greedy.
fn sampling(o: &Obj, limits: &Limits) -> Result<Option<SamplerParams>, ApiError> {
    let d = limits.defaults;
    let f = |key, lo, hi, default: f32| -> Result<f32, ApiError> {
        Ok(number(o, key, lo, hi)?.map_or(default, |x| x as f32))
    };
    let mut p = SamplerParams {
        temp: f("temperature", 0.0, 2.0, d.temp)?,
        top_p: d.top_p,
        min_p: f("min_p", 0.0, 1.0, d.min_p)?,
        // vLLM's `repetition_penalty` is the same multiplicative penalty.
        repeat_penalty: f(
            "repeat_penalty",
            0.0,
            10.0,
            f("repetition_penalty", 0.0, 10.0, d.repeat_penalty)?,
        )?,
        presence_penalty: f("presence_penalty", -2.0, 2.0, d.presence_penalty)?,
        frequency_penalty: f("frequency_penalty", -2.0, 2.0, d.frequency_penalty)?,
        top_k: integer(o, "top_k", 0, i64::from(limits.n_vocab))?.map_or(d.top_k, |k| k as u32),
        // -1: the whole context (llama-server's spelling).
        repeat_last_n: match integer(o, "repeat_last_n", -1, i64::from(limits.n_ctx))? {
            Some(-1) => limits.n_ctx as usize,
            Some(n) => n as usize,
            None => d.repeat_last_n,
        },
        ..d
    };
    if let Some(x) = number(o, "top_p", 0.0, 1.0)? {
        if x <= 0.0 {
            return Err(ApiError::invalid(
                "top_p",
                format!("`top_p` is {x}: it must be in (0, 1]"),
            ));
        }
        p.top_p = x as f32;
    }
    p.seed = match o.get("seed") {
        None | Some(Value::Null) => limits.seed.unwrap_or_else(clock_seed),
        // llama-server's -1 (and its u32 spelling): a random seed.
        Some(v) if v.as_i64() == Some(-1) || v.as_u64() == Some(u64::from(u32::MAX)) => {
            clock_seed()
        }
        Some(v) => match (v.as_u64(), v.as_i64()) {
            (Some(s), _) => s,
            (None, Some(s)) => s as u64,
            _ => return Err(ApiError::invalid("seed", "`seed` must be an integer")),
        },
    };
    let penalties =
        p.repeat_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
    if p.temp == 0.0 && !penalties {
        return Ok(None);
    }
    p.validate()
        .map_err(|e| ApiError::invalid("temperature", format!("sampling parameters: {e}")))?;
    Ok(Some(p))
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn stops(o: &Obj) -> Result<Vec<String>, ApiError> {
    let list: Vec<&Value> = match o.get("stop") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(s @ Value::String(_)) => vec![s],
        Some(Value::Array(a)) => a.iter().collect(),
        Some(_) => {
            return Err(ApiError::invalid(
                "stop",
                "`stop` must be a string or an array of strings",
            ))
        }
    };
    if list.len() > MAX_STOPS {
        return Err(ApiError::invalid(
            "stop",
            format!("{} stop strings: at most {MAX_STOPS}", list.len()),
        ));
    }
    list.into_iter()
        .map(|v| match v.as_str() {
            Some(s) if s.len() > MAX_STOP_BYTES => Err(ApiError::invalid(
                "stop",
                format!(
                    "a stop string of {} bytes: at most {MAX_STOP_BYTES}",
                    s.len()
                ),
            )),
            Some(s) => Ok(s.to_string()),
            None => Err(ApiError::invalid("stop", "`stop` must hold strings")),
        })
        .collect()
}

/// Reject JSON nested deeper than `max` before parsing it (serde's own limit is 128).
pub fn check_depth(bytes: &[u8], max: usize) -> Result<(), ApiError> {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return Err(ApiError::bad_body(format!(
                        "JSON nested deeper than {max} levels"
                    )));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

//! Every request field of OpenAI's chat and completions APIs, of llama-server's `/completion` and
//! the sampling fields vLLM adds, each marked honoured, accepted as metadata (harmless: it asks
//! for nothing flint would have to do), or refused with the reason. A field in no row (or one
//! defined for another endpoint) is ignored, as llama-server and vLLM do, but said: one warning
//! log line per request and an `X-Flint-Ignored: a, b` response header name them, so a typo
//! (`temprature`) shows. `serve --strict-fields` refuses them instead (400 naming the field).
//! A refused field given its "off" value (`mirostat: 0`, `typical_p: 1`, `best_of: 1`, …) asks
//! for nothing and is accepted, so front-ends that send every setting work.
//!
//! Sources: <https://platform.openai.com/docs/api-reference/chat/create>,
//! <https://platform.openai.com/docs/api-reference/completions/create>, llama.cpp's
//! `tools/server/README.md` (<https://github.com/ggml-org/llama.cpp/tree/master/tools/server>),
//! and vLLM's extra parameters of its OpenAI-compatible server
//! (<https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html>).

use serde_json::{Map, Value};

use super::error::ApiError;
use super::request::Endpoint;

/// Where a field is defined: bits of [`Endpoint`]s.
pub const CHAT: u8 = 1;
/// OpenAI's `/v1/completions`.
pub const CMPL: u8 = 2;
/// llama-server's `/completion`.
pub const LLAMA: u8 = 4;
pub const ALL: u8 = CHAT | CMPL | LLAMA;

/// A refused field's values that ask for nothing (null always does).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Off {
    /// Only null.
    Null,
    /// This number.
    Num(f64),
    /// `false`.
    False,
    /// `true` (a field whose default is on).
    True,
    /// An empty string, array or object, or `false`.
    Empty,
    /// One of these strings.
    Strs(&'static [&'static str]),
    /// `{"type": "text"}` (OpenAI's `response_format` default).
    TextFormat,
    /// An array of `"text"` only (OpenAI's `modalities` default).
    TextOnly,
}

impl Off {
    /// Whether `v` asks for nothing.
    pub fn holds(self, v: &Value) -> bool {
        if v.is_null() {
            return true;
        }
        match self {
            Off::Null => false,
            Off::Num(x) => v.as_f64() == Some(x),
            Off::False => v == &Value::Bool(false),
            Off::True => v == &Value::Bool(true),
            Off::Empty => match v {
                Value::Bool(b) => !b,
                Value::String(s) => s.is_empty(),
                Value::Array(a) => a.is_empty(),
                Value::Object(o) => o.is_empty(),
                _ => false,
            },
            Off::Strs(list) => v.as_str().is_some_and(|s| list.contains(&s)),
            Off::TextOnly => v.as_array().is_some_and(|a| a.iter().all(|m| m == "text")),
            Off::TextFormat => v
                .as_object()
                .is_some_and(|o| o.len() == 1 && o.get("type") == Some(&Value::from("text"))),
        }
    }
}

/// What flint does with a field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Read and applied (the parser bounds it; some take only their supported values).
    Honoured,
    /// Accepted and not used: it changes nothing flint does.
    Metadata,
    /// Refused with 400 unless it holds its `off` value; `ask` is a value that asks for the
    /// feature (JSON text: the tests send it, the docs show it).
    Refused {
        reason: &'static str,
        off: Off,
        ask: &'static str,
    },
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Field {
    pub name: &'static str,
    /// The endpoints that define it ([`CHAT`], [`CMPL`], [`LLAMA`]).
    pub at: u8,
    pub kind: Kind,
}

const fn f(name: &'static str, at: u8, kind: Kind) -> Field {
    Field { name, at, kind }
}

const fn no(reason: &'static str, off: Off, ask: &'static str) -> Kind {
    Kind::Refused { reason, off, ask }
}

use Kind::{Honoured as H, Metadata as M};

const FUNCTIONS: &str = "the deprecated `functions` / `function_call`: use `tools` / `tool_choice`";
const SAMPLER: &str = "this sampler is not in flint's chain \
                       (penalties, top-k, top-p, min-p, temperature)";

/// Every known field.
pub const FIELDS: &[Field] = &[
    // What to complete.
    f("model", ALL, H),
    f("messages", CHAT, H),
    f("prompt", CMPL | LLAMA, H),
    f("parse_special", CMPL | LLAMA, H),
    // How long.
    f("max_tokens", ALL, H),
    f("max_completion_tokens", CHAT | CMPL, H),
    f("n_predict", ALL, H),
    f("ignore_eos", ALL, H),
    f("stop", ALL, H),
    // Sampling.
    f("temperature", ALL, H),
    f("top_p", ALL, H),
    f("top_k", ALL, H),
    f("min_p", ALL, H),
    f("presence_penalty", ALL, H),
    f("frequency_penalty", ALL, H),
    f("repeat_penalty", ALL, H),
    f("repeat_last_n", ALL, H),
    f("seed", ALL, H),
    f("logit_bias", ALL, H),
    // Delivery.
    f("stream", ALL, H),
    f("stream_options", CHAT | CMPL, H),
    f("n", CHAT | CMPL, H),
    f("logprobs", CHAT | CMPL, H),
    f("top_logprobs", CHAT, H),
    // Harmless.
    f("user", ALL, M),
    f("metadata", CHAT, M),
    f("store", CHAT, M),
    f("service_tier", CHAT, M),
    f("safety_identifier", CHAT, M),
    f("prompt_cache_key", CHAT, M),
    f("cache_prompt", ALL, M),
    f("mirostat_tau", ALL, M),
    f("mirostat_eta", ALL, M),
    f("dynatemp_exponent", ALL, M),
    f("xtc_threshold", ALL, M),
    f("dry_base", ALL, M),
    f("dry_allowed_length", ALL, M),
    f("dry_penalty_last_n", ALL, M),
    f("dry_sequence_breakers", ALL, M),
    // Structured output and tools (src/server/structured.rs, src/server/tools/).
    f("parallel_tool_calls", CHAT, H),
    f("tools", CHAT, H),
    f("tool_choice", CHAT, H),
    f("response_format", ALL, H),
    f("grammar", ALL, H),
    f("json_schema", ALL, H),
    f("chat_template_kwargs", CHAT, H),
    f("max_reasoning_chars", CHAT, H),
    f(
        "functions",
        CHAT,
        no(FUNCTIONS, Off::Empty, r#"[{"name":"f"}]"#),
    ),
    f(
        "function_call",
        CHAT,
        no(FUNCTIONS, Off::Strs(&["none", "auto"]), r#"{"name":"f"}"#),
    ),
    // Tool calls are always read out of the text.
    f("parse_tool_calls", CHAT, M),
    // vLLM's extra fields (its OpenAI-compatible server), where flint has the behaviour.
    f("repetition_penalty", ALL, H),
    f("stop_token_ids", ALL, H),
    f("guided_json", ALL, H),
    f("guided_regex", ALL, H),
    f("guided_grammar", ALL, H),
    f("guided_choice", ALL, H),
    f("guided_decoding_backend", ALL, M),
    f("spaces_between_special_tokens", ALL, M),
    f(
        "skip_special_tokens",
        ALL,
        no(
            "control tokens are never written into the text",
            Off::True,
            "false",
        ),
    ),
    f(
        "min_tokens",
        ALL,
        no(
            "end tokens cannot be banned for the first tokens only (ignore_eos bans them all)",
            Off::Num(0.0),
            "5",
        ),
    ),
    f(
        "include_stop_str_in_output",
        ALL,
        no(
            "a matched stop string is never part of the text",
            Off::False,
            "true",
        ),
    ),
    f(
        "use_beam_search",
        ALL,
        no("beam search is not supported", Off::False, "true"),
    ),
    // Samplers flint does not have.
    f("typical_p", ALL, no(SAMPLER, Off::Num(1.0), "0.5")),
    f("tfs_z", ALL, no(SAMPLER, Off::Num(1.0), "0.5")),
    f("mirostat", ALL, no(SAMPLER, Off::Num(0.0), "2")),
    f("dynatemp_range", ALL, no(SAMPLER, Off::Num(0.0), "0.5")),
    f("top_n_sigma", ALL, no(SAMPLER, Off::Num(-1.0), "1.5")),
    f("xtc_probability", ALL, no(SAMPLER, Off::Num(0.0), "0.5")),
    f("dry_multiplier", ALL, no(SAMPLER, Off::Num(0.0), "0.8")),
    f("penalize_nl", ALL, no(SAMPLER, Off::False, "true")),
    f(
        "min_keep",
        ALL,
        no(
            "flint's filters keep at least one token; a floor is not supported",
            Off::Num(0.0),
            "5",
        ),
    ),
    f(
        "samplers",
        ALL,
        no(
            "the sampler order is fixed (penalties, top-k, top-p, min-p, temperature)",
            Off::Null,
            r#"["top_k","temperature"]"#,
        ),
    ),
    // Probabilities and extra output.
    f("n_probs", LLAMA, H),
    f("post_sampling_probs", LLAMA, H),
    f(
        "return_tokens",
        LLAMA,
        no(
            "token ids are not returned; use /tokenize on the text",
            Off::False,
            "true",
        ),
    ),
    f(
        "timings_per_token",
        ALL,
        no("timings come with the last event only", Off::False, "true"),
    ),
    f(
        "return_progress",
        ALL,
        no("prompt progress events are not sent", Off::False, "true"),
    ),
    f(
        "response_fields",
        LLAMA,
        no(
            "the response's fields cannot be chosen",
            Off::Empty,
            r#"["content"]"#,
        ),
    ),
    f("echo", CMPL, H),
    f(
        "best_of",
        CMPL,
        no("one completion per request", Off::Num(1.0), "3"),
    ),
    // Context and slots.
    f(
        "n_keep",
        ALL,
        no(
            "flint never shifts the context: a request ends when its slot's context is full",
            Off::Num(0.0),
            "-1",
        ),
    ),
    f(
        "id_slot",
        ALL,
        no("slots are assigned by the queue", Off::Num(-1.0), "0"),
    ),
    f(
        "n_indent",
        ALL,
        no("indentation limits are not supported", Off::Num(0.0), "4"),
    ),
    f(
        "t_max_predict_ms",
        ALL,
        no(
            "time limits on generation are not supported: use n_predict",
            Off::Num(0.0),
            "1000",
        ),
    ),
    f(
        "suffix",
        CMPL | LLAMA,
        no(
            "fill-in-the-middle takes /infill (input_prefix, input_suffix)",
            Off::Empty,
            r#""}""#,
        ),
    ),
    f(
        "lora",
        ALL,
        no(
            "LoRA adapters are not supported",
            Off::Empty,
            r#"[{"id":0,"scale":1.0}]"#,
        ),
    ),
    // Chat templates and reasoning.
    f("reasoning_format", CHAT, H),
    f(
        "thinking_forced_open",
        CHAT,
        no(
            "the template decides whether `<think>` is open (see `chat_template_kwargs`)",
            Off::False,
            "true",
        ),
    ),
    f(
        "reasoning_effort",
        CHAT,
        no(
            "reasoning effort cannot be set on a local model",
            Off::Null,
            r#""low""#,
        ),
    ),
    f(
        "verbosity",
        CHAT,
        no(
            "verbosity cannot be set on a local model",
            Off::Null,
            r#""low""#,
        ),
    ),
    // Other modalities and hosted tools.
    f(
        "audio",
        CHAT,
        no(
            "audio output is not supported",
            Off::Null,
            r#"{"voice":"alloy","format":"wav"}"#,
        ),
    ),
    f(
        "modalities",
        CHAT,
        no(
            "only text output is supported",
            Off::TextOnly,
            r#"["text","audio"]"#,
        ),
    ),
    f(
        "prediction",
        CHAT,
        no(
            "predicted outputs are not supported",
            Off::Null,
            r#"{"type":"content","content":"x"}"#,
        ),
    ),
    f(
        "web_search_options",
        CHAT,
        no("web search is not supported", Off::Null, "{}"),
    ),
];

/// The endpoint's bit.
pub fn bit(endpoint: Endpoint) -> u8 {
    match endpoint {
        Endpoint::Chat => CHAT,
        Endpoint::Completion => CMPL,
        Endpoint::LlamaCompletion => LLAMA,
    }
}

/// The row of `name`, if any.
pub fn find(name: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.name == name)
}

/// Holds the fields of `o` to the table: refuses the first that is refused and not off; a field
/// that is unknown or not defined for `endpoint` is refused too when `strict`, and otherwise
/// returned among the ignored (in the body's order). The 400 names the field in `param`.
pub fn check(
    endpoint: Endpoint,
    o: &Map<String, Value>,
    strict: bool,
) -> Result<Vec<String>, ApiError> {
    let here = bit(endpoint);
    let mut ignored = Vec::new();
    for (name, v) in o {
        let Some(field) = find(name).filter(|f| f.at & here != 0) else {
            if !strict {
                ignored.push(name.clone());
                continue;
            }
            let why = if find(name).is_some() {
                format!("`{name}` is not a field of this endpoint")
            } else {
                format!(
                    "unknown field `{name}`: this server refuses fields it does not know \
                     (--strict-fields) rather than ignore them (docs/SERVER.md lists every field)"
                )
            };
            return Err(ApiError::invalid(name, why));
        };
        if let Kind::Refused { reason, off, .. } = field.kind {
            if !off.holds(v) {
                return Err(ApiError::invalid(
                    name,
                    format!("`{name}` is not supported: {reason}"),
                ));
            }
        }
    }
    Ok(ignored)
}

/// The `X-Flint-Ignored` header's value: the ignored fields, comma-separated (at most 1 KiB of
/// names, then `…`; a name of other than ASCII graphic characters is written `?`).
pub fn ignored_header(ignored: &[String]) -> String {
    let mut out = String::new();
    for name in ignored {
        let clean: String = name
            .chars()
            .map(|c| if c.is_ascii_graphic() { c } else { '?' })
            .collect();
        if out.len() + clean.len() > 1024 {
            out.push_str(", …");
            break;
        }
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&clean);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_unique_and_every_ask_is_json_that_is_not_off() {
        for (i, a) in FIELDS.iter().enumerate() {
            assert!(
                FIELDS[i + 1..].iter().all(|b| b.name != a.name),
                "{} twice",
                a.name
            );
            if let Kind::Refused { off, ask, .. } = a.kind {
                let v: Value = serde_json::from_str(ask).unwrap();
                assert!(!off.holds(&v), "{}: {ask} is off", a.name);
            }
        }
    }

    #[test]
    fn off_values_pass_and_others_are_named() {
        let ok = json!({"mirostat": 0, "typical_p": 1.0, "tools": [],
                        "response_format": {"type": "text"}, "modalities": ["text"],
                        "user": "u", "cache_prompt": true, "skip_special_tokens": true});
        for strict in [false, true] {
            let ignored = check(Endpoint::Chat, ok.as_object().unwrap(), strict).unwrap();
            assert!(ignored.is_empty(), "{ignored:?}");
        }
        for (k, v, strict) in [
            ("mirostat", json!(2), false),
            ("min_tokens", json!(3), false),
            ("skip_special_tokens", json!(false), false),
            ("temprature", json!(0.5), true),
            ("echo", json!(true), true),
        ] {
            let o = json!({ k: v });
            let e = check(Endpoint::Chat, o.as_object().unwrap(), strict).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(k), "{e:?}");
        }
    }

    #[test]
    fn unknown_fields_are_ignored_and_named_unless_strict() {
        let o = json!({"temprature": 0.5, "messages": [], "echo": true, "top_a": 0.1});
        let ignored = check(Endpoint::Chat, o.as_object().unwrap(), false).unwrap();
        // In the body's order (serde_json's `preserve_order`).
        assert_eq!(ignored, ["temprature", "echo", "top_a"]);
        assert_eq!(ignored_header(&ignored), "temprature, echo, top_a");
        let long: Vec<String> = (0..200).map(|i| format!("field_{i}\n")).collect();
        let h = ignored_header(&long);
        assert!(
            h.len() < 1100 && h.ends_with(", …") && !h.contains('\n'),
            "{h}"
        );
    }
}

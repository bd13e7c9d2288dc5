//! Routes and the gate in front of them: API keys (Bearer or `X-Api-Key`, compared in
//! constant time; `/health`, `/v1/models` and the chat page's files are public), 503 until the
//! model is loaded, the body limit, UTF-8 and nesting checks, then the generation handlers.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::error::ApiError;
use super::llama_routes;
use super::metrics::Metrics;
use super::request::{self, check_depth, Endpoint, GenRequest, Prompt};
use super::response::{self, Meta};
use super::slots::{Event, Job, Refused};
use super::state::{App, Ready};

/// Request bodies above this are refused with 413.
pub const MAX_BODY: usize = 1 << 20;
/// JSON nesting above this is refused with 400.
pub const MAX_DEPTH: usize = 64;

/// Routes that need no key.
const PUBLIC: &[&str] = &["/health", "/v1/health", "/v1/models", "/models"];

/// The routes behind the gate, and CORS in front of it (a browser's preflight carries no key)
/// when `cors_origins` names any origin; with `webui`, the chat page at `/`.
pub fn router(app: Arc<App>, cors_origins: &[String], webui: bool) -> crate::Result<Router> {
    let mut router = Router::new();
    if webui {
        router = super::webui::routes(router);
    }
    let router = router
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/slots", get(slots))
        .route("/metrics", get(metrics))
        .route("/v1/chat/completions", post(chat))
        .route("/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/completions", post(completions))
        .route("/completion", post(llama_routes::completion))
        .route("/infill", post(llama_routes::infill))
        .route("/tokenize", post(llama_routes::tokenize))
        .route("/detokenize", post(llama_routes::detokenize))
        .route("/apply-template", post(llama_routes::apply_template))
        .route("/props", get(llama_routes::props))
        .route("/v1/embeddings", post(super::embeddings::embeddings))
        .route("/embeddings", post(super::embeddings::embeddings))
        .route("/v1/messages", post(super::anthropic::messages_route))
        .route(
            "/v1/messages/count_tokens",
            post(super::anthropic::count_tokens_route),
        )
        .fallback(|req: Request| async move { ApiError::not_found(req.uri().path()) })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(middleware::from_fn_with_state(Arc::clone(&app), gate))
        .layer(middleware::from_fn(super::reqlog::layer))
        .with_state(app);
    Ok(match super::cors::layer(cors_origins)? {
        Some(cors) => router.layer(cors),
        None => router,
    })
}

/// The `Host` and body type a keyless server takes, keys, then readiness.
async fn gate(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if let Err(e) = app.access.check(req.method(), req.headers()) {
        return e.into_response();
    }
    let path = req.uri().path();
    // The page's files need no key and no model (without `--no-webui`; with it they are 404s).
    let page = super::webui::PATHS.contains(&path);
    if path == "/health" || path == "/v1/health" || page {
        return next.run(req).await;
    }
    if !PUBLIC.contains(&path) && !app.authorized(req.headers()) {
        return ApiError::unauthorized().into_response();
    }
    if let Err(e) = app.available() {
        return e.into_response();
    }
    next.run(req).await
}

/// The key a request carries: `Authorization: Bearer K` or `X-Api-Key: K`.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v.to_str().ok()?;
        let (scheme, key) = v.split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then_some(key);
    }
    headers.get("x-api-key")?.to_str().ok()
}

async fn health(State(app): State<Arc<App>>) -> Response {
    let (busy, _) = app.slots.snapshot();
    let n_busy = busy.iter().filter(|b| **b).count();
    match app.available() {
        Ok(_) => Json(json!({
            "status": "ok",
            "slots_idle": busy.len() - n_busy,
            "slots_processing": n_busy,
        }))
        .into_response(),
        Err(e) => (
            e.status,
            Json(json!({"status": app.status(), "error": e.body()["error"]})),
        )
            .into_response(),
    }
}

async fn models(State(app): State<Arc<App>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{"id": app.alias, "object": "model", "created": app.created, "owned_by": "flint"}],
    }))
}

async fn slots(State(app): State<Arc<App>>) -> Json<Value> {
    let (busy, _) = app.slots.snapshot();
    let list: Vec<Value> = busy
        .iter()
        .enumerate()
        .map(|(id, b)| json!({"id": id, "is_processing": b}))
        .collect();
    Json(Value::Array(list))
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let (busy, queue) = app.slots.snapshot();
    let n_busy = busy.iter().filter(|b| **b).count();
    let text = app.metrics.render(n_busy, busy.len(), queue);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn chat(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    generate(app, Endpoint::Chat, &headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    generate(app, Endpoint::Completion, &headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// Read a body of at most [`MAX_BODY`] bytes, within `deadline`, as UTF-8 JSON nested at most
/// [`MAX_DEPTH`] deep.
pub async fn read_json(
    headers: &HeaderMap,
    body: Body,
    deadline: std::time::Duration,
) -> Result<Value, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(ApiError::too_large(MAX_BODY));
    }
    let read = tokio::time::timeout(deadline, axum::body::to_bytes(body, MAX_BODY));
    let bytes = match read.await {
        Err(_) => return Err(ApiError::body_timeout(deadline)),
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) if is_length_limit(&e) => return Err(ApiError::too_large(MAX_BODY)),
        Ok(Err(e)) => {
            return Err(ApiError::bad_body(format!(
                "the body could not be read whole: {e}"
            )))
        }
    };
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| ApiError::bad_body(format!("the body is not UTF-8: {e}")))?;
    check_depth(text.as_bytes(), MAX_DEPTH)?;
    serde_json::from_str(text).map_err(|e| ApiError::bad_body(format!("malformed JSON: {e}")))
}

/// Whether a body read failed on [`MAX_BODY`] (rather than a connection that ended early).
fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.to_string().contains("length limit exceeded") {
            return true;
        }
        source = err.source();
    }
    false
}

/// A request queued for a slot: its events, and what its response needs.
pub struct Submitted {
    pub rx: tokio::sync::mpsc::UnboundedReceiver<super::slots::Event>,
    pub stream: bool,
    pub include_usage: bool,
    /// The prompt's tokens (llama-server's `tokens_evaluated`).
    pub prompt_tokens: usize,
    /// The slot's context rows.
    pub n_ctx: u32,
    /// How to read a chat answer back (reasoning, tool calls); `None`: the text is the content.
    pub reader: Option<super::tools::parse::Reader>,
    /// The body's ignored fields (the `X-Flint-Ignored` header).
    pub ignored: Vec<String>,
    /// Log-probabilities and echo asked for.
    pub logprobs: request::LogprobAsk,
    /// With `echo`: the prompt's text, which the answer starts with.
    pub echo: Option<String>,
}

/// Adds `X-Flint-Ignored` naming the request's ignored fields, if any.
pub fn name_ignored(mut r: Response, ignored: &[String]) -> Response {
    if ignored.is_empty() {
        return r;
    }
    if let Ok(v) = header::HeaderValue::from_str(&super::fields::ignored_header(ignored)) {
        r.headers_mut().insert("x-flint-ignored", v);
    }
    r
}

async fn generate(
    app: Arc<App>,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    // A full queue answers 429 before the body is parsed, tokenized or compiled.
    queue_room(&app)?;
    let value = read_json(headers, body, app.timeouts.body).await?;
    if endpoint == Endpoint::Completion {
        if let Some(bodies) = super::prompt::several(&value)? {
            return several(app, bodies).await;
        }
    }
    let sub = submit(&app, endpoint, &value).await?;
    let meta = Meta {
        id: app.next_id(endpoint),
        created: super::state::now_secs(),
        model: app.alias.clone(),
        endpoint,
        include_usage: sub.include_usage,
        reader: sub.reader,
        logprobs: sub.logprobs,
        echo: sub.echo,
    };
    let r = if sub.stream {
        response::stream(meta, sub.rx, app.timeouts.keep_alive)
    } else {
        response::collect(meta, sub.rx).await?
    };
    Ok(name_ignored(r, &sub.ignored))
}

/// Several prompts in one `/v1/completions` body: each runs as its own request (in the slots
/// free, else one after another) and has its own choice, `index` in the body's order; `usage`
/// sums theirs.
async fn several(app: Arc<App>, bodies: Vec<Value>) -> Result<Response, ApiError> {
    let mut subs = Vec::with_capacity(bodies.len());
    for b in &bodies {
        subs.push(submit(&app, Endpoint::Completion, b).await?);
    }
    let mut out: Option<Value> = None;
    let mut ignored = Vec::new();
    for (i, sub) in subs.into_iter().enumerate() {
        ignored.clone_from(&sub.ignored);
        let meta = Meta {
            id: app.next_id(Endpoint::Completion),
            created: super::state::now_secs(),
            model: app.alias.clone(),
            endpoint: Endpoint::Completion,
            include_usage: false,
            reader: None,
            logprobs: sub.logprobs,
            echo: sub.echo,
        };
        let mut v = response::collect_value(meta, sub.rx).await?;
        v["choices"][0]["index"] = json!(i);
        match &mut out {
            None => out = Some(v),
            Some(all) => {
                let choice = v["choices"][0].take();
                if let Some(c) = all["choices"].as_array_mut() {
                    c.push(choice);
                }
                for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
                    let n =
                        all["usage"][k].as_u64().unwrap_or(0) + v["usage"][k].as_u64().unwrap_or(0);
                    all["usage"][k] = json!(n);
                }
            }
        }
    }
    let v = out.ok_or_else(|| ApiError::invalid("prompt", "`prompt` is empty"))?;
    Ok(name_ignored(Json(v).into_response(), &ignored))
}

/// `Err(429)` when the queue is full now (`Err(503)` when shutting down).
pub(super) fn queue_room(app: &App) -> Result<(), ApiError> {
    match app.slots.would_refuse() {
        None => Ok(()),
        Some(Refused::Busy { slots, queue }) => {
            Metrics::inc(&app.metrics.rejected);
            Err(ApiError::busy(slots, queue))
        }
        Some(Refused::ShuttingDown) => Err(ApiError::unavailable("the server is shutting down")),
    }
}

/// Parse, tokenize, bound and queue a generation; returns once a slot took it or, for a
/// stream, once it has waited one keep-alive interval (the stream then opens and sends
/// keep-alive comments; if no slot takes it within `--timeout`, its first event is the error).
pub async fn submit(
    app: &Arc<App>,
    endpoint: Endpoint,
    value: &Value,
) -> Result<Submitted, ApiError> {
    let ready = app.ready()?;
    let req = request::parse(endpoint, value, &ready.limits)?;
    submit_request(app, &ready, req).await
}

/// [`submit`] of a validated request (`/v1/messages` generates this way too).
pub(super) async fn submit_request(
    app: &Arc<App>,
    ready: &Arc<Ready>,
    req: GenRequest,
) -> Result<Submitted, ApiError> {
    let endpoint = req.endpoint;
    let tokenize = {
        let (ready, prompt, special) = (Arc::clone(ready), req.prompt.clone(), req.parse_special);
        let structured = req.structured.clone();
        tokio::task::spawn_blocking(move || {
            super::chat_prompt::prepare(&ready, &prompt, special, &structured)
        })
    };
    let super::chat_prompt::Prepared {
        ids: prompt,
        grammar,
        guide,
        reader,
    } = tokenize
        .await
        .map_err(|e| ApiError::internal(format!("tokenizer task: {e}")))??;
    // A grammar ends with an end-of-generation token, which `ignore_eos` forbids: the request
    // could only fail at the grammar's end.
    if req.ignore_eos && grammar.is_some() {
        return Err(ApiError::invalid(
            "ignore_eos",
            "`ignore_eos` with a grammar (`response_format`, `json_schema`, `grammar` or tools): \
             the grammar ends the output with an end-of-generation token; send one or the other",
        ));
    }
    // An echo's chunks compute every row's logits; a grammar masks only sampled rows.
    if req.logprobs.echo && req.logprobs.top.is_some() && grammar.is_some() {
        return Err(ApiError::invalid(
            "echo",
            "`echo` with `logprobs` and a grammar: the prompt's log-probabilities are the \
             model's, unconstrained; send the grammar without `echo`, or `echo` alone",
        ));
    }
    let n_ctx = ready.limits.n_ctx as usize;
    let field = if endpoint == Endpoint::Chat {
        "messages"
    } else {
        "prompt"
    };
    if prompt.is_empty() {
        return Err(ApiError::invalid(
            field,
            format!("the {field} gives no tokens: there is nothing to complete"),
        ));
    }
    if prompt.len() >= n_ctx {
        return Err(ApiError::invalid(
            field,
            format!(
                "the prompt has {} tokens and a slot holds {n_ctx}",
                prompt.len()
            ),
        ));
    }
    let max_tokens = req.max_tokens.map_or(n_ctx - prompt.len(), |m| m as usize);
    let echo = match (&req.prompt, req.logprobs.echo) {
        (_, false) => None,
        (Prompt::Text(t), true) => Some(t.clone()),
        (_, true) => Some(ready.tok.decode(&prompt, true).map_err(|e| {
            ApiError::invalid(
                "prompt",
                format!("cannot decode the prompt to echo it: {e}"),
            )
        })?),
    };
    let lp_ask = req.logprobs;
    let want = lp_ask.top.map(|top| crate::engine::logprobs::Want {
        top,
        echo: lp_ask.echo,
        post: lp_ask.post_sampling,
    });
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let GenRequest {
        sampling,
        stop,
        stream,
        include_usage,
        ignore_eos,
        mut logit_bias,
        stop_ids,
        ignored,
        ..
    } = req;
    // llama-server's `ignore_eos`: every end-of-generation token gets a -inf bias.
    if ignore_eos {
        logit_bias.extend(
            ready
                .tok
                .eog_ids()
                .iter()
                .map(|&id| (id, f32::NEG_INFINITY)),
        );
    }
    // A bias needs the logits on the host: greedy then runs as a host argmax over biased rows.
    let sampling = match sampling {
        None if !logit_bias.is_empty() => Some(crate::sampling::SamplerParams::greedy()),
        s => s,
    };
    let prompt_tokens = prompt.len();
    let (told, admitted) = tokio::sync::oneshot::channel();
    let queued_tx = tx.clone();
    let job = Job {
        id: 0,
        prompt,
        max_tokens,
        sampling,
        bias: logit_bias,
        stop,
        tx,
        queued_at: std::time::Instant::now(),
        admitted: Some(told),
        embed: None,
        grammar,
        guide,
        stop_ids,
        pooling: Default::default(),
        logprobs: want,
    };
    let open_after = match app.timeouts.keep_alive {
        Some(k) if stream => Some((k, queued_tx)),
        _ => None,
    };
    enqueue(app, job, admitted, open_after).await?;
    Ok(Submitted {
        rx,
        stream,
        include_usage,
        prompt_tokens,
        n_ctx: ready.limits.n_ctx,
        reader,
        ignored,
        logprobs: lp_ask,
        echo,
    })
}

/// Queues `job` (429 when the queue is full, 503 when shutting down) and waits until a slot
/// takes it (503 past the queue deadline); `admitted` is told by the slot then. With
/// `open_after` (a stream's keep-alive interval and its sender) it waits that long at most: the
/// stream then opens (keep-alive comments flow) and, if no slot takes the job by the deadline,
/// its first event is the queue-timeout error.
pub(super) async fn enqueue(
    app: &App,
    job: Job,
    mut admitted: tokio::sync::oneshot::Receiver<()>,
    open_after: Option<(
        std::time::Duration,
        tokio::sync::mpsc::UnboundedSender<Event>,
    )>,
) -> Result<(), ApiError> {
    let id = match app.slots.submit(job) {
        Ok(id) => {
            Metrics::inc(&app.metrics.requests);
            id
        }
        Err(Refused::Busy { slots, queue }) => {
            Metrics::inc(&app.metrics.rejected);
            return Err(ApiError::busy(slots, queue));
        }
        Err(Refused::ShuttingDown) => {
            return Err(ApiError::unavailable("the server is shutting down"))
        }
    };
    // The queue deadline: a job no slot took in time leaves the queue with a 503 to retry. (A
    // sender dropped unsent means the job was failed or the server is stopping: its events say.)
    let deadline = app.timeouts.queue;
    let first = open_after
        .as_ref()
        .map_or(deadline, |(k, _)| (*k).min(deadline));
    if tokio::time::timeout(first, &mut admitted).await.is_err() {
        match open_after {
            Some((_, queued_tx)) if first < deadline => {
                let (slots, metrics) = (Arc::clone(&app.slots), Arc::clone(&app.metrics));
                tokio::spawn(async move {
                    let late = tokio::time::timeout(deadline - first, admitted).await;
                    if late.is_err() && slots.withdraw(id) {
                        Metrics::inc(&metrics.rejected);
                        let why = ApiError::queue_timeout(deadline).message;
                        let _ = queued_tx.send(Event::Error(why));
                    }
                });
            }
            _ if app.slots.withdraw(id) => {
                Metrics::inc(&app.metrics.rejected);
                return Err(ApiError::queue_timeout(deadline));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The prompt's token ids. Special-token text a client writes stays text: in chat message
/// contents always (only the template's markup gives control tokens), in a completion prompt
/// unless the request sets `parse_special`.
pub fn tokens(ready: &Ready, prompt: &Prompt, parse_special: bool) -> Result<Vec<u32>, ApiError> {
    let tok_err = |field: &str, e: crate::tokenizer::TokenizerError| {
        ApiError::invalid(field, format!("cannot tokenize the {field}: {e}"))
    };
    match prompt {
        Prompt::Text(t) => ready
            .tok
            .encode(t, true, parse_special)
            .map_err(|e| tok_err("prompt", e)),
        // Checked when parsed (non-empty, each id in the vocabulary: `request::token_id`).
        Prompt::Tokens(ids) => Ok(ids.clone()),
        Prompt::Chat(messages) => {
            let template = ready.template.as_ref().ok_or_else(|| {
                ApiError::invalid(
                    "messages",
                    "the model has no chat template: use /v1/completions",
                )
            })?;
            let chat = ready
                .tok
                .render_chat(template, messages, true)
                .map_err(|e| ApiError::invalid("messages", format!("chat template: {e}")))?;
            ready
                .tok
                .encode_rendered(&chat)
                .map_err(|e| tok_err("messages", e))
        }
    }
}

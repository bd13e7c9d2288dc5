// flint serve's chat page: streams /v1/chat/completions (SSE) and shows each reply with the
// drafter's accepted tokens marked (the chunks' `draft_accepted` ranges), the speed and τ from
// the last chunk's `timings`. No dependencies; the text is set as text, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const turns = [];
let busy = null; // the AbortController of the request in flight

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function loadInfo() {
  try {
    const r = await fetch("/v1/models");
    const j = await r.json();
    $("model").textContent = j.data && j.data[0] ? j.data[0].id : "?";
  } catch (e) {
    $("model").textContent = "(no /v1/models)";
  }
  try {
    const r = await fetch("/health");
    const j = await r.json();
    $("health").textContent = j.status === "ok" ? "" : j.status;
    if (j.status === "loading") setTimeout(loadInfo, 1000);
  } catch (e) {
    $("health").textContent = "unreachable";
  }
}

function bubble(role) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const label = document.createElement("div");
  label.className = "role";
  label.textContent = role;
  const text = document.createElement("div");
  text.className = "text";
  div.append(label, text);
  $("log").append(div);
  return div;
}

// Appends `content` to `el`, wrapping the `[start, end)` character ranges in <mark>.
function appendMarked(el, content, ranges) {
  const chars = Array.from(content);
  let at = 0;
  for (const [start, end] of ranges || []) {
    if (start > at) el.append(chars.slice(at, start).join(""));
    const piece = chars.slice(start, end).join("");
    const last = el.lastChild;
    if (start === 0 && last && last.nodeName === "MARK") {
      last.textContent += piece; // a run of drafts that goes on from the last chunk
    } else {
      const m = document.createElement("mark");
      m.className = "draft";
      m.textContent = piece;
      el.append(m);
    }
    at = end;
  }
  if (at < chars.length) el.append(chars.slice(at).join(""));
}

function schemaFormat() {
  const text = $("schema").value.trim();
  if (!text) return null;
  let schema;
  try {
    schema = JSON.parse(text);
  } catch (e) {
    throw new Error("the JSON schema is not JSON: " + e.message);
  }
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
    throw new Error("the JSON schema must be an object");
  }
  return { type: "json_schema", json_schema: { name: "page_schema", schema, strict: true } };
}

function body(messages) {
  const b = { messages, stream: true };
  const max = parseInt($("max-tokens").value, 10);
  if (max > 0) b.max_tokens = max;
  const t = $("temperature").value.trim();
  if (t !== "") b.temperature = Number(t);
  const rf = schemaFormat();
  if (rf) b.response_format = rf;
  return b;
}

function stats(t) {
  const parts = [];
  parts.push(t.predicted_n + " tokens");
  parts.push(t.predicted_per_second.toFixed(1) + " tok/s");
  if (t.draft_n !== undefined) {
    parts.push("drafts accepted " + t.draft_n_accepted + "/" + t.draft_n);
    if (t.draft_cycles > 0) {
      const tau = (t.draft_n_accepted + t.draft_cycles) / t.draft_cycles;
      parts.push("τ " + tau.toFixed(2));
    }
  }
  return parts.join(" · ");
}

async function readStream(resp, onChunk) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const data = event
        .split("\n")
        .filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, ""))
        .join("\n");
      if (!data) continue; // a keep-alive comment
      if (data === "[DONE]") return;
      onChunk(JSON.parse(data));
    }
  }
}

async function send(text) {
  const user = bubble("user");
  user.querySelector(".text").textContent = text;
  const messages = [];
  const sys = $("system").value.trim();
  if (sys) messages.push({ role: "system", content: sys });
  messages.push(...turns, { role: "user", content: text });
  const reply = bubble("assistant");
  const out = reply.querySelector(".text");
  const info = document.createElement("div");
  info.className = "stats";
  info.textContent = "…";
  reply.append(info);
  reply.dataset.state = "streaming";
  busy = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  let answer = "";
  try {
    const resp = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: headers(),
      body: JSON.stringify(body(messages)),
      signal: busy.signal,
    });
    if (!resp.ok) {
      let msg = resp.status + " " + resp.statusText;
      try {
        const j = await resp.json();
        if (j.error && j.error.message) msg += ": " + j.error.message;
      } catch (e) { /* not JSON */ }
      if (resp.status === 401) msg += " (enter the server's API key above)";
      throw new Error(msg);
    }
    await readStream(resp, (c) => {
      if (c.error) throw new Error(c.error.message || JSON.stringify(c.error));
      const ch = c.choices && c.choices[0];
      if (ch && ch.delta && typeof ch.delta.content === "string" && ch.delta.content) {
        appendMarked(out, ch.delta.content, ch.draft_accepted);
        answer += ch.delta.content;
      }
      if (c.timings) {
        info.textContent = stats(c.timings);
        reply.dataset.tokensPerSecond = c.timings.predicted_per_second;
        if (c.timings.draft_n !== undefined) {
          reply.dataset.draftAccepted = c.timings.draft_n_accepted;
          reply.dataset.draftCycles = c.timings.draft_cycles;
        }
      }
    });
    turns.push({ role: "user", content: text }, { role: "assistant", content: answer });
    reply.dataset.state = "done";
  } catch (e) {
    reply.classList.add("error");
    const err = document.createElement("div");
    err.className = "text";
    err.textContent = e.name === "AbortError" ? "(stopped)" : String(e.message || e);
    reply.append(err);
    if (info.textContent === "…") info.textContent = "";
    reply.dataset.state = e.name === "AbortError" ? "stopped" : "error";
  } finally {
    busy = null;
    $("send").disabled = false;
    $("stop").disabled = true;
  }
}

$("ask").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("input").value;
  if (!text.trim() || busy) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    $("ask").requestSubmit();
  }
});
$("stop").addEventListener("click", () => busy && busy.abort());
$("clear").addEventListener("click", () => {
  if (busy) busy.abort();
  turns.length = 0;
  $("log").replaceChildren();
});
$("key").value = sessionStorage.getItem("flint-key") || "";
$("key").addEventListener("change", () => sessionStorage.setItem("flint-key", $("key").value));
loadInfo();

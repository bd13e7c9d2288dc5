"""Check `GET /metrics` of a running `flint serve` with Prometheus's own text parser.

    metrics_check.py URL SERVED PROMPT_TOKENS GENERATED_TOKENS

URL is the server's root, SERVED the generation requests it has answered whole, and
PROMPT_TOKENS / GENERATED_TOKENS the sums of their `usage` as the client read them (the server
ran no other generation). Checks, each against the Prometheus exposition format (what
`prometheus_client.parser` accepts) or against what the client saw:

- the body parses, and every family has a known type;
- llama-server's families (`llamacpp:*`, names and types as its README lists them) and flint's
  (`flint_*`) are both there, their token counters equal to each other and to the client's sums;
- the two histograms (time to first token, end-to-end latency) each have ascending `le` bounds
  ending at `+Inf`, cumulative counts that never decrease, `+Inf` equal to `_count`, `_count`
  equal to SERVED, and a sum that is not negative; the first token never comes after the end
  (sum of the first ≤ sum of the second).

Prints one JSON object with what it read; exits non-zero at the first violation.
"""

import json
import math
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from common import Violation, check, run

# llama-server's families and their types (tools/server/README.md, "GET /metrics"); a counter's
# family name is its sample name less `_total`, as the parser reports it.
LLAMACPP = {
    "llamacpp:prompt_tokens": "counter",
    "llamacpp:prompt_seconds": "counter",
    "llamacpp:tokens_predicted": "counter",
    "llamacpp:tokens_predicted_seconds": "counter",
    "llamacpp:n_decode": "counter",
    "llamacpp:prompt_tokens_seconds": "gauge",
    "llamacpp:predicted_tokens_seconds": "gauge",
    "llamacpp:kv_cache_usage_ratio": "gauge",
    "llamacpp:kv_cache_tokens": "gauge",
    "llamacpp:requests_processing": "gauge",
    "llamacpp:requests_deferred": "gauge",
    "llamacpp:n_busy_slots_per_decode": "gauge",
}
FLINT = {
    "flint_requests": "counter",
    "flint_prompt_tokens": "counter",
    "flint_generated_tokens": "counter",
    "flint_slots_total": "gauge",
    "flint_queue_depth": "gauge",
}
HISTOGRAMS = ["flint_time_to_first_token_seconds", "flint_e2e_request_latency_seconds"]


def value(families, name):
    """The single sample of family `name`."""
    samples = families[name].samples
    check(len(samples) == 1, f"{name}: {len(samples)} samples, want 1")
    return samples[0].value


def histogram(fam, served):
    """Check one histogram family; (count, sum)."""
    buckets, total, count = [], None, None
    for s in fam.samples:
        if s.name == fam.name + "_bucket":
            le = s.labels.get("le")
            check(le is not None, f"{fam.name}: a bucket without le: {s}")
            buckets.append((float(le), s.value))
        elif s.name == fam.name + "_sum":
            total = s.value
        elif s.name == fam.name + "_count":
            count = s.value
    check(len(buckets) >= 2, f"{fam.name}: {len(buckets)} buckets")
    bounds = [b for b, _ in buckets]
    check(bounds == sorted(bounds) and len(set(bounds)) == len(bounds),
          f"{fam.name}: bounds not ascending: {bounds}")
    check(math.isinf(bounds[-1]), f"{fam.name}: the last bucket is le={bounds[-1]}, not +Inf")
    counts = [c for _, c in buckets]
    check(all(a <= b for a, b in zip(counts, counts[1:])),
          f"{fam.name}: cumulative counts decrease: {counts}")
    check(count is not None and total is not None, f"{fam.name}: no _count or _sum")
    check(counts[-1] == count, f"{fam.name}: +Inf bucket {counts[-1]} != _count {count}")
    check(count == served, f"{fam.name}: _count {count}, but {served} generations were served")
    check(total >= 0, f"{fam.name}: negative sum {total}")
    return count, total


def main():
    url, served, prompt, generated = sys.argv[1], *map(int, sys.argv[2:5])
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=30) as r:
        check(r.status == 200, f"/metrics answered {r.status}")
        ctype = r.headers.get("Content-Type", "")
        text = r.read().decode("utf-8")
    check(ctype.startswith("text/plain"), f"Content-Type {ctype!r}")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for f in families.values():
        check(f.type != "unknown", f"{f.name}: no TYPE line")
    for want in (LLAMACPP, FLINT):
        for name, kind in want.items():
            check(name in families, f"no family {name} in:\n{text}")
            check(families[name].type == kind,
                  f"{name}: type {families[name].type}, want {kind}")
    for name in HISTOGRAMS:
        check(name in families and families[name].type == "histogram",
              f"{name}: not a histogram family")
    got = {
        "llamacpp_prompt_tokens": value(families, "llamacpp:prompt_tokens"),
        "llamacpp_tokens_predicted": value(families, "llamacpp:tokens_predicted"),
        "flint_prompt_tokens": value(families, "flint_prompt_tokens"),
        "flint_generated_tokens": value(families, "flint_generated_tokens"),
    }
    check(got["llamacpp_tokens_predicted"] == generated == got["flint_generated_tokens"],
          f"generated tokens: metrics {got}, the client read {generated}")
    # Prompt tokens processed: at most the prompts' lengths (a slot reuses its cached prefix).
    check(0 < got["llamacpp_prompt_tokens"] <= prompt,
          f"prompt tokens: metrics {got}, the prompts had {prompt}")
    check(got["llamacpp_prompt_tokens"] == got["flint_prompt_tokens"], f"{got}")
    check(value(families, "llamacpp:n_decode") >= served, "fewer forwards than generations")
    ratio = value(families, "llamacpp:kv_cache_usage_ratio")
    check(0 < ratio <= 1, f"kv_cache_usage_ratio {ratio}")
    ttft = histogram(families[HISTOGRAMS[0]], served)
    e2e = histogram(families[HISTOGRAMS[1]], served)
    check(ttft[1] <= e2e[1], f"first tokens after the ends: sums {ttft[1]} > {e2e[1]}")
    got.update({"families": len(families), "ttft": ttft, "e2e": e2e})
    return got


if __name__ == "__main__":
    run(main)

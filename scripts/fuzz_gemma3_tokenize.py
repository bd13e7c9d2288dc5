#!/usr/bin/env python3
"""Differential fuzz of flint's Gemma 3 tokenizer against llama.cpp b11434 (not run by CI).

Random strings built from pieces that stress SentencePiece (whitespace and newline runs, CJK,
emoji, combining marks, byte-fallback code points, control and user-defined token texts, `▁`)
are tokenized by llama-server's `POST /tokenize` (BOS added, special tokens parsed) on the tiny
model of gen_gemma3_chat.py and by `flint tokenize --raw`; mismatches are printed.

    ~/ggufenv/bin/python scripts/fuzz_gemma3_tokenize.py SEED COUNT   (MAXN=pieces per string)

Needs target/tmp/gemma3/gemma3_vocab.gguf (cargo test --release --test all_cli tokenizer_gemma3:: makes
it), target/release/flint, gguf-py, numpy and llama.cpp's binaries.
"""
import json, os, pathlib, random, shutil, subprocess, sys, tempfile, time, urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import gen_gemma3_chat as g  # noqa: E402
random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
pieces = ["the", " the", "The", "hello", " world", "ing", "tion", " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n",
  "中", "文", "日本", "語", "한국", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "e\u0301", "\u0301", "\U0001D11E", "\uE000", "\U0010FFFD", "\x01", "\x7f", "\u2028",
  "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "</s>", "<s>", "<p>", "</p>", "<br>", "<div>", "[multimodal]", "<start_of_image>", "<unused0>", "<unused12>",
  "<", ">", "/", "_", "▁", "▁▁", "0", "12", "345", "3.14", "def ", "(x)", ":", "{", "}", "=>", "==", "->", "//", "#", "'", "\"", "...", "—", "ß", "ü", "Ω", "д", "ж", "مرحبا", "नम", "्", "ก", "ี่"]
cases = []
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 1500):
    n = random.randint(1, int(os.environ.get("MAXN", "14")))
    s = "".join(random.choice(pieces) for _ in range(n))
    if s.strip():
        cases.append(s)
vocab = str(ROOT / 'target/tmp/gemma3/gemma3_vocab.gguf')
tmp = tempfile.mkdtemp()
model = os.path.join(tmp, 'm.gguf')
g.tiny_model(vocab, model)
port = g.free_port()
env = dict(os.environ, LD_LIBRARY_PATH=g.LLAMA_BIN)
srv = subprocess.Popen([os.path.join(g.LLAMA_BIN, "llama-server"), "-m", model, "--port", str(port), "-c", "512", "-t", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(300):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2); break
    except Exception: time.sleep(0.2)
want = []
for s in cases:
    _, r = g.post(port, "/tokenize", {"content": s, "add_special": True, "parse_special": True})
    want.append(r["tokens"])
srv.terminate()
srv.wait(timeout=30)
prompts = os.path.join(tmp, 'p.jsonl')
with open(prompts, 'w') as f:
    for i, s in enumerate(cases):
        f.write(json.dumps({"category": str(i), "prompt": s}) + "\n")
out = subprocess.run([str(ROOT / 'target/release/flint'), 'tokenize', '--raw', '--quiet', '-m', vocab, '--prompts', prompts], capture_output=True, text=True)
shutil.rmtree(tmp)
got = [json.loads(l)["ids"] for l in out.stdout.split("\n") if l]
assert len(got) == len(want), (len(got), len(want), out.stderr[:500])
bad = [(c, w, g_) for c, w, g_ in zip(cases, want, got) if w != g_]
print(len(cases), "cases,", len(bad), "mismatches")
for c, w, g_ in bad[:10]:
    print(repr(c)); print(" llama", w); print(" flint", g_)

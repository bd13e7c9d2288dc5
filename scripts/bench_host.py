#!/usr/bin/env python3
"""What the host costs per decode step, before and after: `flint bench -npl 1,8` on wgpu's
noop backend (`FLINT_BACKEND=noop`: kernels do nothing, so the step's time is the host's),
for each binary given, in alternating order, per case (model, sampling, drafter).

Prints a markdown table of host µs per step (the median of ROUNDS runs; one step is one
batched decode step, or one speculative cycle with a drafter), submits and blocking waits per
step, and the ratio new / base. Standard library only.

    python3 scripts/bench_host.py --base /tmp/base/flint --new target/release/flint \
        --case default=models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --drafter default=models/SmolLM2-135M-Instruct.dspark-Q8_0.gguf
"""
import argparse
import json
import os
import statistics
import subprocess


def run(binary, model, npl, temp, drafter, ntg):
    cmd = [binary, "bench", "-m", model, "-npl", npl, "-npp", "16", "-ntg", str(ntg),
           "-r", "1", "-o", "json", "--temp", str(temp)]
    if drafter:
        cmd += ["-md", drafter]
    env = dict(os.environ, FLINT_BACKEND="noop")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return {row["pl"]: row for row in json.loads(out.stdout)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--case", action="append", required=True, help="NAME=MODEL.gguf")
    ap.add_argument("--drafter", action="append", default=[], help="NAME=DRAFTER.gguf")
    ap.add_argument("--npl", default="1,8")
    ap.add_argument("--ntg", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--temps", default="0,0.8")
    a = ap.parse_args()
    drafters = dict(d.split("=", 1) for d in a.drafter)
    print("| model | sampling | drafter | B | base µs/step | new µs/step | new/base "
          "| submits/step base → new | waits/step base → new |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in a.case:
        name, model = case.split("=", 1)
        for drafter in [None] + ([drafters[name]] if name in drafters else []):
            for temp in [float(t) for t in a.temps.split(",")]:
                rows = {"base": [], "new": []}
                for _ in range(a.rounds):
                    for which in ["base", "new"]:
                        binary = a.base if which == "base" else a.new
                        rows[which].append(run(binary, model, a.npl, temp, drafter, a.ntg))
                for b in sorted(rows["new"][0]):
                    def med(which, key):
                        return statistics.median(r[b][key] for r in rows[which])
                    hb, hn = med("base", "host_us_per_step"), med("new", "host_us_per_step")
                    print(f"| {name} | {'greedy' if temp == 0 else f'temp {temp}'} "
                          f"| {'yes' if drafter else 'no'} | {b} | {hb:.0f} | {hn:.0f} "
                          f"| {hn / hb:.2f} "
                          f"| {med('base', 'submits_per_step'):.2f} → {med('new', 'submits_per_step'):.2f} "
                          f"| {med('base', 'waits_per_step'):.2f} → {med('new', 'waits_per_step'):.2f} |",
                          flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The GPU proof kit: proves flint correct on the machine's adapter and measures it, in one
# command, without network or Python. Writes OUT/report.json (every figure), OUT/summary.md
# and OUT/logs.txt (each step's output).
#
#   bash scripts/gpu-check.sh OUT [--dry-run] [--budget SECONDS]
#
# Binaries: .gpu-kit/kit.tar.xz (scripts/gpu-kit.sh) when present, else this tree's build
# (target/release, or FLINT_BIN and FLINT_TEST_DIR). Steps, in order: the adapters; the GPU
# test suites on the adapter flint picks (kernels of every family it selects and their
# fallbacks, attention, batch invariance, the forward of generated models against the CPU
# oracle, and against the float fixtures where the SmolLM2 model is present); a random
# Qwen3-8B Q4_K_M and its random DSpark drafter, generated there; `flint bench -p 512 -n 128
# -r 5` with the card's bandwidth; the SPS(B) curve, B = 1..16; a kernel profile; the
# speculative benchmark (cost split and SPS: a random drafter accepts nothing).
# Time: every step runs under `timeout` with its own cap, and never past the whole budget
# (default 450 s), so a hang costs one step; a step the budget no longer allows is reported
# as skipped. --dry-run: the same steps on a random Qwen3-0.6B with small sizes, suites
# listed and two run (CI runs it on lavapipe so the kit never rots).
set -uo pipefail
out=${1:?usage: gpu-check.sh OUT [--dry-run] [--budget SECONDS]}
shift
dry=0
budget=450
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1 ;;
    --budget) budget=$2; shift ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/flint-gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$work}
start=$(date +%s)
logs=$out/logs.txt
: >"$logs"
steps=()
mapfile -t SUITES < <(grep -v '^#' "$root/scripts/gpu-suites.txt")

# ---- binaries, Vulkan loader --------------------------------------------------------------
kit=${FLINT_KIT_DIR:-$root/.gpu-kit}
if [ -f "$kit/kit.tar.xz" ]; then
  mkdir -p "$work/kit"
  xz -dc "$kit/kit.tar.xz" | tar -C "$work/kit" -xf - || { echo "gpu-check: bad kit" >&2; exit 1; }
  bin=$work/kit/flint
  tests=$work/kit/tests
else
  bin=${FLINT_BIN:-$root/target/release/flint}
  tests=${FLINT_TEST_DIR:-$root/target/release/deps}
fi
[ -x "$bin" ] || { echo "gpu-check: no flint binary at $bin (build, or run gpu-kit.sh)" >&2; exit 1; }
if ! ldconfig -p 2>/dev/null | grep -q libvulkan.so.1; then
  for deb in "$kit"/libvulkan1_*.deb; do
    [ -f "$deb" ] && dpkg -x "$deb" / && ldconfig && echo "gpu-check: unpacked $(basename "$deb")"
  done
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && [ -f "$icd" ]; then
  export VK_DRIVER_FILES=$icd
fi

# The executable of test suite $1: the kit's, or the newest cargo build of it.
suite_bin() {
  if [ -f "$tests/$1" ]; then echo "$tests/$1"; return; fi
  ls -t "$tests/$1"-* 2>/dev/null | grep -E -- "-[0-9a-f]{16}$" | head -1
}

# JSON string of stdin.
json_str() {
  printf '"'
  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/\\t/g' -e 's/\r//g' -e 's/[[:cntrl:]]//g' |
    awk 'NR > 1 { printf "\\n" } { printf "%s", $0 }'
  printf '"'
}

# step NAME CAP CMD...: runs CMD under min(CAP, budget left) seconds, stdout to
# $work/NAME.out, both streams into the logs; records status, seconds and libtest counts.
step() {
  local name=$1 cap=$2
  shift 2
  local left=$((budget - ($(date +%s) - start)))
  local t0 rc status passed=null failed=null
  if [ "$left" -lt 5 ]; then
    steps+=("{\"name\":\"$name\",\"status\":\"skipped\",\"why\":\"budget\",\"seconds\":0}")
    echo "=== $name: skipped (budget)" >>"$logs"
    return 1
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  echo "=== $name (cap ${cap}s): $*" >>"$logs"
  t0=$(date +%s)
  timeout -k 5 "$cap" "$@" >"$work/$name.out" 2>"$work/$name.err"
  rc=$?
  cat "$work/$name.out" "$work/$name.err" >>"$logs"
  case $rc in
    0) status=ok ;;
    124 | 137) status=timeout ;;
    *) status=fail ;;
  esac
  local summary
  summary=$(grep -h "^test result:" "$work/$name.out" | tail -1)
  if [ -n "$summary" ]; then
    passed=$(sed -E 's/.* ([0-9]+) passed.*/\1/' <<<"$summary")
    failed=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$summary")
  fi
  steps+=("{\"name\":\"$name\",\"status\":\"$status\",\"rc\":$rc,\"seconds\":$(($(date +%s) - t0)),\"passed\":$passed,\"failed\":$failed}")
  echo "=== $name: $status (rc $rc, $(($(date +%s) - t0)) s)" >>"$logs"
  [ "$status" = ok ]
}

# The output of step $1 when it is a JSON document, else null.
json_of() {
  if [ -s "$work/$1.out" ] && grep -q '^[[{]' "$work/$1.out"; then cat "$work/$1.out"; else echo null; fi
}

# Peak bandwidth in GB/s of a card named $1 (vendors' datasheets; docs/GPU.md cites them).
bandwidth_of() {
  local n
  n=$(tr '[:upper:]' '[:lower:]' <<<"$1")
  case $n in
    *h200*) echo 4800 ;; *h100*pcie*) echo 2000 ;; *h100*) echo 3350 ;;
    *a100*80*) echo 2039 ;; *a100*) echo 1555 ;; *l40s*) echo 864 ;; *l4*) echo 300 ;;
    *4090*laptop*) echo 576 ;; *4090*) echo 1008 ;; *4080*laptop*) echo 432 ;; *4080*) echo 717 ;;
    *4070*laptop*) echo 256 ;; *4070*) echo 504 ;; *4060*laptop*) echo 256 ;; *4060*) echo 272 ;;
    *3090*) echo 936 ;; *3080*laptop*) echo 448 ;; *3080*) echo 760 ;; *3070*) echo 448 ;;
    *3060*laptop*) echo 336 ;; *3060*) echo 360 ;;
    *) echo "" ;;
  esac
}

# ---- 1. adapters ----------------------------------------------------------------------------
step devices 30 "$bin" devices --json
adapter=$(grep -m1 '"name"' "$work/devices.out" 2>/dev/null | sed -E 's/.*"name": "(.*)",?$/\1/')
bw=$(bandwidth_of "$adapter")

# ---- 2. correctness suites on the adapter ---------------------------------------------------
smollm=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
for line in "${SUITES[@]}"; do
  # A test file (libtest filter `NAME::`) and the area binary that holds it.
  read -r s suite <<<"$line"
  exe=$(suite_bin "$suite")
  if [ -z "$exe" ]; then
    steps+=("{\"name\":\"suite-$s\",\"status\":\"missing\",\"seconds\":0}")
    continue
  fi
  if [ "$s" = model_forward ] && [ ! -f "$smollm" ]; then
    # 98 MB: more than a GPU machine's carried tree allows; the generated models stand in.
    steps+=("{\"name\":\"suite-$s\",\"status\":\"not-carried\",\"why\":\"models/SmolLM2-135M-Instruct.Q4_1.gguf is absent\",\"seconds\":0}")
    continue
  fi
  if [ "$dry" = 1 ] && [ "$s" != kernels_matmul_controls ] && [ "$s" != kernels_ops ]; then
    step "suite-$s" 60 "$exe" --list "$s::"
  else
    step "suite-$s" 120 "$exe" "$s::"
  fi
done

# ---- 3. models, generated here --------------------------------------------------------------
if [ "$dry" = 1 ]; then
  target=qwen3-0.6b-q4_0 drafter=qwen3-0.6b-dspark-q8_0
  pp=32 tg=8 reps=1 sps=1,2 spec_n=8 n_prompts=1
else
  target=qwen3-8b-q4_k_m drafter=qwen3-8b-dspark-q8_0
  pp=512 tg=128 reps=5 sps=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 spec_n=64 n_prompts=4
fi
step model 120 "$bin" gguf preset "$target" "$work/target.gguf" --weights random --seed 1
step drafter 60 "$bin" gguf preset "$drafter" "$work/drafter.gguf" --weights random --seed 2
m=$work/target.gguf

# ---- 4. benchmarks --------------------------------------------------------------------------
bw_arg=()
[ -n "$bw" ] && bw_arg=(--bandwidth "$bw")
step bench 150 "$bin" bench -m "$m" -p "$pp" -n "$tg" -r "$reps" "${bw_arg[@]}" -o json
step sps 120 "$bin" bench -m "$m" --sps "$sps" -r "$reps" -o json
step profile 90 "$bin" bench -m "$m" --profile -p "$pp"
{
  echo '{"category": "chat", "prompt": "Explain what a GPU is to a child."}'
  echo '{"category": "code", "prompt": "Write a function that reverses a string in Python."}'
  echo '{"category": "math", "prompt": "What is 17 times 23? Show the steps."}'
  echo '{"category": "prose", "prompt": "Describe a quiet harbour at dawn."}'
} | head -"$n_prompts" >"$work/prompts.jsonl"
# The dry run (lavapipe, a shared 2-core machine) gets room: its spec step took 150 s and more
# while other jobs ran.
spec_limit=150
[ "$dry" = 1 ] && spec_limit=300
step spec "$spec_limit" "$bin" bench -m "$m" -md "$work/drafter.gguf" --spec-prompts "$work/prompts.jsonl" \
  -n "$spec_n" -o json

# ---- report ---------------------------------------------------------------------------------
total=$(($(date +%s) - start))
commit=$(cat "$work/kit/COMMIT" 2>/dev/null || git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
{
  echo "{"
  echo "\"kit\": \"flint gpu-check\", \"version\": 1,"
  echo "\"dry_run\": $([ "$dry" = 1 ] && echo true || echo false),"
  echo "\"commit\": \"$commit\", \"started_unix\": $start, \"total_s\": $total, \"budget_s\": $budget,"
  printf '"adapter": '; printf '%s' "$adapter" | json_str; echo ","
  echo "\"bandwidth_gbps\": ${bw:-null},"
  echo "\"models\": {\"target\": \"$target\", \"drafter\": \"$drafter\"},"
  echo "\"steps\": ["
  for i in "${!steps[@]}"; do
    [ "$i" -gt 0 ] && echo ","
    printf '%s' "${steps[$i]}"
  done
  echo "],"
  printf '"devices": '; json_of devices; echo ","
  printf '"bench": '; json_of bench; echo ","
  printf '"sps": '; json_of sps; echo ","
  printf '"spec": '; json_of spec; echo ","
  printf '"profile_md": '; json_str <"$work/profile.out"; echo
  echo "}"
} >"$out/report.json"

{
  echo "# flint gpu-check"
  echo
  echo "Adapter: $adapter; bandwidth: ${bw:-unknown} GB/s; models: random $target, $drafter;"
  echo "commit $commit; $total s of a $budget s budget$([ "$dry" = 1 ] && echo ' (dry run)')."
  echo
  echo "| step | status | seconds | passed | failed |"
  echo "|---|---|---:|---:|---:|"
  for s in "${steps[@]}"; do
    sed -E 's/.*"name":"([^"]*)","status":"([^"]*)".*"seconds":([0-9]+)(,"passed":([0-9a-z]+),"failed":([0-9a-z]+))?.*/| \1 | \2 | \3 | \5 | \6 |/' <<<"$s"
  done
  echo
  echo "## flint bench (t/s)"
  echo
  grep -E '"(n_prompt|n_gen|avg_ts|stddev_ts|bandwidth_pct)"' "$work/bench.out" 2>/dev/null |
    tr -d ' ,' | paste -sd' ' | sed 's/"n_prompt"/\n"n_prompt"/g' | sed '/^$/d'
  echo
  echo "## SPS(B)"
  echo
  grep -E '"(batch|sps|sps_ratio_to_b1)"' "$work/sps.out" 2>/dev/null | tr -d ' ,' | paste -sd' ' |
    sed 's/"batch"/\n"batch"/g' | sed '/^$/d'
  echo
  echo "## Profile"
  echo
  cat "$work/profile.out" 2>/dev/null
} >"$out/summary.md"
echo "gpu-check: $out/report.json, $out/summary.md ($total s)"
bad=$(printf '%s\n' "${steps[@]}" | grep -cE '"status":"(fail|timeout|missing)"')
[ "$bad" -eq 0 ]

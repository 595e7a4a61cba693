#!/usr/bin/env bash
# Time Microsoft's Vidur simulator and `kvscope simulate` on the same trace, side by side.
#
# Acceptance point "Speed" of issue 5. Nothing is downloaded here: the caller supplies a Vidur
# checkout (the GitHub repository, whose profiling CSVs under data/profiling/ must be real files,
# not Git LFS pointers) and a virtualenv that already has Vidur's requirements installed.
# No Vidur code lives in this repository; this script only runs `python -m vidur.main`.
#
# Usage:
#   benchmarks/vidur_compare.sh VIDUR_DIR VIDUR_VENV [TRACE_CSV] [RUNS]
# Defaults: TRACE_CSV = ../shared/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv
#           (Azure LLM inference trace 2023, conversation part), RUNS = 3.
# Environment: KVSCOPE_PYTHON (default .venv/bin/python, else python3), WORK (scratch dir,
#              default a fresh mktemp dir), VIDUR_TIMEOUT_S (per Vidur run, default 2400),
#              VIDUR_CACHE (Vidur's predictor cache dir, default $WORK/vidur_cache).
#
# Vidur side: Llama-2-7B (its default model), one A100 replica, TP1/PP1, vLLM scheduler,
# trace-replay generator, max_tokens 4096 (Llama-2's context: Vidur trims longer prompts).
# The first Vidur run trains its random-forest predictors and caches them; the second run is
# the one timed. Its simulation-loop share is read from its own log lines
# ("Starting simulation" .. "Simulation ended", one-second resolution).
# kvscope side: Llama-3.1-8B on one A100-SXM-80GB (closest dense preset) and
# DeepSeek-V4-Flash on 8xH200 with an FP8 KV cache; RUNS runs each, medians reported.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    echo "usage: $0 VIDUR_DIR VIDUR_VENV [TRACE_CSV] [RUNS]" >&2
    exit 2
fi
VIDUR_DIR=$(cd "$1" && pwd)
VIDUR_PY="$2/bin/python"
REPO=$(cd "$(dirname "$0")/.." && pwd)
TRACE=${3:-$REPO/../shared/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv}
RUNS=${4:-3}
WORK=${WORK:-$(mktemp -d /tmp/vidur-compare.XXXXXX)}
VIDUR_TIMEOUT_S=${VIDUR_TIMEOUT_S:-2400}
VIDUR_CACHE=${VIDUR_CACHE:-$WORK/vidur_cache} # Vidur's trained-predictor cache; reuse one to skip training
KV_PY=${KVSCOPE_PYTHON:-}
if [[ -z "$KV_PY" ]]; then
    if [[ -x "$REPO/.venv/bin/python" ]]; then KV_PY="$REPO/.venv/bin/python"; else KV_PY=python3; fi
fi
export WANDB_MODE=disabled # Vidur imports wandb at module level; keep it offline.
mkdir -p "$WORK"
echo "scratch: $WORK   date: $(date -u +%FT%TZ)   $(uptime | sed 's/.*load/load/')"
# An exported tree (git archive) has no .git: pass VIDUR_COMMIT to name the commit it came from.
echo "vidur commit: ${VIDUR_COMMIT:-$(git -C "$VIDUR_DIR" rev-parse HEAD 2>/dev/null || echo unknown)}"

# Vidur's trace-replay generator wants columns arrived_at (s), num_prefill_tokens,
# num_decode_tokens; the Azure trace has TIMESTAMP, ContextTokens, GeneratedTokens.
VTRACE="$WORK/trace_vidur.csv"
python3 - "$TRACE" "$VTRACE" <<'EOF'
import csv, sys
from datetime import datetime
src, dst = sys.argv[1], sys.argv[2]
with open(src, newline="") as f, open(dst, "w", newline="") as g:
    rows = csv.DictReader(f)
    out = csv.writer(g)
    out.writerow(["arrived_at", "num_prefill_tokens", "num_decode_tokens"])
    t0 = None
    for r in rows:
        # The trace's timestamps carry 7 fractional digits; datetime takes 6.
        stamp = r["TIMESTAMP"][:26]
        t = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()
        t0 = t if t0 is None else t0
        out.writerow([f"{t - t0:.6f}", r["ContextTokens"], r["GeneratedTokens"]])
EOF
echo "trace: $(($(wc -l <"$VTRACE") - 1)) requests -> $VTRACE"

ATTN="$VIDUR_DIR/data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/attention.csv"
if [[ ! -f "$ATTN" ]]; then
    echo "VIDUR NOT RUNNABLE: missing $ATTN (a Git LFS file in Vidur's repository)"
elif head -c 40 "$ATTN" | grep -q "git-lfs"; then
    echo "VIDUR NOT RUNNABLE: $ATTN is a Git LFS pointer, not the profile"
fi

run_vidur() { # $1 = label; prints the log path
    local log="$WORK/vidur_$1.log"
    (cd "$VIDUR_DIR" && nice -n 10 timeout "$VIDUR_TIMEOUT_S" /usr/bin/time -f "TIME %e s wall %U s user" \
        "$VIDUR_PY" -m vidur.main \
        --replica_config_device a100 --replica_config_model_name meta-llama/Llama-2-7b-hf \
        --cluster_config_num_replicas 1 --replica_config_tensor_parallel_size 1 \
        --replica_config_num_pipeline_stages 1 \
        --request_generator_config_type trace_replay \
        --trace_request_generator_config_trace_file "$VTRACE" \
        --trace_request_generator_config_max_tokens 4096 \
        --replica_scheduler_config_type vllm \
        --metrics_config_output_dir "$WORK/vidur_out" \
        --metrics_config_cache_dir "$VIDUR_CACHE") >"$log" 2>&1 || true
    echo "$log"
}

loop_seconds() { # seconds between Vidur's "Starting simulation" and "Simulation ended" lines
    python3 - "$1" <<'EOF'
import re, sys
from datetime import datetime
stamps = {}
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"INFO (\d\d-\d\d \d\d:\d\d:\d\d) ", line)
    if m and ("Starting simulation" in line or "Simulation ended" in line):
        key = "start" if "Starting" in line else "end"
        stamps[key] = datetime.strptime(m.group(1), "%m-%d %H:%M:%S")
print((stamps["end"] - stamps["start"]).total_seconds() if len(stamps) == 2 else "n/a")
EOF
}

echo "== Vidur run 1 (trains and caches predictors)"
LOG1=$(run_vidur train)
grep -E "^TIME|Error|error:" "$LOG1" | tail -3
echo "== Vidur run 2 (timed)"
LOG2=$(run_vidur timed)
grep -E "^TIME|Error|error:" "$LOG2" | tail -3
VIDUR_WALL=$(sed -n 's/^TIME \([0-9.]*\) s wall.*/\1/p' "$LOG2")
VIDUR_LOOP=$(loop_seconds "$LOG2")
if ! grep -q "Simulation ended" "$LOG2"; then VIDUR_WALL=n/a; fi
echo "vidur: end-to-end ${VIDUR_WALL} s, loop ${VIDUR_LOOP} s"

kv_runs() { # $1 = label, rest = simulate flags; prints "median_wall median_loop"
    local label=$1
    shift
    local walls=() loops=()
    for i in $(seq "$RUNS"); do
        local log="$WORK/kv_${label}_$i.log"
        (cd "$REPO" && PYTHONPATH=src /usr/bin/time -f "TIME %e s wall %U s user" "$KV_PY" \
            -m kvscope.cli.main simulate "$@" --workload "$TRACE" --out "$WORK/kv_$label" --json) \
            >"$log" 2>"$log.err"
        walls+=("$(sed -n 's/^TIME \([0-9.]*\) s wall.*/\1/p' "$log.err")")
        loops+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["wall_s"])' \
            "$WORK/kv_$label/summary.json")")
    done
    python3 - "${walls[*]}" "${loops[*]}" <<'EOF'
import statistics, sys
w = [float(x) for x in sys.argv[1].split()]
l = [float(x) for x in sys.argv[2].split()]
print(f"{statistics.median(w):.2f} {statistics.median(l):.2f}")
EOF
}

echo "== kvscope, $RUNS runs each"
read -r L_WALL L_LOOP < <(kv_runs llama --model meta-llama/Llama-3.1-8B --gpu A100-SXM-80GB)
echo "kvscope Llama-3.1-8B / A100-SXM-80GB: end-to-end ${L_WALL} s, loop ${L_LOOP} s (medians)"
read -r V_WALL V_LOOP < <(kv_runs v4 --model deepseek-ai/DeepSeek-V4-Flash --gpu H200 \
    --tensor-parallel-size 8 --kv-cache-dtype fp8)
echo "kvscope DeepSeek-V4-Flash / 8xH200 fp8 KV: end-to-end ${V_WALL} s, loop ${V_LOOP} s (medians)"

python3 - "$VIDUR_WALL" "$VIDUR_LOOP" "$L_WALL" "$L_LOOP" "$V_WALL" "$V_LOOP" <<'EOF'
import sys
vw, vl, lw, ll, ww, wl = sys.argv[1:]
def ratio(a: str, b: str) -> str:
    try:
        return f"{float(a) / float(b):.1f}x"
    except ValueError:
        return "n/a (Vidur did not finish)"
print(f"ratio Vidur/kvscope end-to-end: Llama {ratio(vw, lw)}, V4 {ratio(vw, ww)}")
print(f"ratio Vidur/kvscope loop only:  Llama {ratio(vl, ll)}, V4 {ratio(vl, wl)}")
EOF

#!/usr/bin/env bash
# run_cases.sh BUDGET_S CASE... — on the device: start vLLM once per case with the argv rendered by
# `python -m benchmarks.gpu_truth render` (RUN/argv/CASE.args, one argument a line), stop it as soon as
# the engine has printed its memory lines ("Actual usage is ..."), the server is up, the engine died or
# the case's limit passed, and write $OUT/CASE.log.gz after each case. Cases that no longer fit in
# BUDGET_S seconds (MIN_CASE_S, default 150) are skipped and listed. The compile cache (VLLM_CACHE_ROOT)
# stays in /tmp between calls while the machine is warm.
# A case with a RUN/perf/CASE file (one sweep a line: SHAPE LOADTEST-ARGS...) is load-tested once the
# server is up: `glm-operator loadtest --token-ids -o json` from the checkout (REPO, default: the current
# directory) against 127.0.0.1 after an unrecorded warm-up, each sweep's JSON to $OUT/CASE.SHAPE.json (at most SWEEP_S seconds each).
# STOP_AT (a grep -e pattern) stops each case at another line instead: "load_model left" keeps only the load.
# A case with a RUN/env/CASE.env file (KEY=VALUE a line) starts its server with those variables set.
budget=$1; shift
run=${RUN:-$(cd "$(dirname "$0")" && pwd)}
repo=${REPO:-$PWD}
LOADTEST='import argparse, sys
from glm_operator.commands import loadtest
parser = argparse.ArgumentParser(prog="loadtest")
loadtest.register(parser.add_subparsers())
sys.exit(loadtest.run(parser.parse_args(["loadtest", *sys.argv[1:]])))'
export PYTHONPATH=${SITE:-/tmp/site} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export VLLM_CACHE_ROOT=/tmp/vllm-cache VLLM_DEEP_GEMM_WARMUP=skip PYTHONUNBUFFERED=1
# the profiling run's peak, allocation by allocation (memtrace/gpu_truth_memtrace.py: a vLLM plugin)
[ "${MEMTRACE:-1}" = 1 ] && export PYTHONPATH=$PYTHONPATH:$run/memtrace
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
mkdir -p /tmp/vlogs "${OUT:-/tmp/out}"
end=$(( $(date +%s) + budget ))
for name in "$@"; do
  left=$(( end - $(date +%s) ))
  need=${MIN_CASE_S:-150}; perf=$run/perf/$name
  [ -f "$perf" ] && need=$(( need + 90 ))
  if [ "$left" -lt "$need" ]; then echo "== $name: skipped ($left s left)"; continue; fi
  lim=$(( left - 15 )); [ "$lim" -gt "${LIM:-480}" ] && lim=${LIM:-480}
  mapfile -t args < "$run/argv/$name.args"
  envs=(); [ -f "$run/env/$name.env" ] && mapfile -t envs < "$run/env/$name.env"  # KEY=VALUE a line
  log=/tmp/vlogs/$name.log; t0=$(date +%s)
  setsid env "${envs[@]}" python3 -m vllm.entrypoints.cli.main serve "${args[@]}" >"$log" 2>&1 &
  pid=$!
  while sleep 2; do
    if [ -f "$perf" ]; then grep -q "Application startup complete" "$log" && break
    else grep -q "${STOP_AT:-Actual usage is\|Application startup complete}" "$log" && { sleep 2; break; }; fi
    kill -0 $pid 2>/dev/null || break
    [ $(( $(date +%s) - t0 )) -gt "$lim" ] && { echo "run_cases: $name: no start-up in $lim s" >>"$log"; break; }
  done
  if [ -f "$perf" ] && grep -q "Application startup complete" "$log"; then
    port=$(grep -A1 -x -- --port "$run/argv/$name.args" | tail -1)
    model=$(grep -A1 -x -- --served-model-name "$run/argv/$name.args" | tail -1)
    # warm-up (not recorded): the first requests pay for lazy kernel set-up and would skew level 1
    PYTHONPATH=$PYTHONPATH:$repo/operator timeout 60 python3 -c "$LOADTEST" --url "http://127.0.0.1:$port" \
      --model "$model" --token-ids --input-tokens 512 --output-tokens 16 --concurrency 1,8 \
      --requests-per-worker 1 -o json >/dev/null 2>>"$log"
    while read -r shape sweep; do
      left=$(( end - $(date +%s) - 20 )); [ "$left" -gt "${SWEEP_S:-150}" ] && left=${SWEEP_S:-150}
      [ "$left" -lt 20 ] && { echo "== $name $shape: no time left"; break; }
      t1=$(date +%s)
      # shellcheck disable=SC2086
      # the loadtest command alone: the CLI's other commands need packages the device lacks (prometheus-api-client)
      PYTHONPATH=$PYTHONPATH:$repo/operator timeout "$left" python3 -c "$LOADTEST" \
        --url "http://127.0.0.1:$port" --model "$model" --token-ids -o json $sweep \
        > "${OUT:-/tmp/out}/$name.$shape.json" 2>>"$log"
      echo "== $name $shape: rc $? in $(( $(date +%s) - t1 )) s"
    done < "$perf"
  fi
  kill -TERM -- -$pid 2>/dev/null; sleep 3; kill -KILL -- -$pid 2>/dev/null; wait $pid 2>/dev/null
  for _ in 1 2 3 4 5 6 7 8 9 10; do  # the next case's snapshot needs the GPU empty again
    used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    [ "${used:-0}" -lt 1024 ] && break; sleep 2
  done
  echo "== $name: $(( $(date +%s) - t0 )) s"
  grep -E "Using V2 Model Runner|Model loading took|Available KV cache|GPU KV cache size|Maximum concurrency|Estimated CUDA graph|Actual usage is|Error|error:" "$log" | cut -c1-300 | tail -8
  gzip -c "$log" > "${OUT:-/tmp/out}/$name.log.gz"
done
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader

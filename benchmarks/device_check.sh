#!/usr/bin/env bash
# One-shot GPU check of the batched pursuit env, batched evaluation and packed runs (their CUDA numbers): run as
# ONE device `run` call, carry: [".whl"], in <= 8 minutes.
#
#   run(command="bash benchmarks/device_check.sh", carry=[".whl"], timeout_s=540)
#   DEVICE_CHECK_CPU=1 OUT=/tmp/dc bash benchmarks/device_check.sh     # dry run here: tiny sizes, CPU only
#
# Steps, each under its own `timeout` (capped by what is left of DEVICE_CHECK_BUDGET seconds, so the whole
# script ends in time however a step behaves), output tee'd to $OUT, so a step that fails or hangs loses
# nothing of the others:
#   1. install the carried wheels (.whl/, scripts/fetch_device_wheels.sh) into /tmp/site; PYTHONPATH = it + repo
#   2. facts: nvidia-smi, torch / CUDA versions and device properties
#   3. the gpu-marked tests that need no Ray (test_vec_pursuit, test_packed, test_relay, test_torch_per)
#   4. benchmarks/packed.py on CUDA, packed only, R = 1, 39, 8 (39 = the paper grid's pursuit column; the
#      packed-runs target is >= 30,000 aggregate training env-steps/s), one process per R; a GPU-utilisation
#      trace beside it; then --host-overhead at R = 1, 8, 39 (the pack's per-step work besides arithmetic, ms
#      per pack step)
#   5. benchmarks/envs.py, pursuit rows only: VecPursuitEnv at E = 1, 16, 256, 4096 on CUDA
#   6. benchmarks/eval_batch.py: 20 x 500-step pursuit episodes, sequential (CPU) vs batched on CUDA
#   7. with what is left: benchmarks/packed.py on the machine's CPUs, R = 8 packed vs 8 separate processes (a
#      measured point for docs/performance.md's 16-core line; the dev machine has 2 cores)
# Files in $OUT (the device returns at most 8): steps.txt (step, exit code, seconds), facts.txt, tests.txt,
# packed.txt, envs.txt, eval.txt, gpu_util.csv, results.json (the benchmarks' JSON rows, merged).
#
# DEVICE_CHECK_CPU=1: the same command lines at tiny sizes on CPU (CUDA steps run on cpu; the gpu tests are
# collected and skip), the wheels installed for cp312 into a scratch folder only (this machine's python is
# not the device's), and ray, wandb, magent2, supersuit blocked by a sitecustomize, as on the device image:
# an import of one of them on these code paths fails here as it would there.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/device_check_out}"
mkdir -p "$OUT"
CPU="${DEVICE_CHECK_CPU:-0}"
BUDGET="${DEVICE_CHECK_BUDGET:-450}"      # seconds for everything; the run call's timeout_s should exceed it
PY="${PYTHON:-python3}"
T0=$(date +%s)
SCRATCH="$(mktemp -d /tmp/device_check.XXXXXX)"
export PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled WANDB_MODE=disabled WANDB_SILENT=true MPLBACKEND=Agg
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
: >"$OUT/steps.txt"

if [ "$CPU" = 1 ]; then
  DEV=cpu
  PACK_STEPS="${PACK_STEPS:-80}"; PACK_RUNS="${PACK_RUNS:-1 3 2}"; PACK_HIDDENS="${PACK_HIDDENS:-32}"
  ENV_ARGS="--seconds 0.3 --sizes 1,16"; EVAL_ARGS="--episodes 2 --horizon 10"
  CPU_PACK_ARGS="--runs 2 --steps 80 --hiddens 32"
  HOST_ARGS="--runs 1 2 --steps 60"
else
  DEV=cuda
  PACK_STEPS="${PACK_STEPS:-2000}"; PACK_RUNS="${PACK_RUNS:-1 39 8}"; PACK_HIDDENS="${PACK_HIDDENS:-256}"
  ENV_ARGS="--seconds 3 --sizes 1,16,256,4096"; EVAL_ARGS="--episodes 20 --horizon 500"
  CPU_PACK_ARGS="--runs 8 --steps 400 --hiddens 256"
  HOST_ARGS="--runs 1 8 39 --steps 200"
fi

# step NAME CAP_SECONDS LOGFILE CMD...: run CMD under timeout min(CAP, budget left), append its output to
# $OUT/LOGFILE, record "NAME rc seconds" in steps.txt (rc 124/137: timed out); never stops the script.
step() {
  local name=$1 cap=$2 log=$3; shift 3
  local left=$(( BUDGET - ($(date +%s) - T0) ))
  local t=$(( cap < left ? cap : left ))
  if [ "$t" -lt 5 ]; then
    echo "$name skipped (budget spent)" | tee -a "$OUT/steps.txt"; return
  fi
  echo "=== $name (timeout ${t}s): $*" >>"$OUT/$log"
  local s; s=$(date +%s)
  timeout --kill-after=5 "$t" "$@" >>"$OUT/$log" 2>&1
  local rc=$?
  echo "$name rc=$rc ${t}s-cap $(( $(date +%s) - s ))s" | tee -a "$OUT/steps.txt"
}

# ---- 1. wheels
if [ "$CPU" = 1 ]; then
  step wheels 60 facts.txt "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --target "$SCRATCH/site" .whl/*.whl
  # the device image lacks these; block them so that an import on these code paths fails here too
  mkdir -p "$SCRATCH/block"
  cat >"$SCRATCH/block/sitecustomize.py" <<'EOF'
import sys
for _name in ("ray", "wandb", "magent2", "supersuit"):
    sys.modules[_name] = None  # import raises ImportError, as where the package is not installed
EOF
  export PYTHONPATH="$SCRATCH/block:$ROOT"
else
  step wheels 60 facts.txt "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$ROOT"
fi

# ---- 2. facts
step nvidia-smi 20 facts.txt nvidia-smi
step torch-facts 60 facts.txt "$PY" - <<'EOF'
import os, platform, sys, time
import torch
print("python", sys.version.split()[0], sys.executable, "| cpus", os.cpu_count(), "|", platform.processor() or platform.machine())
print("torch", torch.__version__, "| cuda", torch.version.cuda, "| available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, "| capability", f"{p.major}.{p.minor}", "| SMs", p.multi_processor_count,
          "| memory", f"{p.total_memory / 2**30:.1f} GiB")
    x = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize(); t = time.perf_counter(); y = x @ x; torch.cuda.synchronize()
    print(f"first fp32 4096^3 matmul {time.perf_counter() - t:.3f} s (includes start-up)")
for name in ("numpy", "scipy", "pettingzoo", "gymnasium", "pygame", "yaml", "typer", "safetensors", "ray", "wandb", "magent2"):
    try:
        m = __import__(name)
        print(f"{name} {getattr(m, '__version__', '?')}")
    except Exception as exc:  # absent on the device image: not needed by these steps
        print(f"{name} missing ({type(exc).__name__})")
import suPER.native.packed, suPER.envs.vec_pursuit  # the code paths below
print("import suPER.native.packed, suPER.envs.vec_pursuit: ok")
EOF

# ---- 3. gpu-marked tests (tests/core/test_trainers.py's needs Ray: not run)
step gpu-tests 120 tests.txt "$PY" -m pytest -m gpu -o cache_dir="$SCRATCH/pytest" -q -rA \
  tests/envs/test_vec_pursuit.py tests/native/test_packed.py tests/core/test_relay.py tests/replay/test_torch_per.py

# ---- 4. packed runs (target at R = 39: >= 30,000 aggregate env-steps/s); GPU utilisation each second beside them
UTIL_PID=""
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw,clocks.sm --format=csv -l 1 \
    >"$OUT/gpu_util.csv" 2>&1 &
  UTIL_PID=$!
fi
for r in $PACK_RUNS; do
  # big packs: half the steps per run (still >= 250 updates in the window) and a longer cap; the rate so far is
  # printed every 15 s, so a pack stopped by its timeout still leaves a number
  cap=60 steps=$PACK_STEPS
  [ "$r" -ge 32 ] && cap=150 steps=$(( PACK_STEPS / 2 ))
  step "packed-R$r" "$cap" packed.txt "$PY" benchmarks/packed.py --devices "$DEV" --packed-only --runs "$r" \
    --steps "$steps" --hiddens "$PACK_HIDDENS" --progress-every 15 --json "$SCRATCH/packed_R$r.json"
done
[ -n "$UTIL_PID" ] && kill "$UTIL_PID" 2>/dev/null
# the same packs' work besides arithmetic (nearly free network, device replay and relay): ms per pack step
# shellcheck disable=SC2086
step packed-host 90 packed.txt "$PY" benchmarks/packed.py --devices "$DEV" --host-overhead $HOST_ARGS \
  --json "$SCRATCH/packed_host.json"

# ---- 5. VecPursuitEnv rows on the device; the CPU single game stays as the reference row
# shellcheck disable=SC2086
step envs 90 envs.txt "$PY" benchmarks/envs.py --only pursuit --devices "$DEV" $ENV_ARGS --json "$SCRATCH/envs.json"

# ---- 6. batched evaluation on the device vs sequential on CPU
# shellcheck disable=SC2086
step eval 90 eval.txt "$PY" benchmarks/eval_batch.py --device "$DEV" --envs pursuit --run-steps 0 $EVAL_ARGS

# ---- 7. CPU pack vs separate processes on this machine's cores (last: it gets what the budget has left)
# shellcheck disable=SC2086
step cpu-packed 120 packed.txt "$PY" benchmarks/packed.py --devices cpu $CPU_PACK_ARGS --json "$SCRATCH/packed_cpu.json"

# ---- merge the JSON rows into one file
"$PY" - "$SCRATCH" "$OUT/results.json" <<'EOF'
import json, pathlib, sys
src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
merged = {p.stem: json.loads(p.read_text()) for p in sorted(src.glob("*.json"))}
out.write_text(json.dumps(merged, indent=1))
print(f"results.json: {', '.join(merged) or 'nothing'}")
EOF
rm -rf "$SCRATCH"
echo "total $(( $(date +%s) - T0 ))s (budget ${BUDGET}s); files in $OUT: $(ls "$OUT" | tr '\n' ' ')" | tee -a "$OUT/steps.txt"
grep -h "aggregate throughput\|eval speedup\|passed\|failed\|error" "$OUT"/packed.txt "$OUT"/eval.txt "$OUT"/tests.txt 2>/dev/null | tail -n 20

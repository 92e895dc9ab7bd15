"""Where an embedded engine's start-up goes, before and after our CPU
defaults, side by side in one run: each start in a fresh Python process
(nothing imported or cached in memory), timed from outside and split with
vLLM's own log lines (weights loaded, model loaded, profile + KV cache +
warm-up). "vLLM defaults" undoes ``cpu_defaults`` as far as an engine still
starts: compiled mode and 128-token blocks (vLLM's own KV sizing, a share of
the NUMA node's memory, fails to start here; ``kv_cache_memory_bytes`` stays).

Run: ``python bench/startup.py [--repeats 2]``; writes
``bench/results/startup.json`` and ``.md`` with the CPU, capability and dtype.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {
    # vLLM's own KV sizing (a memory share of the NUMA node, found by profiling) fails to
    # start on these 2-core / 24 GiB machines, so "before" keeps our explicit KV cache size
    "vLLM defaults (before)": {"enforce_eager": False, "block_size": None},
    "llm_label_clf defaults (after)": {},
}

#: what the child runs: phases timed from inside, vLLM's INFO log on stderr
CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import llm_label_clf
from llm_label_clf.engines.local import get_engine, engine_settings
t1 = time.perf_counter()
with __import__("warnings").catch_warnings():
    __import__("warnings").simplefilter("ignore")
    import vllm
t2 = time.perf_counter()
options = json.loads(sys.argv[1])
engine = get_engine(engine_options=options).start()
t3 = time.perf_counter()
from llm_label_clf.engines.loop import run_sync
from llm_label_clf.reading.batches import read_label_logprobs
run_sync(read_label_logprobs(engine, [engine.tokenizer.encode("Text: fine\nLabel:")], [3]))
t4 = time.perf_counter()
print("PHASES " + json.dumps({"import_package_s": t1 - t0, "import_vllm_s": t2 - t1, "engine_start_s": t3 - t2,
                              "first_read_s": t4 - t3, "settings": engine.settings}, default=str))
"""

PATTERNS = {
    "load_weights_s": r"Loading weights took ([\d.]+) seconds",
    "model_loading_s": r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) seconds",
    "profile_kv_warmup_s": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s",
    "compile_s": r"init engine .* took [\d.]+ s \(compilation: ([\d.]+) s",
}


def start_once(options: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "LLM_LABEL_CLF_ENGINE_LOGS": "1", "VLLM_LOGGING_LEVEL": "INFO"}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(options)], capture_output=True, text=True,
                          env=env, cwd=ROOT, check=False, timeout=900)
    text = done.stdout + done.stderr
    phases = next((json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("PHASES ")), None)
    if phases is None:
        return {"error": text[-3000:]}
    for key, pattern in PATTERNS.items():
        found = re.findall(pattern, text)
        phases[key] = float(found[-1]) if found else None
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from bench.report import machine

    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    for r in range(args.repeats):  # interleaved, so both see the same machine state
        for name, options in VARIANTS.items():
            runs[name].append(start_once(options))
            print(name, r, json.dumps(runs[name][-1])[:400], flush=True)
    keys = ["import_package_s", "import_vllm_s", "engine_start_s", "load_weights_s", "model_loading_s",
            "compile_s", "profile_kv_warmup_s", "first_read_s"]

    def median(name: str, key: str) -> float | None:
        values = [run[key] for run in runs[name] if run.get(key) is not None]
        return statistics.median(values) if values else None

    doc = {"machine": machine(), "repeats": args.repeats, "runs": runs,
           "median": {name: {k: median(name, k) for k in keys} for name in VARIANTS}}
    m = doc["machine"]
    dtype = next((run["settings"].get("dtype") for run in runs["llm_label_clf defaults (after)"] if "settings" in run),
                 "?")
    lines = [
        f"# Engine start-up on {m['cpu_model']} ({m['cpu_capability']}, {m['cores_usable']} cores), dtype {dtype}, "
        f"median of {args.repeats} fresh processes",
        "",
        "| phase (s) | " + " | ".join(VARIANTS) + " |",
        "|---|" + "---:|" * len(VARIANTS),
    ]
    for key in keys:
        cells = [doc["median"][name][key] for name in VARIANTS]
        lines.append(f"| {key} | " + " | ".join("-" if c is None else f"{c:.1f}" for c in cells) + " |")
    (ROOT / "bench" / "results" / "startup.json").write_text(json.dumps(doc, indent=1, default=str))
    (ROOT / "bench" / "results" / "startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

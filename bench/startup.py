"""Where an embedded engine's start-up goes, before and after our CPU
defaults: each start in a fresh Python process, timed from outside and split
with vLLM's own log lines (weights loaded, model loaded, profile + KV cache +
warm-up). "vLLM defaults" undoes ``cpu_defaults`` as far as an engine still
starts: compiled mode and 128-token blocks (vLLM's own KV sizing fails to
start on a small machine, so ``kv_cache_memory_bytes`` stays).

Run: ``python bench/startup.py [--repeats 2]``; writes
``bench/results/startup.json`` and ``.md``.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

VARIANTS = {
    "vLLM defaults (before)": {"enforce_eager": False, "block_size": None},
    "llm_label_clf defaults (after)": {},
}
KEYS = ["import_package_s", "import_vllm_s", "engine_start_s", "load_weights_s", "model_loading_s", "compile_s",
        "profile_kv_warmup_s", "first_read_s"]

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
                          env=env, cwd=common.ROOT, check=False, timeout=900)
    text = done.stdout + done.stderr
    phases = next((json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("PHASES ")), None)
    if phases is None:
        return {"error": text[-3000:]}
    for key, pattern in PATTERNS.items():
        found = re.findall(pattern, text)
        phases[key] = float(found[-1]) if found else None
    return phases


def markdown(doc: dict[str, Any]) -> str:
    m, variants = doc["machine"], list(doc["median"])
    dtype = next((run["settings"].get("dtype") for run in doc["runs"][variants[-1]] if "settings" in run), "?")
    lines = [
        f"# Engine start-up on {m['cpu_model']} ({m['cpu_capability']}, {m['cores_usable']} cores), dtype {dtype}, "
        f"median of {doc['repeats']} fresh processes",
        "",
        "| phase (s) | " + " | ".join(variants) + " |",
        "|---|" + "---:|" * len(variants),
    ]
    for key in KEYS:
        cells = [doc["median"][name][key] for name in variants]
        lines.append(f"| {key} | " + " | ".join("-" if c is None else f"{c:.1f}" for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    args = common.arguments(__doc__, markdown, "startup", repeats=2)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    for r in range(args.repeats):  # interleaved, so both see the same machine state
        for name, options in VARIANTS.items():
            runs[name].append(start_once(options))
            print(name, r, json.dumps(runs[name][-1])[:400], flush=True)

    def median(name: str, key: str) -> float | None:
        values = [run[key] for run in runs[name] if run.get(key) is not None]
        return statistics.median(values) if values else None

    doc = {"machine": common.machine(), "repeats": args.repeats, "runs": runs,
           "median": {name: {k: median(name, k) for k in KEYS} for name in VARIANTS}}
    print(common.write("startup", doc, markdown))


if __name__ == "__main__":
    main()

"""The engine's dtype on this CPU, side by side in one run: the default choice
(``engine_options`` without ``dtype``), float32 and bfloat16, each on a fresh
engine: start-up plus fit, then texts/s over the same SST-2 texts (distinct
per pass, so the prefix cache does not help) and accuracy. The engines run
in two rounds, in order and then in reverse (A B C C B A), and each figure is
the median over both rounds, so the first engine of the run (cold caches,
the machine settling) is not mistaken for a slower dtype. Reports the
default's throughput as a share of the best dtype's, with the CPU, its
capability and the settings each engine ran with.

To approximate an AVX2-only CPU on one with AVX-512, run it under
``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` (torch's and oneDNN's
kernels are then capped at AVX2; the default choice honours the oneDNN cap).

Run: ``python bench/dtypes.py [--texts N] [--passes P] [--tag NAME]``; writes
``bench/results/dtypes[-NAME].json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPT = "Review: {text}\nSentiment:"
INSTRUCTIONS = "Classify the sentiment of each movie review."


def run(engine_options: dict | None, texts: list[str], y, passes: int) -> dict:
    from llm_label_clf import LLMLabelClassifier, shutdown_engines

    began = time.perf_counter()
    clf = LLMLabelClassifier(prompt=PROMPT, instructions=INSTRUCTIONS, progress=False, engine_options=engine_options)
    clf.fit(texts[:8], y[:8])
    start_s = time.perf_counter() - began
    clf.predict_proba(texts[:16])  # warm-up
    rates, accuracy = [], []
    for p in range(passes):
        batch = [f"({p}) {t}" for t in texts]
        began = time.perf_counter()
        proba = clf.predict_proba(batch)
        rates.append(len(texts) / (time.perf_counter() - began))
        accuracy.append(float((clf.classes_[proba.argmax(axis=1)] == y).mean()))
    settings = clf._engine().settings
    shutdown_engines()
    return {"engine_options": engine_options, "settings": settings, "start_and_fit_s": start_s,
            "texts_per_s": rates, "median_texts_per_s": statistics.median(rates), "accuracy": accuracy[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    import pandas as pd
    import torch

    from bench.report import machine

    from llm_label_clf.engines.hardware import choose_cpu_dtype, cpu_info
    from llm_label_clf.testing import datasets_dir

    frame = pd.read_csv(datasets_dir() / "sst2_dev.csv").iloc[: args.texts]
    texts, y = frame["text"].tolist(), frame["label"].to_numpy()
    cpu = cpu_info()
    chosen, why = choose_cpu_dtype(cpu)
    contenders = (("default", None), ("float32", {"dtype": "float32"}), ("bfloat16", {"dtype": "bfloat16"}))
    rounds: dict[str, list[dict]] = {name: [] for name, _ in contenders}
    for order in (contenders, contenders[::-1]):
        for name, options in order:
            r = run(options, texts, y, args.passes)
            rounds[name].append(r)
            print(f"{name}: {r['median_texts_per_s']:.1f} texts/s, start+fit {r['start_and_fit_s']:.1f} s, "
                  f"accuracy {r['accuracy']:.3f}, dtype {r['settings'].get('dtype')}", flush=True)
    results = {
        name: {**runs[0], "texts_per_s": [x for r in runs for x in r["texts_per_s"]],
               "median_texts_per_s": statistics.median(x for r in runs for x in r["texts_per_s"]),
               "start_and_fit_s": statistics.median(r["start_and_fit_s"] for r in runs)}
        for name, runs in rounds.items()
    }
    best = max(r["median_texts_per_s"] for r in results.values())
    env = {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA") if k in os.environ}
    document = {
        "machine": {**machine(), "cpu_capability": cpu.capability, "native_bf16": cpu.native_bf16,
                    "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "caps": env},
        "default_choice": {"dtype": chosen, "why": why},
        "texts": len(texts),
        "results": results,
        "default_share_of_best": results["default"]["median_texts_per_s"] / best,
    }
    suffix = f"-{args.tag}" if args.tag else ""
    out = ROOT / "bench" / "results"
    (out / f"dtypes{suffix}.json").write_text(json.dumps(document, indent=1, default=str))
    m = document["machine"]
    lines = [
        f"# dtype on {m['cpu_model']} ({m['cpu_capability']}{', capped by ' + str(env) if env else ''}; torch "
        f"{m['torch_cpu_capability']}; {m['cores_usable']} cores), {len(texts)} SST-2 texts",
        "",
        f"Default choice: {chosen} ({why}). Default / best: {document['default_share_of_best']:.2f}.",
        f"Each figure: the median of {2 * args.passes} passes, over two rounds of fresh engines (in order, then "
        f"reversed); load average {os.getloadavg()[0]:.1f} at the end.",
        "",
        "| engine | dtype ran | texts/s (median) | start + fit (s) | accuracy |",
        "|---|---|---:|---:|---:|",
    ]
    for name, r in results.items():
        lines.append(f"| {name} | {r['settings'].get('dtype')} | {r['median_texts_per_s']:.1f} | "
                     f"{r['start_and_fit_s']:.1f} | {r['accuracy']:.3f} |")
    (out / f"dtypes{suffix}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""The engine's dtype on this CPU: the default choice, float32 and bfloat16,
each on a fresh engine (start-up plus fit, then texts/s over the same SST-2
texts, distinct per pass, and accuracy), in two rounds (A B C C B A), each
figure the median over both. Reports the default's share of the best dtype's
throughput. Under ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` an
AVX-512 CPU approximates an AVX2-only one.

Run: ``python bench/dtypes.py [--texts N] [--passes P] [--tag NAME]``; writes
``bench/results/dtypes[-NAME].json`` and ``.md``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402


def run(engine_options: dict | None, texts: list[str], y, passes: int) -> dict:
    """A fresh engine with ``engine_options``: start-up and fit, then ``passes`` timed passes."""
    from bench.contenders import tagged_pass

    from llm_label_clf import LLMLabelClassifier, shutdown_engines

    began = time.perf_counter()
    clf = LLMLabelClassifier(prompt=common.DEMO_PROMPT, instructions=common.DEMO_INSTRUCTIONS, progress=False,
                             engine_options=engine_options)
    clf.fit(texts[:8], y[:8])
    start_s = time.perf_counter() - began
    clf.predict_proba(texts[:16])  # warm-up
    rates, accuracy = zip(*(tagged_pass(clf, texts, y, p) for p in range(passes)), strict=True)
    settings = clf._engine().settings
    shutdown_engines()
    return {"engine_options": engine_options, "settings": settings, "start_and_fit_s": start_s,
            "texts_per_s": list(rates), "median_texts_per_s": statistics.median(rates), "accuracy": accuracy[0]}


def markdown(doc: dict[str, Any]) -> str:
    m, runs, choice = doc["machine"], doc["results"], doc["default_choice"]
    end = doc.get("load_avg_end")
    lines = [
        f"# dtype on {m['cpu_model']} ({m['cpu_capability']}{', capped by ' + str(m['caps']) if m['caps'] else ''}; "
        f"torch {m['torch_cpu_capability']}; {m['cores_usable']} cores), {doc['texts']} SST-2 texts",
        "",
        f"Default choice: {choice['dtype']} ({choice['why']}). Default / best: {doc['default_share_of_best']:.2f}.",
        f"Each figure: the median of {len(runs['default']['texts_per_s'])} passes, over two rounds of fresh engines "
        f"(in order, then reversed); load average {'not recorded' if end is None else f'{end:.1f}'} at the end.",
        "",
        "| engine | dtype ran | texts/s (median) | start + fit (s) | accuracy |",
        "|---|---|---:|---:|---:|",
    ]
    for name, r in runs.items():
        lines.append(f"| {name} | {r['settings'].get('dtype')} | {r['median_texts_per_s']:.1f} | "
                     f"{r['start_and_fit_s']:.1f} | {r['accuracy']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    args = common.arguments(__doc__, markdown, lambda a: "dtypes" + (f"-{a.tag}" if a.tag else ""), texts=200, passes=2,
                             tag="")
    import torch

    from llm_label_clf.engines.hardware import choose_cpu_dtype, cpu_info

    frame = common.csv("sst2_dev.csv").iloc[: args.texts]
    texts, y = frame["text"].tolist(), frame["label"].to_numpy()
    cpu = cpu_info()
    chosen, why = choose_cpu_dtype(cpu)
    doc = common.record(dtype=f"{chosen} (default), float32, bfloat16", default_choice={"dtype": chosen, "why": why},
                         texts=len(texts))
    caps = {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA") if k in os.environ}
    doc["machine"].update(native_bf16=cpu.native_bf16, caps=caps,
                          torch_cpu_capability=torch.backends.cpu.get_cpu_capability())
    contenders = (("default", None), ("float32", {"dtype": "float32"}), ("bfloat16", {"dtype": "bfloat16"}))
    rounds: dict[str, list[dict]] = {name: [] for name, _ in contenders}
    for order in (contenders, contenders[::-1]):
        for label, options in order:
            r = run(options, texts, y, args.passes)
            rounds[label].append(r)
            print(f"{label}: {r['median_texts_per_s']:.1f} texts/s, start+fit {r['start_and_fit_s']:.1f} s, "
                  f"accuracy {r['accuracy']:.3f}, dtype {r['settings'].get('dtype')}", flush=True)
    doc["results"] = {
        label: {**runs[0], "texts_per_s": [x for r in runs for x in r["texts_per_s"]],
                "median_texts_per_s": statistics.median(x for r in runs for x in r["texts_per_s"]),
                "start_and_fit_s": statistics.median(r["start_and_fit_s"] for r in runs)}
        for label, runs in rounds.items()
    }
    best = max(r["median_texts_per_s"] for r in doc["results"].values())
    doc["default_share_of_best"] = doc["results"]["default"]["median_texts_per_s"] / best
    print(common.write(args.name, doc, markdown))


if __name__ == "__main__":
    main()

"""The CPU engine knobs, each on a fresh engine: our defaults against one knob
changed at a time (vLLM's thread binding, its 128-token KV blocks, a larger
``max_num_batched_tokens``) and the estimator's ``batch_size``, on SST-2
zero-shot and with 4 few-shot examples per class (a long shared prefix). The
prefix cache is emptied before each timed pass; texts differ per pass.

Run under each dtype a CPU kind would get: ``python bench/knobs.py [--dtype
float32] [--texts N] [--tag T]``; writes ``bench/results/knobs[-T].json`` and ``.md``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"

#: name -> (engine options over the defaults, environment for the engine, estimator params)
VARIANTS: dict[str, tuple[dict[str, Any], dict[str, str], dict[str, Any]]] = {
    "defaults": ({}, {}, {}),
    "batch_size=64": ({}, {}, {"batch_size": 64}),
    "batch_size=2048": ({}, {}, {"batch_size": 2048}),
    "vLLM's thread binding": ({}, {BIND_ENV: "auto"}, {}),
    "block_size=128 (vLLM's)": ({"block_size": 128}, {}, {}),
    "max_num_batched_tokens=16384": ({"max_num_batched_tokens": 16384}, {}, {}),
}


def run(name: str, dtype: str | None, train: tuple[list[str], Any], test: tuple[list[str], Any],
        passes: int) -> dict[str, Any]:
    """Variant ``name`` on a fresh engine: start-up and fit, then cold passes zero-shot and few-shot."""
    from bench.contenders import tagged_pass

    from llm_label_clf import LLMLabelClassifier, shutdown_engines

    options, env, params = VARIANTS[name]
    options = {**options, **({"dtype": dtype} if dtype else {})}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        began = time.perf_counter()
        zero = LLMLabelClassifier(prompt=common.DEMO_PROMPT, instructions=common.DEMO_INSTRUCTIONS, progress=False,
                                  engine_options=options or None, **params).fit(*train)
        start_s = time.perf_counter() - began
        few = LLMLabelClassifier(prompt=common.DEMO_PROMPT, instructions=common.DEMO_INSTRUCTIONS, progress=False, few_shot=4,
                                 random_state=0, engine_options=options or None, **params).fit(*train)
        out: dict[str, Any] = {"engine_options": options, "env": env, "params": params, "start_and_fit_s": start_s}
        for label, clf in (("zero_shot", zero), ("few_shot_4", few)):
            clf.predict_proba(test[0][:8])  # warm-up
            rates = [tagged_pass(clf, test[0], test[1], f"{label}{p}", cold=True) for p in range(passes)]
            out[label] = {"median_texts_per_s": statistics.median(r for r, _ in rates),
                          "texts_per_s": [r for r, _ in rates], "accuracy": rates[0][1]}
        out["settings"] = zero._engine().settings
        return out
    finally:
        shutdown_engines()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def markdown(doc: dict[str, Any]) -> str:
    m, runs = doc["machine"], doc["results"]
    base = runs["defaults"]
    lines = [
        f"# CPU knobs on {m['cpu_model']} ({m['cpu_capability']}, {m['cores_usable']} cores), engine dtype "
        f"{base['settings'].get('dtype')}, {doc['texts']} SST-2 texts, median of "
        f"{len(base['zero_shot']['texts_per_s'])} cold passes",
        "",
        "| variant | zero-shot texts/s | vs defaults | few-shot (4/class) texts/s | vs defaults | start + fit (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in runs.items():
        z, f = r["zero_shot"]["median_texts_per_s"], r["few_shot_4"]["median_texts_per_s"]
        lines.append(
            f"| {name} | {z:.1f} | {z / base['zero_shot']['median_texts_per_s']:.2f} | {f:.1f} | "
            f"{f / base['few_shot_4']['median_texts_per_s']:.2f} | {r['start_and_fit_s']:.1f} |"
        )
    lines += ["", f"Default settings: `{json.dumps(base['settings'], sort_keys=True)}`"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--dtype", default=None, help="engine dtype (default: the package's choice for this CPU)")
    args = common.arguments(parser, markdown, lambda a: "knobs" + (f"-{a.tag}" if a.tag else ""), texts=200, passes=2,
                             tag="")
    frame = common.csv("sst2_dev.csv").sample(frac=1.0, random_state=0)
    train = (frame["text"].tolist()[:64], frame["label"].to_numpy()[:64])
    test = (frame["text"].tolist()[64 : 64 + args.texts], frame["label"].to_numpy()[64 : 64 + args.texts])
    doc = common.record(dtype=args.dtype, dtype_asked=args.dtype, texts=args.texts, results={})
    for variant in VARIANTS:
        r = doc["results"][variant] = run(variant, args.dtype, train, test, args.passes)
        print(f"{variant}: zero-shot {r['zero_shot']['median_texts_per_s']:.1f} texts/s, few-shot "
              f"{r['few_shot_4']['median_texts_per_s']:.1f} texts/s, start+fit {r['start_and_fit_s']:.1f} s",
              flush=True)
    doc["dtype"] = doc["results"]["defaults"]["settings"].get("dtype", doc["dtype"])
    print(common.write(args.name, doc, markdown))


if __name__ == "__main__":
    main()

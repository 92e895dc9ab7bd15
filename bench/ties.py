"""Exact ties in bf16 reads against float32, on SST-2 dev and Banking77: how
many texts have two or more classes at exactly the top probability, their
cost in accuracy (a plain argmax gives them to ``classes_[0]``; the
estimator's rule to the largest prior from fit), and whether the lm_head in
float32 under a bf16 engine (``hf_overrides={"head_dtype": "float32"}``)
removes them at bf16's speed. One engine after the other in this process;
prefix caches emptied before each timed pass.

Run: ``python bench/ties.py [--sst2 872] [--banking-per-intent 3]``; writes
``bench/results/ties.json`` and ``.md``.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

CONFIGS = {  # float32 first: the others are compared with it
    "float32": {"dtype": "float32"},
    "bfloat16": {"dtype": "bfloat16"},
    "bfloat16, float32 head": {"dtype": "bfloat16", "hf_overrides": {"head_dtype": "float32"}},
}


def sets(n_sst2: int, banking_per_intent: int, n_banking: int | None = None) -> list[common.Task]:
    sst = common.csv("sst2_dev.csv").head(n_sst2)
    bank = common.banking77(banking_per_intent)
    return [common.Task("sst2_dev", sst["text"].tolist(), sst["label"].to_numpy(), common.SST2_PROMPT, common.SST2_LABELS),
            bank.subset(n_banking) if n_banking else bank]


def run(task: Any, options: dict[str, Any]) -> dict[str, Any]:
    """One set on one engine configuration: log-probabilities, ties, accuracy by each rule, seconds."""
    from bench.contenders import empty_prefix_cache

    from llm_label_clf import LLMLabelClassifier
    from llm_label_clf.fitting.ties import argmax_breaking_ties

    clf = LLMLabelClassifier(prompt=task.prompt, labels=task.labels, engine_options=options, progress=False,
                             low_mass="ignore")
    if set(task.y) == set(task.labels):
        clf.fit(task.texts, task.y)  # fit reads nothing: the prior from y
    else:  # a capped set misses classes: zero-shot, every class, a uniform prior
        clf.fit(task.texts[:4])
    clf.predict_log_proba(task.texts[:4])  # warm-up
    empty_prefix_cache(options)
    began = time.perf_counter()
    log_proba = clf.predict_log_proba(task.texts)
    seconds = time.perf_counter() - began
    classes = clf.classes_
    index, tied = argmax_breaking_ties(log_proba, clf.outputs_[0].calibration.log_prior)
    first = np.argmax(log_proba, axis=1)
    return {
        "log_proba": log_proba,
        "tied": tied,
        "seconds_per_text": seconds / len(task.texts),
        "accuracy_first_class_rule": float((classes[first] == task.y).mean()),
        "accuracy_prior_rule": float((classes[index] == task.y).mean()),
        "label_mode": clf.label_mode_,
    }


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--banking-texts", type=int, default=None, help="cap Banking77 at N texts")
    args = common.arguments(parser, markdown, "ties", sst2=872, banking_per_intent=3)
    from bench.contenders import MODEL

    from llm_label_clf import engine_info, shutdown_engines

    doc = common.record(dtype=", ".join(CONFIGS), model=MODEL, rows=[])
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for name, options in CONFIGS.items():
        for task in sets(args.sst2, args.banking_per_intent, args.banking_texts):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    found[(task.name, name)] = out = run(task, options)
            except Exception as exc:  # e.g. a head dtype this vLLM refuses: say so in the table
                doc["rows"].append({"set": task.name, "engine": name, "error": f"{type(exc).__name__}: {exc}"[:500]})
                continue
            reference = found.get((task.name, "float32"))
            row = {"set": task.name, "engine": name, "texts": len(task.texts), "label_mode": out["label_mode"],
                   "tied_texts": int(out["tied"].sum()), "seconds_per_text": out["seconds_per_text"],
                   "accuracy_first_class_rule": out["accuracy_first_class_rule"],
                   "accuracy_prior_rule": out["accuracy_prior_rule"]}
            if reference is not None and name != "float32":
                ref = reference["log_proba"]
                row["argmax_equals_float32"] = float((out["log_proba"].argmax(1) == ref.argmax(1)).mean())
                row["max_abs_logp_vs_float32"] = float(np.abs(out["log_proba"] - ref).max())
                tied = out["tied"]
                if tied.any():  # the tied texts as float32 reads them
                    classes = np.array(sorted(task.labels))
                    row["tied_accuracy_float32"] = float((classes[ref[tied].argmax(1)] == task.y[tied]).mean())
            doc["rows"].append(row)
            print(row, flush=True)
        doc.setdefault("engines", []).extend(e["settings"] for e in engine_info()["engines"])
        shutdown_engines()
    print(common.write("ties", doc, markdown))


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        f"Run {doc['date']}, load average before {doc.get('load_before', doc.get('load_avg_start'))}; CPU "
        f"{m['cpu_model']} ({m['cpu_capability']}, {m['cores']} cores). Tied: two or more classes at exactly the top "
        "probability. The first-class rule is a plain argmax (the old behaviour); the prior rule is `predict`'s "
        "(largest class prior from fit, then the first class).",
        "",
        "| set | engine | texts | tied texts | acc. (first-class rule) | acc. (prior rule) | tied texts' acc. in "
        "float32 | argmax = float32 | s/text |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["rows"]:
        if "error" in r:
            lines.append(f"| {r['set']} | {r['engine']} | failed: {r['error']} |||||||")
            continue
        agree, tied_acc = r.get("argmax_equals_float32"), r.get("tied_accuracy_float32")
        lines.append(
            f"| {r['set']} | {r['engine']} | {r['texts']} | {r['tied_texts']} | {r['accuracy_first_class_rule']:.4f} "
            f"| {r['accuracy_prior_rule']:.4f} | {'-' if tied_acc is None else f'{tied_acc:.3f}'} | "
            f"{'-' if agree is None else f'{agree:.4f}'} | {r['seconds_per_text']:.4f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

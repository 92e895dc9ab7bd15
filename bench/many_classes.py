"""Many multi-token labels, side by side in one run: Banking77 (77 intents
written as words, 141 distinct label prefixes after the prompt) read by

- the estimator, exact (``prune_margin=None``: one read per prefix),
- the estimator, pruned (``prune_margin`` = 0, 2, 8 nats),
- raw ``vllm.LLM.generate`` reading the same trie (``bench.contenders.raw_reads``,
  the baselines' own trie), in its own process,
- skorch's ``ZeroShotClassifier`` (one forward pass per label), in its own
  process, on fewer texts,

each as cost per text against one read of an SST-2 text with the demo's
prompt (the yardstick of the issue that asked for this: "at most 20x a
one-read text"), plus, for the pruned reads, their error against the exact
read (max |p - p_exact| over all classes, and how often the argmax agrees).

Every engine runs with the package's defaults on this CPU (the dtype is
recorded). Prefix caches are emptied before each timed pass.

Run: ``python bench/many_classes.py [--texts 24] [--skorch-texts 3] [--sst2 96]``;
writes ``bench/results/many_classes.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
PROMPT = "Query: {text}\nIntent:"
SST2_PROMPT = "Review: {text}\nSentiment:"
SST2_INSTRUCTIONS = "Classify the sentiment of each movie review."
MARGINS = (0.0, 2.0, 8.0)


def banking(n: int) -> Any:
    """``n`` Banking77 test texts, one per intent first (seeded), as a bench Task."""
    import pandas as pd

    from bench.common import Task

    from llm_label_clf.testing import datasets_dir

    frame = pd.read_csv(datasets_dir() / "banking77_test.csv")
    labels = {c: c.replace("_", " ") for c in sorted(set(frame["label"]))}
    picked = frame.sample(frac=1.0, random_state=0).groupby("label").head(1).head(n)
    return Task("banking77", picked["text"].tolist(), picked["label"].to_numpy(), PROMPT, labels)


def _timed(fn: Any, before: Any) -> tuple[Any, float]:
    before()
    began = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - began


def ours(n_texts: int, n_sst2: int) -> dict[str, Any]:
    """The yardstick and the estimator's exact and pruned reads, in this process."""
    import pandas as pd
    from sklearn.metrics import accuracy_score

    from bench.contenders import empty_prefix_cache

    from llm_label_clf import LLMLabelClassifier, engine_info
    from llm_label_clf.testing import datasets_dir

    sst = pd.read_csv(datasets_dir() / "sst2_dev.csv").sample(n=n_sst2 + 16, random_state=0)
    yard = LLMLabelClassifier(prompt=SST2_PROMPT, instructions=SST2_INSTRUCTIONS, progress=False)
    yard.fit(sst["text"].tolist()[:16], sst["label"].to_numpy()[:16])
    yard.predict_proba(sst["text"].tolist()[:16])  # warm-up
    _, sst_s = _timed(lambda: yard.predict_proba(sst["text"].tolist()[16:]), empty_prefix_cache)
    one_read_s = sst_s / n_sst2

    task = banking(n_texts)
    rows: list[dict[str, Any]] = []
    exact_proba = None
    for margin in (None, *MARGINS):
        clf = LLMLabelClassifier(prompt=PROMPT, labels=task.labels, prune_margin=margin, progress=False,
                                 low_mass="ignore").fit(task.texts)
        clf.predict_proba(task.texts[:2])  # warm-up of this reading
        proba, seconds = _timed(lambda c=clf: c.predict_proba(task.texts), empty_prefix_cache)
        row = {
            "reader": "LLMLabelClassifier, exact" if margin is None else f"LLMLabelClassifier, prune_margin={margin:g}",
            "texts": len(task.texts),
            "seconds_per_text": seconds / len(task.texts),
            "cost_vs_one_read": seconds / len(task.texts) / one_read_s,
            "accuracy": float(accuracy_score(task.y, clf.classes_[proba.argmax(axis=1)])),
            "reads_per_text": len(clf.plans_[0].trie.reads) if margin is None else None,
        }
        if margin is None:
            exact_proba = proba
        else:
            row["max_abs_dp_vs_exact"] = float(np.abs(proba - exact_proba).max())
            row["argmax_agrees_with_exact"] = float((proba.argmax(1) == exact_proba.argmax(1)).mean())
        rows.append(row)
        print(json.dumps(row), flush=True)
    info = engine_info()
    return {"one_read_s": one_read_s, "sst2_texts": n_sst2, "rows": rows,
            "engine_settings": info["engines"][0]["settings"] if info["engines"] else None}


def contender(name: str, n_texts: int) -> dict[str, Any]:
    """One baseline in this (child) process: ``raw`` or ``skorch``."""
    from bench.common import Task, sizes
    from bench.contenders import RawVllm, Skorch

    task = banking(n_texts)
    cls = {"raw": RawVllm, "skorch": Skorch}[name]
    runner = cls(sizes(quick=True))
    runner.start()
    if name == "skorch":  # skorch learns its classes from y: fit it on every intent, not just these texts'
        every = Task(task.name, list(task.classes), task.classes, task.prompt, task.labels)
        runner._fit(every)
    runner.predict(task, task.texts[:1])  # warm-up
    out, seconds = _timed(lambda: runner.predict(task, task.texts), lambda: runner.reset(task))
    proba = out["proba"]
    pred = task.classes[np.asarray(proba).argmax(axis=1)]
    return {"reader": runner.name, "texts": len(task.texts), "seconds_per_text": seconds / len(task.texts),
            "accuracy": float((pred == task.y).mean()), "reads_per_text": out.get("reads_per_text")}


def _child(name: str, n_texts: int) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "--contender", name, "--texts", str(n_texts)],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"reader": name, "error": (done.stderr or done.stdout)[-2000:]}
    return json.loads(lines[-1])


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        f"Banking77, {doc['texts']} test texts (one per intent), prompt `{PROMPT!r}`, 77 intents as words; "
        f"yardstick: one read of an SST-2 text with the demo prompt = {doc['one_read_s'] * 1000:.1f} ms. "
        f"CPU {m['cpu_model']} ({m['cpu_capability']}, {m['cores']} cores), engine dtype "
        f"{(doc.get('engine_settings') or {}).get('dtype', '?')}.",
        "",
        "| reader | texts | reads/text | s/text | cost vs one SST-2 read | accuracy | max abs dp vs exact "
        "| argmax = exact |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["rows"]:
        if "error" in r:
            lines.append(f"| {r['reader']} | failed: {r['error'].splitlines()[-1] if r['error'] else '?'} |||||||")
            continue
        cost = r["seconds_per_text"] / doc["one_read_s"]
        dp = r.get("max_abs_dp_vs_exact")
        agree = r.get("argmax_agrees_with_exact")
        lines.append(
            f"| {r['reader']} | {r['texts']} | {r.get('reads_per_text') or '-'} | {r['seconds_per_text']:.2f} | "
            f"{cost:.0f}x | {r['accuracy']:.3f} | {'-' if dp is None else f'{dp:.3f}'} | "
            f"{'-' if agree is None else f'{agree:.2f}'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=24)
    parser.add_argument("--skorch-texts", type=int, default=3)
    parser.add_argument("--sst2", type=int, default=96)
    parser.add_argument("--contender", choices=["raw", "skorch"])
    parser.add_argument("--baselines-only", action="store_true",
                        help="keep the estimator's rows of the last run, measure the baselines again")
    args = parser.parse_args()
    if args.contender:
        print(json.dumps(contender(args.contender, args.texts)))
        return
    if args.baselines_only:
        doc = json.loads((RESULTS / "many_classes.json").read_text())
        doc["rows"] = [r for r in doc["rows"] if r["reader"].startswith("LLMLabelClassifier")]
        doc["rows"].append(_child("raw", doc["texts"]))
        doc["rows"].append(_child("skorch", args.skorch_texts))
        (RESULTS / "many_classes.json").write_text(json.dumps(doc, indent=2))
        (RESULTS / "many_classes.md").write_text(markdown(doc))
        print(markdown(doc))
        return
    from bench.report import machine

    doc = {"machine": machine(), "texts": args.texts, **ours(args.texts, args.sst2)}
    from llm_label_clf import shutdown_engines

    shutdown_engines()  # the baselines get the cores to themselves
    doc["rows"].append(_child("raw", args.texts))
    doc["rows"].append(_child("skorch", args.skorch_texts))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "many_classes.json").write_text(json.dumps(doc, indent=2))
    (RESULTS / "many_classes.md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()

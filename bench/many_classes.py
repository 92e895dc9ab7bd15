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
writes ``bench/results/many_classes.json`` and ``.md`` (``bench/results.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import results  # noqa: E402
from bench.common import BANKING_PROMPT, banking77, emit, run_child, timed_passes  # noqa: E402

NAME = "many_classes"
MARGINS = (0.0, 2.0, 8.0)


def ours(n_texts: int, n_sst2: int) -> dict[str, Any]:
    """The yardstick and the estimator's exact and pruned reads, in this process."""
    from sklearn.metrics import accuracy_score

    from bench.contenders import empty_prefix_cache, one_read_s

    from llm_label_clf import LLMLabelClassifier, engine_info

    one_read = one_read_s(n_sst2)
    task = banking77(1).subset(n_texts)
    rows: list[dict[str, Any]] = []
    exact_proba = None
    for margin in (None, *MARGINS):
        clf = LLMLabelClassifier(prompt=task.prompt, labels=task.labels, prune_margin=margin, progress=False,
                                 low_mass="ignore").fit(task.texts)
        clf.predict_proba(task.texts[:2])  # warm-up of this reading
        proba, (seconds,) = timed_passes(lambda c=clf: c.predict_proba(task.texts), 1, empty_prefix_cache)
        row = {
            "reader": "LLMLabelClassifier, exact" if margin is None else f"LLMLabelClassifier, prune_margin={margin:g}",
            "texts": len(task.texts),
            "seconds_per_text": seconds / len(task.texts),
            "cost_vs_one_read": seconds / len(task.texts) / one_read,
            "accuracy": float(accuracy_score(task.y, clf.classes_[proba.argmax(axis=1)])),
            "reads_per_text": len(clf.plans_[0].trie.reads) if margin is None else None,
        }
        if margin is None:
            exact_proba = proba
        else:
            row["max_abs_dp_vs_exact"] = float(np.abs(proba - exact_proba).max())
            row["argmax_agrees_with_exact"] = float((proba.argmax(1) == exact_proba.argmax(1)).mean())
        rows.append(row)
        print(row, flush=True)
    info = engine_info()
    return {"one_read_s": one_read, "sst2_texts": n_sst2, "rows": rows,
            "engine_settings": info["engines"][0]["settings"] if info["engines"] else None}


def contender(name: str, n_texts: int) -> dict[str, Any]:
    """One baseline in this (child) process: ``raw`` or ``skorch``."""
    from bench.common import Task, sizes
    from bench.contenders import RawVllm, Skorch

    task = banking77(1).subset(n_texts)
    runner = {"raw": RawVllm, "skorch": Skorch}[name](sizes(quick=True))
    runner.start()
    if name == "skorch":  # skorch learns its classes from y: fit it on every intent, not just these texts'
        every = Task(task.name, list(task.classes), task.classes, task.prompt, task.labels)
        runner._fit(every)
    runner.predict(task, task.texts[:1])  # warm-up
    out, (seconds,) = timed_passes(lambda: runner.predict(task, task.texts), 1, lambda: runner.reset(task))
    pred = task.classes[np.asarray(out["proba"]).argmax(axis=1)]
    return {"reader": runner.name, "texts": len(task.texts), "seconds_per_text": seconds / len(task.texts),
            "accuracy": float((pred == task.y).mean()), "reads_per_text": out.get("reads_per_text")}


def baseline(name: str, n_texts: int) -> dict[str, Any]:
    """``contender`` in a child process of its own; its error as a row where it fails."""
    try:
        return run_child([sys.executable, __file__, "--contender", name, "--texts", str(n_texts)]).message
    except RuntimeError as exc:
        return {"reader": name, "error": str(exc)[-2000:]}


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        f"Banking77, {doc['texts']} test texts (one per intent), prompt `{BANKING_PROMPT!r}`, 77 intents as words; "
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
    parser = results.parser(__doc__)
    parser.add_argument("--texts", type=int, default=24)
    parser.add_argument("--skorch-texts", type=int, default=3)
    parser.add_argument("--sst2", type=int, default=96)
    parser.add_argument("--contender", choices=["raw", "skorch"])
    parser.add_argument("--baselines-only", action="store_true",
                        help="keep the estimator's rows of the last run, measure the baselines again")
    args = results.arguments(parser, markdown, NAME)
    if args.contender:
        emit(contender(args.contender, args.texts))
        return
    if args.baselines_only:
        doc = results.load(NAME)
        doc["rows"] = [r for r in doc["rows"] if r["reader"].startswith("LLMLabelClassifier")]
    else:
        from llm_label_clf import shutdown_engines

        doc = results.record(texts=args.texts)
        doc.update(ours(args.texts, args.sst2))
        shutdown_engines()  # the baselines get the cores to themselves
    doc["rows"] += [baseline("raw", doc["texts"]), baseline("skorch", args.skorch_texts)]
    print(results.write(NAME, doc, markdown))


if __name__ == "__main__":
    main()

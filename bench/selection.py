"""What cross-validated selection buys, and what its fit costs: on each
dataset, 64 labelled training texts drawn at random and 300 other test texts,
the built-in model with the default prompt and the class names as labels;
every fixed mode a user could guess (zero-shot, few-shot, each calibration,
with the uniform prior of the papers and with the training labels' prior)
against ``LLMLabelClassifierCV`` with its defaults. Reports accuracy,
macro-F1 and log-loss on the test texts, and the cost of the CV fit as
engine reads per training text and as a multiple of one zero-shot pass over
the training texts (reads, and wall time measured in the same run).

Datasets: SST-2 (2 classes, balanced), SST-2 resampled to 15% positive (an
imbalanced binary task, as spam detection is), AG News (4, multi-token
labels), TREC (6 question types), emotion (6, imbalanced); Banking77 (77
intents, 141 reads per text) only when named with ``--datasets``. A TF-IDF +
LogisticRegression trained on the same texts is the non-LLM baseline. ECE is
the top-label expected calibration error over 10 equal-width bins.

Run: ``python bench/selection.py [--train 16 64 256] [--test 300]``; writes
``bench/results/selection.json`` and ``.md`` after each dataset.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

#: name -> (file, share of the positive class to resample to, or None)
DATASETS: dict[str, tuple[str, float | None]] = {
    "sst2": ("sst2_dev.csv", None),
    "sst2 15% positive": ("sst2_dev.csv", 0.15),
    "ag_news": ("agnews_test.csv", None),
    "trec": ("trec_test.csv", None),
    "emotion": ("emotion_val.csv", None),
    "banking77": ("banking77_test.csv", None),
}
#: Run unless ``--datasets`` names others: Banking77's 141 reads per text make
#: every fixed mode cost ~140 zero-shot passes over the test texts.
DEFAULT_DATASETS = ["sst2", "sst2 15% positive", "ag_news", "trec", "emotion"]
#: The fixed modes a user might guess, as estimator parameters.
FIXED: dict[str, dict[str, Any]] = {
    "zero-shot": {},
    "few_shot=4": {"few_shot": 4},
    "contextual (uniform prior)": {"calibration": "contextual", "calibration_prior": "uniform"},
    "contextual (prior from y)": {"calibration": "contextual"},
    "batch (uniform prior)": {"calibration": "batch", "calibration_prior": "uniform"},
    "batch (prior from y)": {"calibration": "batch"},
    "learned": {"calibration": "learned"},
    "learned, balanced": {"calibration": "learned", "class_weight": "balanced"},
    "few_shot=4 + batch (prior from y)": {"few_shot": 4, "calibration": "batch"},
}


def split(file: str, positive_share: float | None, n_train: int, n_test: int, seed: int = 0) -> tuple[Any, Any]:
    """A stratified random draw of ``n_train`` training texts and ``n_test``
    other test texts (stratified so every class the test texts hold is in
    the training labels, as a user's labelled sample would be)."""
    import pandas as pd
    from sklearn.model_selection import train_test_split

    from llm_label_clf.testing import datasets_dir

    frame = pd.read_csv(datasets_dir() / file).sample(frac=1.0, random_state=seed)
    if positive_share is not None:
        pos, neg = frame[frame["label"] == "positive"], frame[frame["label"] != "positive"]
        n_pos = int(round(len(neg) * positive_share / (1 - positive_share)))
        frame = pd.concat([pos.head(n_pos), neg]).sample(frac=1.0, random_state=seed)
    frame = frame.head(n_train + n_test)
    counts = frame["label"].value_counts()
    frame = frame[frame["label"].isin(counts[counts >= 2].index)]  # a class seen once cannot be on both sides
    train, test = train_test_split(frame, train_size=n_train, stratify=frame["label"], random_state=seed)
    return train, test


def expected_calibration_error(classes: np.ndarray, proba: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    """Top-label ECE: the gap between confidence and accuracy, averaged over
    10 equal-width confidence bins weighted by their share of texts."""
    confidence = proba.max(axis=1)
    correct = classes[proba.argmax(axis=1)] == y
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    return float(sum(abs(correct[which == b].mean() - confidence[which == b].mean()) * (which == b).mean()
                     for b in range(bins) if (which == b).any()))


def scores(classes: np.ndarray, proba: np.ndarray, y: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import accuracy_score, f1_score, log_loss

    pred = classes[proba.argmax(axis=1)]
    return {
        "accuracy": float(accuracy_score(y, pred)),
        "macro_f1": float(f1_score(y, pred, average="macro")),
        "log_loss": float(log_loss(y, np.clip(proba, 1e-12, 1), labels=classes)),
        "ece": expected_calibration_error(classes, proba, y),
    }


def tfidf_baseline(X: list[str], y: np.ndarray, Xt: list[str], yt: np.ndarray) -> dict[str, float]:
    """TF-IDF (word 1-2 grams) + LogisticRegression trained on the same texts."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    model = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
                          LogisticRegression(max_iter=2000)).fit(X, y)
    proba = np.zeros((len(Xt), len(np.unique(np.concatenate([y, yt])))))
    classes = np.unique(np.concatenate([y, yt]))
    proba[:, np.searchsorted(classes, model.classes_)] = model.predict_proba(Xt)
    return scores(classes, proba, yt)


def one_dataset(name: str, n_train: int, n_test: int) -> dict[str, Any]:
    from llm_label_clf import LLMLabelClassifier, LLMLabelClassifierCV
    from llm_label_clf.reading.cache import ReadCache

    file, share = DATASETS[name]
    train, test = split(file, share, n_train, n_test)
    X, y = train["text"].tolist(), train["label"].to_numpy()
    Xt, yt = test["text"].tolist(), test["label"].to_numpy()
    base = dict(progress=False, low_mass="ignore", random_state=0)
    rows: dict[str, Any] = {"train_classes": {str(k): int(v) for k, v in train["label"].value_counts().items()}}
    rows["TF-IDF + LogisticRegression"] = tfidf_baseline(X, y, Xt, yt)
    cache = ReadCache()
    with cache.active():  # fixed modes share reads of the same prompts (scores only; not timed)
        for label, params in FIXED.items():
            try:
                clf = LLMLabelClassifier(**base, **params).fit(X, y)
                rows[label] = scores(clf.classes_, clf.predict_proba(Xt), yt)
            except ValueError as exc:
                rows[label] = {"error": str(exc)}
            print(name, label, rows[label], flush=True)
    # the fit cost, timed: one zero-shot pass over the training texts, then the CV fit
    zero = LLMLabelClassifier(**base).fit(X, y)
    began = time.perf_counter()
    zero.predict_proba([f"{t} " for t in X])  # distinct from the texts the CV reads, so no cache help
    zero_pass_s = time.perf_counter() - began
    began = time.perf_counter()
    cv = LLMLabelClassifierCV(LLMLabelClassifier(**base)).fit(X, y)
    cv_fit_s = time.perf_counter() - began
    rows["LLMLabelClassifierCV"] = {
        **scores(cv.classes_, cv.predict_proba(Xt), yt),
        "best_params": {k: (v if isinstance(v, str | int | float | bool) or v is None else repr(v))
                        for k, v in cv.best_params_.items()},
        "fit_cost": cv.fit_cost_,
        "fit_s": cv_fit_s,
        "zero_shot_pass_s": zero_pass_s,
        "fit_time_vs_zero_shot_pass": cv_fit_s / zero_pass_s,
        "candidates": len(cv.cv_results_["params"]),
        "readers": len(cv.readers_),
    }
    print(name, "CV", rows["LLMLabelClassifierCV"], flush=True)
    return rows


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        f"# Cross-validated selection against fixed modes ({doc['test']} test texts per dataset)",
        "",
        f"CPU {m['cpu_model']} ({m['cpu_capability']}, {m['cores_usable']} cores), engine dtype "
        f"{doc.get('engine_dtype', '?')}; load average {doc['load_avg_start']:.1f} at start, "
        f"{doc.get('load_avg_end', float('nan')):.1f} at end. Train/test drawn at random, stratified, "
        "seed 0; the selection sees only the training texts.",
    ]
    for size, datasets in sorted(doc["runs"].items(), key=lambda item: int(item[0])):
        lines += ["", f"## {size} training texts", "",
                  "| dataset | mode | accuracy | macro-F1 | log-loss | ECE |", "|---|---|---:|---:|---:|---:|"]
        for name, rows in datasets.items():
            for label, r in rows.items():
                if label == "train_classes":
                    continue
                if "error" in r:
                    lines.append(f"| {name} | {label} | error: {r['error'][:60]} | | | |")
                    continue
                shown = f"**{label}**" if label == "LLMLabelClassifierCV" else label
                lines.append(f"| {name} | {shown} | {r['accuracy']:.3f} | {r['macro_f1']:.3f} "
                             f"| {r['log_loss']:.3f} | {r['ece']:.3f} |")
        lines += ["", "| dataset | CV chose | candidates | readers | engine reads/text | zero-shot passes (reads) "
                  "| fit time / zero-shot pass |", "|---|---|---:|---:|---:|---:|---:|"]
        for name, rows in datasets.items():
            r = rows.get("LLMLabelClassifierCV")
            if not r or "error" in r:
                continue
            cost = r["fit_cost"]
            lines.append(
                f"| {name} | `{r['best_params']}` | {r['candidates']} | {r['readers']} | {cost['reads_per_text']:.1f} "
                f"| {cost['zero_shot_passes']:.1f} | {r['fit_time_vs_zero_shot_pass']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def chose(best_params: dict[str, Any]) -> str:
    """The CV's pick in a few words: prompt (default or which), few-shot,
    calibration / stacking."""
    if best_params.get("stack"):
        return "stacked readers"
    prompt = best_params.get("prompt")
    parts = ["default prompt" if prompt is None else ("instruction prompt, chat" if best_params.get("chat")
                                                      else "instruction prompt")]
    if best_params.get("few_shot"):
        parts.append(f"few_shot={best_params['few_shot']}")
    calibration = best_params.get("calibration")
    if calibration in ("contextual", "batch"):
        parts.append(f"{calibration} (prior {best_params.get('calibration_prior')})")
    elif calibration == "learned":
        parts.append("learned" + (", balanced" if best_params.get("class_weight") == "balanced" else ""))
    return " + ".join(parts)


def summary(doc: dict[str, Any]) -> str:
    """The README's table: per dataset, zero-shot, the best fixed mode (chosen
    by test accuracy, which a user could not do), the CV's pick and TF-IDF +
    LR, with the CV's fit cost."""
    m = doc["machine"]
    lines = [f"{m['cpu_model']} ({m['cpu_capability']}, {m['cores_usable']} cores), engine dtype "
             f"{doc.get('engine_dtype', '?')}; {doc['test']} test texts per dataset, seed 0. Accuracy "
             "(macro-F1, ECE); the best fixed mode is picked by its test accuracy, which the CV never sees."]
    for size, datasets in sorted(doc["runs"].items(), key=lambda item: int(item[0])):
        lines += ["", f"**{size} training texts**", "",
                  "| dataset | zero-shot | best fixed mode | `LLMLabelClassifierCV` | CV chose | TF-IDF + LR "
                  "| CV fit: reads/text, time / zero-shot pass |", "|---|---:|---|---:|---|---:|---:|"]
        for name, rows in datasets.items():
            cv = rows.get("LLMLabelClassifierCV", {})
            if "accuracy" not in cv:
                continue
            fixed = {k: r for k, r in rows.items() if k in FIXED and "accuracy" in r}
            best = max(fixed, key=lambda k: fixed[k]["accuracy"])

            def cell(r: dict[str, Any]) -> str:
                return f"{r['accuracy']:.3f} ({r['macro_f1']:.2f}, {r['ece']:.3f})"

            tfidf = rows["TF-IDF + LogisticRegression"]
            lines.append(
                f"| {name} | {cell(rows['zero-shot'])} | {best}: {cell(fixed[best])} | **{cell(cv)}** "
                f"| {chose(cv['best_params'])} | {cell(tfidf)} | {cv['fit_cost']['reads_per_text']:.1f}, "
                f"{cv['fit_time_vs_zero_shot_pass']:.1f}x |"
            )
    return "\n".join(lines) + "\n"


def write(doc: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "selection.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    (RESULTS / "selection.md").write_text(markdown(doc))
    (RESULTS / "selection-summary.md").write_text(summary(doc))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, nargs="+", default=[64])
    parser.add_argument("--test", type=int, default=300)
    parser.add_argument("--datasets", nargs="+", default=DEFAULT_DATASETS, choices=list(DATASETS))
    parser.add_argument("--merge", action="store_true", help="keep the other sizes/datasets already in the results")
    args = parser.parse_args()
    from bench.report import machine

    from llm_label_clf import engine_info

    doc: dict[str, Any] = {"test": args.test, "machine": machine(), "load_avg_start": os.getloadavg()[0], "runs": {}}
    if args.merge and (RESULTS / "selection.json").exists():
        doc["runs"] = json.loads((RESULTS / "selection.json").read_text())["runs"]
    for size in args.train:
        doc["runs"].setdefault(str(size), {})
        for name in args.datasets:
            doc["runs"][str(size)][name] = one_dataset(name, size, args.test)
            info = engine_info()
            doc["engine_dtype"] = (info["engines"][0]["settings"] or {}).get("dtype", "?") if info["engines"] else "?"
            doc["load_avg_end"] = os.getloadavg()[0]
            write(doc)
    print(markdown(doc))


if __name__ == "__main__":
    main()

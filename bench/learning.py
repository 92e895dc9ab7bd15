"""What learning from labels buys: zero-shot, each calibration, few-shot
prompts and a learned calibration, against TF-IDF + LogisticRegression on the
same k labelled examples per class: accuracy, macro-F1, log-loss and ECE (15
equal-width bins of the top probability) on held-out texts, and the cost per
text of k = 4 few-shot against zero-shot.

Run: ``python bench/learning.py [--n-test 200] [--k 0 4 16]``; writes
``bench/results/learning.json`` and ``.md``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

#: One prompt per dataset, as a user would write it (not tuned to the data).
DATASETS = {
    "sst2": {"train": "sst2_dev.csv", "test": None, "prompt": "Review: {text}\nSentiment:"},
    "agnews": {"train": "agnews_test.csv", "test": None, "prompt": "Article: {text}\nTopic:"},
    "trec": {"train": "trec_train.csv", "test": "trec_test.csv", "prompt": "Question: {text}\nAnswer type:"},
    "emotion": {"train": "emotion_val.csv", "test": None, "prompt": "Text: {text}\nEmotion:"},
}


def split(name: str, n_test: int, seed: int = 0):
    """Held-out test texts, and the pool the k examples per class come from
    (a disjoint split of the same file where there is no separate test file)."""
    spec = DATASETS[name]
    frame = common.csv(spec["train"]).sample(frac=1.0, random_state=seed)
    if spec["test"]:
        test = common.csv(spec["test"]).sample(frac=1.0, random_state=seed).head(n_test)
        pool = frame
    else:
        test, pool = frame.head(n_test), frame.iloc[n_test:]
    return test, pool


def draw(pool, k: int, seed: int = 0):
    """k rows per class of the pool (all classes of the test set)."""
    return pool.sample(frac=1.0, random_state=seed).groupby("label").head(k)


def ece(proba: np.ndarray, y_index: np.ndarray, bins: int = 15) -> float:
    """Expected calibration error of the top-class probability."""
    conf = proba.max(axis=1)
    right = proba.argmax(axis=1) == y_index
    edges = np.linspace(0, 1, bins + 1)
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        mask = (conf > lo) & (conf <= hi)
        if mask.any():
            total += mask.mean() * abs(right[mask].mean() - conf[mask].mean())
    return float(total)


def scores(classes, proba, y) -> dict:
    from sklearn.metrics import accuracy_score, f1_score, log_loss

    y_index = np.searchsorted(classes, y)
    pred = np.asarray(classes)[proba.argmax(axis=1)]
    return {
        "accuracy": float(accuracy_score(y, pred)),
        "macro_f1": float(f1_score(y, pred, average="macro")),
        "log_loss": float(log_loss(y_index, np.clip(proba, 1e-12, 1), labels=range(len(classes)))),
        "ece": ece(proba, y_index),
    }


def run_llm(train, test, prompt: str, **params) -> dict:
    from llm_label_clf import LLMLabelClassifier

    clf = LLMLabelClassifier(prompt=prompt, progress=False, low_mass="ignore", random_state=0, **params)
    start = time.perf_counter()
    clf.fit(train["text"].tolist(), train["label"].to_numpy())
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    proba = clf.predict_proba(test["text"].tolist())
    predict_s = time.perf_counter() - start
    return {**scores(clf.classes_, proba, test["label"].to_numpy()), "fit_s": fit_s,
            "texts_per_s": len(test) / predict_s}


def run_tfidf(train, test) -> dict:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    model = make_pipeline(TfidfVectorizer(), LogisticRegression(max_iter=1000))
    model.fit(train["text"], train["label"])
    proba = model.predict_proba(test["text"])
    classes = model.classes_
    known = set(classes)
    keep = test["label"].isin(known).to_numpy()
    return scores(classes, proba[keep], test["label"].to_numpy()[keep])


def methods(k: int) -> list[tuple[str, dict]]:
    if k == 0:
        return [
            ("zero-shot", {}),
            ("contextual", {"calibration": "contextual"}),
            ("batch", {"calibration": "batch"}),
        ]
    return [
        (f"few-shot k={k}", {"few_shot": k}),
        (f"few-shot k={k} + batch", {"few_shot": k, "calibration": "batch"}),
        (f"learned on k={k}", {"calibration": "learned"}),
        (f"TF-IDF + LR on k={k}", None),
    ]


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        "| dataset | method | accuracy | macro-F1 | log-loss | ECE | texts/s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, rows in doc["datasets"].items():
        for label, r in rows.items():
            speed = f"{r['texts_per_s']:.1f}" if "texts_per_s" in r else "-"
            lines.append(
                f"| {name} | {label} | {r['accuracy']:.3f} | {r['macro_f1']:.3f} | {r['log_loss']:.3f} "
                f"| {r['ece']:.3f} | {speed} |"
            )
    for name, rows in doc["datasets"].items():
        zero, few = rows.get("zero-shot"), rows.get("few-shot k=4")
        if zero and few:
            lines.append(f"\n{name}: cost per text of k=4 few-shot vs zero-shot: "
                         f"{zero['texts_per_s'] / few['texts_per_s']:.2f}x")
    return "\n".join(lines) + "\n"


def main() -> None:
    args = common.arguments(__doc__, markdown, "learning", n_test=200, k=[0, 4, 16], datasets=list(DATASETS))
    doc = common.record(n_test=args.n_test, datasets={})
    for name in args.datasets:
        test, pool = split(name, args.n_test)
        prompt = DATASETS[name]["prompt"]
        rows = doc["datasets"][name] = {}
        for k in args.k:
            # zero-shot modes use no labels: they are fitted on 4 texts per class for classes_ only
            train = draw(pool, max(k, 4))
            for label, params in methods(k):
                r = run_tfidf(train, test) if params is None else run_llm(train, test, prompt, **params)
                r["k"] = k
                rows[label] = r
                print(name, label, {a: round(b, 3) for a, b in r.items()}, flush=True)
    print(common.write("learning", doc, markdown))


if __name__ == "__main__":
    main()

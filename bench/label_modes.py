"""Label modes side by side: accuracy, macro-F1 and throughput of
``label_mode`` = first_token / full_sequence (plain and length-normalised) /
options on AG News (4 classes) and Banking77 (77 multi-word classes), and
TREC's two outputs in one estimator against each read alone, in one process
on one engine. Each mode's cost per text is against first_token (else options).

Run: ``python bench/label_modes.py [--agnews 400] [--banking-per-class 2] [--trec 200]``;
writes ``bench/results/label_modes.json`` and ``.md``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

MODES = [
    ("first_token", {"label_mode": "first_token"}),
    ("full_sequence", {"label_mode": "full_sequence"}),
    ("full_sequence, length_norm=token", {"label_mode": "full_sequence", "length_norm": "token"}),
    ("options", {"label_mode": "options"}),
]


def load(n_agnews: int, banking_per_class: int) -> dict:
    agnews = common.csv("agnews_test.csv").sample(n=n_agnews, random_state=0)
    banking = common.banking77(banking_per_class)
    return {
        "agnews": {
            "X": agnews["text"].tolist(),
            "y": agnews["label"].to_numpy(),
            "params": {"prompt": "Article: {text}\nTopic:"},
        },
        # what a user would do: readable labels instead of snake_case ids
        "banking77": {"X": banking.texts, "y": banking.y,
                      "params": {"prompt": banking.prompt, "labels": banking.labels}},
    }


def run_mode(X, y, params: dict) -> dict:
    import numpy as np
    from sklearn.metrics import accuracy_score, f1_score

    from llm_label_clf import LLMLabelClassifier

    clf = LLMLabelClassifier(progress=False, low_mass="ignore", **params)
    try:
        clf.fit(X, y)
    except ValueError as exc:
        return {"error": str(exc).split(";")[0]}
    clf.predict_proba(X[:8])  # warm-up: first reads of this prompt shape
    start = time.perf_counter()
    proba = clf.predict_proba(X)
    seconds = time.perf_counter() - start
    pred = clf.classes_[np.argmax(proba, axis=1)]
    trie = clf._trie()
    return {
        "label_mode": clf.label_mode_,
        "reads_per_text": len(trie.reads),
        "texts_per_s": len(X) / seconds,
        "seconds": seconds,
        "accuracy": float(accuracy_score(y, pred)),
        "macro_f1": float(f1_score(y, pred, average="macro")),
    }


TREC_PROMPTS = ["Question: {text}\nAnswer type:", "Question: {text}\nFine answer type:"]


def run_outputs(n: int) -> dict:
    """TREC's coarse and fine type in one estimator, against each read alone: accuracy and texts/s."""
    import numpy as np

    from llm_label_clf import LLMLabelClassifier

    frame = common.csv("trec_test.csv").sample(n=n, random_state=0)
    X, Y = frame["text"].tolist(), frame[["label", "fine_label"]]
    out: dict = {"n": n}
    clf = LLMLabelClassifier(prompt=TREC_PROMPTS, progress=False, low_mass="ignore").fit(X, Y)
    clf.predict(X[:8])
    start = time.perf_counter()
    pred = clf.predict(X)
    seconds = time.perf_counter() - start
    out["both outputs"] = {
        "texts_per_s": n / seconds,
        "accuracy": [float(np.mean(pred[:, j] == Y.iloc[:, j].to_numpy())) for j in range(2)],
        "exact_match": float(np.mean(np.all(pred == Y.to_numpy(), axis=1))),
        "modes": [e.label_mode_ for e in clf.estimators_],
    }
    for j, column in enumerate(Y.columns):
        single = LLMLabelClassifier(prompt=TREC_PROMPTS[j], progress=False, low_mass="ignore").fit(X, Y[column])
        start = time.perf_counter()
        p = single.predict(X)
        out[column] = {"texts_per_s": n / (time.perf_counter() - start), "accuracy": float(np.mean(p == Y[column]))}
    return out


def markdown(doc: dict) -> str:
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
    trec = doc.get("trec_outputs")
    if trec:
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


def main() -> None:
    args = common.arguments(__doc__, markdown, "label_modes", agnews=400, banking_per_class=2, trec=200)
    data = load(args.agnews, args.banking_per_class)
    doc = common.record(datasets={})
    for dataset, d in data.items():
        doc["datasets"][dataset] = {}
        for name, params in MODES:
            r = run_mode(d["X"], d["y"], {**d["params"], **params})
            r["n"] = len(d["X"])
            doc["datasets"][dataset][name] = r
            print(dataset, name, r, flush=True)
    doc["trec_outputs"] = run_outputs(args.trec)
    print("trec", doc["trec_outputs"], flush=True)
    print(common.write("label_modes", doc, markdown))


if __name__ == "__main__":
    main()

"""Several outputs per text on TREC (coarse ``label``, 6 classes;
``fine_label``, 47): separate reads (one per output, sharing the text's cached
prefix; the default, and in options mode) against one joint read per text
(every output's options lettered in one prompt, one letter per line held by
vLLM's structured outputs). Accuracy, macro-F1 and log-loss per output, exact
match, and texts/s (median over interleaved rounds on one engine, each pass
from an empty prefix cache after a warm-up on 8 other texts).

Run: ``python bench/outputs.py [--n 200] [--rounds 3]``; writes
``bench/results/outputs.json`` and ``.md``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

#: Output names as a user would write them; they are the answer cues.
NAMES = ["answer type", "fine answer type"]
PROMPTS = ["Question: {text}\nAnswer type:", "Question: {text}\nFine answer type:"]
READS = {
    "separate (default)": {"prompt": PROMPTS},
    "separate, label_mode=options": {"prompt": PROMPTS, "label_mode": "options"},
    "joint": {"prompt": "Question: {text}", "multioutput_read": "joint"},
}


def main() -> None:
    import numpy as np
    from sklearn.metrics import f1_score, log_loss

    from llm_label_clf import LLMLabelClassifier, get_engine
    from llm_label_clf.engines.loop import run_sync

    args = common.arguments(__doc__, markdown, "outputs", n=200, rounds=3)
    table = common.csv("trec_test.csv")
    frame = table.sample(n=args.n, random_state=0)
    X = frame["text"].tolist()
    warm = table.drop(frame.index)["text"].head(8).tolist()
    Y = frame[["label", "fine_label"]].set_axis(NAMES, axis=1)
    fitted = {
        name: LLMLabelClassifier(progress=False, low_mass="ignore", **params).fit(X, Y)
        for name, params in READS.items()
    }
    doc = common.record(n=args.n, rounds=args.rounds, reads={})
    speeds: dict[str, list[float]] = {name: [] for name in READS}
    probas = {}
    engine = get_engine()
    for r in range(args.rounds):
        order = list(READS)[r % len(READS) :] + list(READS)[: r % len(READS)]
        for name in order:
            # each pass from an empty prefix cache, after a warm-up on other
            # texts (what is shared by every text, such as the options, stays)
            run_sync(engine.client.reset_prefix_cache())
            fitted[name].predict_proba(warm)
            start = time.perf_counter()
            probas[name] = fitted[name].predict_proba(X)
            speeds[name].append(args.n / (time.perf_counter() - start))
            print(f"round {r + 1}: {name} {speeds[name][-1]:.1f} texts/s", flush=True)
    for name, clf in fitted.items():
        per_output = []
        preds = []
        for j, column in enumerate(NAMES):
            proba, classes = probas[name][j], clf.classes_[j]
            truth = Y[column].to_numpy()
            pred = classes[np.argmax(proba, axis=1)]
            preds.append(pred)
            per_output.append(
                {
                    "output": column,
                    "accuracy": float(np.mean(pred == truth)),
                    "macro_f1": float(f1_score(truth, pred, average="macro")),
                    "log_loss": float(log_loss(truth, proba, labels=classes)),
                }
            )
        exact = float(np.mean(np.all(np.column_stack(preds) == Y.to_numpy(), axis=1)))
        modes = [e.label_mode_ for e in clf.estimators_] if "estimators_" in clf.__dict__ else ["joint options"]
        doc["reads"][name] = {
            "texts_per_s": statistics.median(speeds[name]),
            "texts_per_s_rounds": speeds[name],
            "outputs": per_output,
            "exact_match": exact,
            "label_modes": modes,
        }
    print(common.write("outputs", doc, markdown))


def markdown(doc: dict) -> str:
    lines = [
        f"TREC, {doc['n']} texts, texts/s the median of {doc['rounds']} interleaved rounds "
        f"(load average {doc['load_avg_start']:.1f} at start, {doc['load_avg_end']:.1f} at end):",
        "",
        "| read | texts/s | coarse acc | coarse macro-F1 | coarse log-loss | fine acc | fine macro-F1 "
        "| fine log-loss | both right |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in doc["reads"].items():
        c, f = r["outputs"]
        lines.append(
            f"| {name} | {r['texts_per_s']:.1f} | {c['accuracy']:.3f} | {c['macro_f1']:.3f} | {c['log_loss']:.2f} "
            f"| {f['accuracy']:.3f} | {f['macro_f1']:.3f} | {f['log_loss']:.2f} | {r['exact_match']:.3f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

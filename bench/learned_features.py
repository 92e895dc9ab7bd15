"""What the learned calibration's features do to its test log-loss: its
regression on each text's label log-probabilities (before 2026-12-07) against
the same regression on their logits (the log-probabilities less their mean
over the classes: Platt scaling for two classes, matrix scaling for more).

For each recorded protocol draw (``bench/selection.py``'s results) it refits
the draw's ``calibration="learned"`` classifiers, the fixed modes "learned"
and "learned, balanced" and the search's pick where that is a learned one,
its reads served by the read store the protocol run wrote (run it with the
same ``LLM_LABEL_CLF_READ_STORE``; reads the store lacks, such as those of
draws run before it existed, the engine reads into it). It keeps what the
calibration was given (the training texts' and the 300 test texts'
log-probabilities) and fits both regressions on it, the same ``C`` grid,
folds and averaging (``LearnedCalibrator``). Reports per dataset and mode
the test log-loss of both, their paired difference (mean ± standard error
over draws), accuracy, and the draws worse than zero-shot by > 0.05 nats.

Run: ``LLM_LABEL_CLF_READ_STORE=~/.cache/llm_label_clf/protocol-reads.sqlite
python bench/learned_features.py --protocol selection-protocol-2026-12-07c
--datasets sst2 trec`` (writes ``bench/results/learned-features.{json,md}``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import logsumexp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common, selection  # noqa: E402

MODES = ("learned", "learned, balanced", "pick")
FEATURES = ("log-probabilities", "logits")


def features(log_proba: np.ndarray, kind: str) -> np.ndarray:
    """The regression's inputs: the label log-probabilities (normalised over
    the labels) or the library's ``label_logits`` of them."""
    from llm_label_clf.fitting.calibration import label_logits

    if kind == "logits":
        return label_logits(log_proba)
    return log_proba - logsumexp(log_proba, axis=1, keepdims=True)


def captured_inputs(params: dict[str, Any], seed: int, train: Any, test: Any) -> dict[str, Any]:
    """Fits ``LLMLabelClassifier(**params)`` on ``train`` and predicts ``test``,
    keeping what its learned calibration was given: the training rows' and the
    test texts' inputs, the labels and the folds' seed."""
    from llm_label_clf import LLMLabelClassifier
    from llm_label_clf.fitting import calibration

    kept: dict[str, Any] = {}
    fit, log_proba = calibration.LearnedCalibrator.fit.__func__, calibration.LearnedCalibrator.log_proba

    def keep_fit(cls, X, y_index, n_classes, **kw):  # type: ignore[no-untyped-def]
        kept.update(train=X.copy(), y=y_index.copy(), seed=kw["random_state"], weights=kw.get("class_weight"))
        return fit(cls, X, y_index, n_classes, **kw)

    def keep_log_proba(self, X, n_classes):  # type: ignore[no-untyped-def]
        kept["test"] = X.copy()
        return log_proba(self, X, n_classes)

    calibration.LearnedCalibrator.fit = classmethod(keep_fit)  # type: ignore[method-assign]
    calibration.LearnedCalibrator.log_proba = keep_log_proba  # type: ignore[method-assign]
    try:
        clf = LLMLabelClassifier(progress=False, low_mass="ignore", random_state=seed, **params)
        clf.fit(train["text"].tolist(), train["label"].to_numpy()).predict_proba(test["text"].tolist())
    finally:
        calibration.LearnedCalibrator.fit = classmethod(fit)  # type: ignore[method-assign]
        calibration.LearnedCalibrator.log_proba = log_proba  # type: ignore[method-assign]
    kept["y_test"] = np.searchsorted(clf.classes_, test["label"].to_numpy())
    return kept


def refit_both(kept: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Both regressions fitted on the kept training inputs, scored on the test texts."""
    from llm_label_clf.fitting.calibration import LearnedCalibrator

    k = kept["train"].shape[1]
    rows = np.arange(len(kept["y_test"]))
    out = {}
    for kind in FEATURES:
        model = LearnedCalibrator.fit(features(kept["train"], kind), kept["y"], k, random_state=kept["seed"],
                                      class_weight=kept["weights"])
        log_proba = model.log_proba(features(kept["test"], kind), k)
        out[kind] = {"log_loss": float(-log_proba[rows, kept["y_test"]].mean()),
                     "accuracy": float((log_proba.argmax(axis=1) == kept["y_test"]).mean()), "C": model.C}
    return out


def run(source: str, datasets: list[str], draws: int) -> dict[str, Any]:
    doc = common.load(source)
    out = common.record(source=source, datasets=datasets, rows=[])
    for name in datasets:
        test, pool = selection.test_and_pool(name, doc["protocol"]["test"])
        for d in range(draws):
            r = doc["draws"].get(f"{name}/64/{d}")
            if r is None:
                continue
            seed, train = selection.training_draw(name, 64, d, pool)
            for mode in MODES:
                params = dict(r["fit"]["best_params"]) if mode == "pick" else dict(selection.FIXED[mode])
                if params.get("calibration") != "learned" or "error" in r["fixed"].get(mode, {}):
                    continue  # not a learned calibration, or one the protocol could not fit (a class of one text)
                scored = refit_both(captured_inputs(params, seed, train, test))
                row = {"dataset": name, "draw": d, "mode": mode, "zero_shot": r["fixed"]["zero-shot"]["log_loss"],
                       "chose": r["fit"]["chose"] if mode == "pick" else mode, **scored}
                out["rows"].append(row)
                print(name, d, mode, {k: round(v["log_loss"], 4) for k, v in scored.items()}, flush=True)
    return out


def pm(values: np.ndarray, sign: bool = False) -> str:
    """``mean ± standard error`` of ``values``, as the protocol's tables write it."""
    return selection.pm(selection.mean_se(values.tolist()), 3, sign)


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        "# The learned calibration on label log-probabilities or on their logits",
        "",
        f"{m['cpu_model']} ({m['cpu_capability']}, {m['cores']} cores), engine dtype {doc['dtype']}, "
        f"{doc['date']}, load {doc['load_avg_start']}–{doc.get('load_avg_end')}, commit {doc['commit']}; reads served "
        f"by the read store of `{doc['source']}`, those it lacked read by the engine into it (the figures are "
        "arithmetic, not timings). Defaults are chosen on the design sets (sst2, trec); the others are "
        "reported. Draws of 64 training texts, 300 test texts; mean ± standard error over draws.",
        "",
        "| dataset | mode | draws | log-loss, log-probabilities | log-loss, logits | logits − log-probabilities "
        "| accuracy (both) | worse than zero-shot by > 0.05 (both) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    keys = sorted({(r["dataset"], r["mode"]) for r in doc["rows"]}, key=lambda k: (doc["datasets"].index(k[0]), k[1]))
    for name, mode in keys:
        rows = [r for r in doc["rows"] if (r["dataset"], r["mode"]) == (name, mode)]
        old = np.array([r["log-probabilities"]["log_loss"] for r in rows])
        new = np.array([r["logits"]["log_loss"] for r in rows])
        zero = np.array([r["zero_shot"] for r in rows])
        n = len(rows)
        acc = [np.mean([r[f]["accuracy"] for r in rows]) for f in FEATURES]
        worse = [int(((a - zero) > 0.05).sum()) for a in (old, new)]
        lines.append(f"| {name} ({selection.SETS[name][1]}) | {mode} | {n} | {pm(old)} | {pm(new)} | "
                     f"{pm(new - old, True)} | {acc[0]:.3f} / {acc[1]:.3f} | {worse[0]} / {worse[1]} |")
    lines += ["", "\"pick\": the protocol's search pick, where it was a learned calibration (its draws only)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    args = common.arguments(__doc__, markdown, lambda a: a.out, protocol="selection-protocol-2026-12-07c",
                            datasets=["sst2", "trec"], draws=10, out="learned-features")
    common.write(args.name, run(args.protocol, args.datasets, args.draws), markdown)
    print((common.RESULTS / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()

"""Where a pick's cross-validated gain over zero-shot comes from, text by text.

Refits the default ``LLMLabelClassifierCV`` of recorded protocol draws (the
reads served by the read store the protocol run wrote, so no engine reads) and
prints, per draw, the pick's mean per-text gain in held-out log-loss over the
simple reading (zero-shot, the first candidate), its standard error over the
texts, and the gain on the rarest class's texts and on the others, beside the
test log-loss difference the protocol recorded.

Run (after the protocol run that wrote RESULTS and the store):
``LLM_LABEL_CLF_READ_STORE=~/.cache/llm_label_clf/protocol-reads.sqlite
python bench/experiments/guard-2026-12-07/per_text_gains.py
selection-protocol-2026-12-07c hate_speech 0 7 9``
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import common, selection  # noqa: E402

from llm_label_clf import LLMLabelClassifier, LLMLabelClassifierCV  # noqa: E402
from llm_label_clf.selection import search  # noqa: E402

_captured: dict = {}
_score = search.LLMLabelClassifierCV._score


def _spy(self, base, found, reads, classes, y_index, folds, unscored):  # type: ignore[no-untyped-def]
    """The search's own scoring, keeping its held-out log-probabilities and folds."""
    held = _score(self, base, found, reads, classes, y_index, folds, unscored)
    _captured.update(held=held, folds=folds, y_index=y_index)
    return held


def per_text_loss(candidate: int, n: int) -> np.ndarray:
    """Each text's held-out log-loss under ``candidate`` (one repeat: each text held out once)."""
    held, folds, y_index = _captured["held"], _captured["folds"], _captured["y_index"]
    out = np.full(n, np.nan)
    for s, (_, test) in enumerate(folds):
        if held[candidate][s] is not None:
            out[test] = -held[candidate][s][np.arange(len(test)), y_index[test]]
    return out


def main() -> None:
    results, name, draws = sys.argv[1], sys.argv[2], [int(d) for d in sys.argv[3:]]
    doc = common.load(results)
    search.LLMLabelClassifierCV._score = _spy
    _, pool = selection.test_and_pool(name, doc["protocol"]["test"])
    for d in draws:
        r = doc["draws"][f"{name}/64/{d}"]
        seed, train = selection.training_draw(name, 64, d, pool)
        X, y = train["text"].tolist(), train["label"].to_numpy()
        cv = LLMLabelClassifierCV(LLMLabelClassifier(progress=False, low_mass="ignore", random_state=seed)).fit(X, y)
        gain = per_text_loss(0, len(y)) - per_text_loss(cv.best_index_, len(y))  # +: the pick is better
        y_index = _captured["y_index"]
        rare = y_index == np.argmin(np.bincount(y_index))
        se = gain.std(ddof=1) / np.sqrt(len(gain))
        print(f"{name} draw {d}: pick {r['fit']['chose']}; gain per text {gain.mean():+.3f} ± {se:.3f} "
              f"(z {gain.mean() / se:.2f}); rarest class ({rare.sum()} texts) {gain[rare].mean():+.3f}, "
              f"the others {gain[~rare].mean():+.3f}; test log-loss, pick − zero-shot "
              f"{r['fit']['test']['log_loss'] - r['fixed']['zero-shot']['log_loss']:+.3f}", flush=True)


if __name__ == "__main__":
    main()

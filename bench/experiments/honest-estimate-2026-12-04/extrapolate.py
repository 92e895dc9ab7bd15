"""Issue 43, tried and lost: ``held_out_score_`` extrapolated along the learning curve.

The nested estimate scores the chosen candidate on each split ``s`` with
models fitted on the other folds ((K-1)/K of the texts). The inner pairs
``(j, s)`` the search already computes score the same candidate on ``s``
fitted on (K-2)/K. Assuming loss = a + b / n, the two give the score at the
whole training set: s1 = s_{(K-1)/K} + w (s_{(K-1)/K} - s_{(K-2)/K}), with
w = (K/(K-1) - 1) / (K/(K-2) - K/(K-1)) (0.6 at K = 5). This prints, per
draw and on average, the estimate's bias against 300 texts drawn per draw
from the pool texts the fit did not see, as the library gives it and
extrapolated. Splits where no inner pair could fit the candidate keep their
plain score. Needs the wide-test reads: from the read store they cost
arithmetic only.

Rerun::

    export LLM_LABEL_CLF_READ_STORE=~/.cache/llm_label_clf/experiments/selection-reads.sqlite
    python bench/experiments/honest-estimate-2026-12-04/extrapolate.py trec 128
    python bench/experiments/honest-estimate-2026-12-04/extrapolate.py sst2 128
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from compare import pm  # noqa: E402

from bench.selection import estimate_against, scores  # noqa: E402


def main(name: str, n: int) -> None:
    from bench.selection import test_and_pool, training_draw, wide_texts

    from llm_label_clf import LLMLabelClassifier, LLMLabelClassifierCV
    from llm_label_clf.reading.cache import ReadCache
    from llm_label_clf.selection import search

    warnings.simplefilter("ignore")
    _, pool = test_and_pool(name, 300, from_pool=name == "trec")
    estimate = search.LLMLabelClassifierCV._estimate

    def extrapolating(self, table, inner, held_out, metric, base, y_index, classes, folds):  # type: ignore[no-untyped-def]
        estimate(self, table, inner, held_out, metric, base, y_index, classes, folds)
        k = self.n_folds_
        w = (k / (k - 1) - 1) / (k / (k - 2) - k / (k - 1))
        scores = []
        for s, c in enumerate(self.held_out_choices_):
            start = s - s % k
            fewer = [inner[c][j, s] for j in range(start, start + k) if j != s and inner[c][j, s] is not None]
            fewer_mean = np.mean([v.get(metric, v.get("score")) for v in fewer]) if fewer else table[c, s]
            scores.append(table[c, s] + w * (table[c, s] - fewer_mean))
        self.extrapolated_ = float(np.mean(scores))

    search.LLMLabelClassifierCV._estimate = extrapolating
    bias: dict[str, list[float]] = {"held_out_score_": [], "extrapolated": []}
    covers: dict[str, list[float | None]] = {"held_out_score_": [], "extrapolated": []}
    with ReadCache().active():
        for d in range(10):
            seed, train = training_draw(name, n, d, pool)
            X, y = train["text"].tolist(), train["label"].to_numpy()
            base = LLMLabelClassifier(progress=False, low_mass="ignore", random_state=seed)
            fit = LLMLabelClassifierCV(base).fit(X, y)
            Xw, yw = wide_texts(pool.drop(train.index), 300, seed)
            loss = scores(fit.classes_, fit.predict_proba(Xw), yw)["log_loss"]
            for key, value in (("held_out_score_", fit.held_out_score_), ("extrapolated", fit.extrapolated_)):
                b, c = estimate_against({"held_out_score": value, "held_out_score_sem": fit.held_out_score_sem_}, loss)
                bias[key].append(b)
                covers[key].append(c)
            print(d, {k: round(v[-1], 3) for k, v in bias.items()}, flush=True)
    for key, values in bias.items():
        print(f"{name} {n}, {key}: bias {pm(values)}, ±2 SE covers {np.mean(covers[key]):.0%}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

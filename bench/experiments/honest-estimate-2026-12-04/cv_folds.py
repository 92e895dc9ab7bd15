"""Issue 43: the default fit with ``cv=5`` and with ``cv=10``, side by side.

The reads do not depend on the folds, so both fits of a draw share them (one
``ReadCache``, and the read store when ``LLM_LABEL_CLF_READ_STORE`` is set):
what differs is the arithmetic. Each fit is the default
``LLMLabelClassifierCV(LLMLabelClassifier(random_state=seed))`` of a
protocol draw (``bench.selection.training_draw``), scored on

- ``fixed``: the protocol's fixed test set of 300 texts, or
- ``wide``: 300 texts drawn per draw from the pool texts it was not trained
  on (TREC drawn alike: ``--test-from-pool``'s pool), as ``--wide 300``.

Each cell's draws go to ``~/.cache/llm_label_clf/experiments/cv-folds/``
(``CV_FOLDS_CACHE`` moves it); ``table`` prints, per cell and cv, the
estimate's bias (``held_out_score_`` + the test log-loss; + is optimistic),
how often ±2 ``held_out_score_sem_`` covers it, the pick's test log-loss and
accuracy, and the fit's seconds (from the store, arithmetic and little else).

Rerun (the store holds SST-2 and TREC drawn alike at 128 texts; other cells
read from the engine, ~1-2 minutes a draw)::

    export LLM_LABEL_CLF_READ_STORE=~/.cache/llm_label_clf/experiments/selection-reads.sqlite
    python bench/experiments/honest-estimate-2026-12-04/cv_folds.py wide trec 128
    python bench/experiments/honest-estimate-2026-12-04/cv_folds.py fixed ag_news 128
    python bench/experiments/honest-estimate-2026-12-04/cv_folds.py table
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from compare import pm  # noqa: E402

from bench.selection import estimate_against, scores  # noqa: E402

CACHE = Path(os.path.expanduser(os.environ.get("CV_FOLDS_CACHE", "~/.cache/llm_label_clf/experiments/cv-folds")))
FOLDS = (5, 10)


def run(test_kind: str, name: str, n: int, draws: int = 10) -> None:
    """Fits every draw of the cell with each cv, appending to its JSON (a rerun resumes)."""
    from bench.selection import test_and_pool, training_draw, wide_texts

    from llm_label_clf import LLMLabelClassifier, LLMLabelClassifierCV
    from llm_label_clf.reading.cache import ReadCache

    warnings.simplefilter("ignore")
    path = CACHE / f"{name}-{n}-{test_kind}.json"
    CACHE.mkdir(parents=True, exist_ok=True)
    done = json.loads(path.read_text()) if path.exists() else []
    test, pool = test_and_pool(name, 300, from_pool=test_kind == "wide" and name == "trec")
    with ReadCache().active():
        for d in range(len(done), draws):
            seed, train = training_draw(name, n, d, pool)
            X, y = train["text"].tolist(), train["label"].to_numpy()
            if test_kind == "wide":
                Xt, yt = wide_texts(pool.drop(train.index), 300, seed)
            else:
                Xt, yt = test["text"].tolist(), test["label"].to_numpy()
            row: dict = {"draw": d, "seed": seed}
            for cv in FOLDS:
                began = time.perf_counter()
                fit = LLMLabelClassifierCV(LLMLabelClassifier(progress=False, low_mass="ignore", random_state=seed),
                                           cv=cv).fit(X, y)
                seconds = time.perf_counter() - began
                scored = scores(fit.classes_, fit.predict_proba(Xt), yt)
                row[str(cv)] = {
                    "stack": bool(fit.best_params_.get("stack")), "best": fit.best_score_,
                    "held": fit.held_out_score_, "sem": fit.held_out_score_sem_,
                    "test": scored["log_loss"], "acc": scored["accuracy"], "fit_s": seconds,
                }
            done.append(row)
            path.write_text(json.dumps(done))
            print(name, n, test_kind, json.dumps(row), flush=True)


def table() -> None:
    print("| cell | test | draws | cv | bias | ±2 SE covers | pick's log-loss | accuracy | stacked picks | fit s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in sorted(CACHE.glob("*.json")):
        name, n, kind = path.stem.rsplit("-", 2)
        rows = json.loads(path.read_text())
        for cv in map(str, FOLDS):
            fits = [r[cv] for r in rows]
            bias, covered = zip(*(estimate_against({"held_out_score": f["held"], "held_out_score_sem": f["sem"]},
                                                   f["test"]) for f in fits), strict=True)
            covers = np.mean(covered)
            print(f"| {name} {n} | {kind} | {len(fits)} | {cv} | {pm(bias)} | {covers:.0%} "
                  f"| {np.mean([f['test'] for f in fits]):.3f} | {np.mean([f['acc'] for f in fits]):.3f} "
                  f"| {sum(f['stack'] for f in fits)} | {np.mean([f['fit_s'] for f in fits]):.0f} |")


if __name__ == "__main__":
    if sys.argv[1] == "table":
        table()
    else:
        run(sys.argv[1], sys.argv[2], int(sys.argv[3]))

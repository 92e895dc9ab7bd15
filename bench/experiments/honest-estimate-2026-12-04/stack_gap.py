"""Issue 43: where the stacked candidate's pessimism on TREC at 128 texts comes from.

For each of the protocol's 10 draws of TREC drawn alike (``--test-from-pool``)
at 128 texts, ``capture`` fits the default ``LLMLabelClassifierCV`` (from the
read store when it holds the reads) and keeps every reader's reads of the
training texts, the folds, each candidate's held-out log-probabilities, and
every reader's features of the draw's 300 wide-test texts, in a cache outside
the repository. ``analyse`` is arithmetic on that cache: the stacked
candidate (class weights None) scored in cross-validation against the same
candidate refitted on all 128 texts and scored on the wide texts, and that
gap taken apart:

- the learning curve: heads fitted on 50-95% of the texts, on the wide texts;
- the rarest class (abbreviation: 2-4 of 128 texts, all of them few-shot
  examples at ``few_shot=4``) against the other classes;
- example texts (read under a prompt with themselves swapped out) against
  the others.

Draws where the stack cannot be fitted on some fold (a class with one
training text there) are left out, as the search leaves the stack out there.

Rerun::

    LLM_LABEL_CLF_READ_STORE=~/.cache/llm_label_clf/experiments/selection-reads.sqlite \\
        python bench/experiments/honest-estimate-2026-12-04/stack_gap.py capture
    python bench/experiments/honest-estimate-2026-12-04/stack_gap.py analyse

``STACK_GAP_CACHE`` moves the cache (default
``~/.cache/llm_label_clf/experiments/stack-trec``).
"""

from __future__ import annotations

import os
import pickle
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from compare import pm  # noqa: E402

CACHE = Path(os.path.expanduser(os.environ.get("STACK_GAP_CACHE", "~/.cache/llm_label_clf/experiments/stack-trec")))
DRAWS, N, WIDE = 10, 128, 300


def capture() -> None:
    """Fits every draw, keeping what ``analyse`` needs (one pickle per draw)."""
    from sklearn.base import clone

    from bench.selection import test_and_pool, training_draw, wide_texts

    from llm_label_clf import LLMLabelClassifier, LLMLabelClassifierCV
    from llm_label_clf.reading.cache import ReadCache
    from llm_label_clf.selection import search

    CACHE.mkdir(parents=True, exist_ok=True)
    _, pool = test_and_pool("trec", 300, from_pool=True)
    kept: dict = {}
    score = search.LLMLabelClassifierCV._score

    def keeping(self, base, found, reads, classes, y_index, folds, unscored):  # type: ignore[no-untyped-def]
        held_out = score(self, base, found, reads, classes, y_index, folds, unscored)
        kept.update(found=found, reads=reads, classes=classes, y_index=y_index, folds=folds, held_out=held_out)
        return held_out

    search.LLMLabelClassifierCV._score = keeping
    with ReadCache().active():
        for d in range(DRAWS):
            path = CACHE / f"trec-{N}-{d}.pkl"
            if path.exists():
                continue
            seed, train = training_draw("trec", N, d, pool)
            X, y = train["text"].tolist(), train["label"].to_numpy()
            base = LLMLabelClassifier(progress=False, low_mass="ignore", random_state=seed)
            fit = LLMLabelClassifierCV(base).fit(X, y)
            Xw, yw = wide_texts(pool.drop(train.index), WIDE, seed)
            readers = [clone(base).set_params(**p, calibration=None).fit(X, y) for p in fit.readers_]
            # the stacked pipeline's features (its FeatureUnion's hstack), from the readers fitted once
            record = dict(kept, seed=seed, y=y, yw=yw, Fw=np.hstack([reader.transform(Xw) for reader in readers]),
                          shown=sorted({int(i) for reader in readers for i in reader.few_shot_rows_}),
                          best_params=fit.best_params_)
            path.write_bytes(pickle.dumps(record))
            print(d, fit.best_params_, flush=True)


def _stack_losses(r: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stack's cross-validated loss on every training text (NaN where a
    fold could not fit it), its features, and the wide texts' class indices."""
    stack = next(i for i, c in enumerate(r["found"]) if c.reader is None and c.params["class_weight"] is None)
    cv = np.full(len(r["y"]), np.nan)
    for (_, test), log_proba in zip(r["folds"], r["held_out"][stack], strict=True):
        if log_proba is not None:
            cv[test] = -log_proba[np.arange(len(test)), r["y_index"][test]]
    features = np.hstack([x.reads.class_logprobs for x in r["reads"]])
    return cv, features, np.searchsorted(r["classes"], r["yw"])


def analyse() -> None:
    from llm_label_clf.fitting.calibration import learned_seed
    from llm_label_clf.selection.scores import StackingHead

    warnings.simplefilter("ignore")
    rows: dict[str, list[float]] = {}
    for d in range(DRAWS):
        r = pickle.loads((CACHE / f"trec-{N}-{d}.pkl").read_bytes())
        cv, F, yw = _stack_losses(r)
        if np.isnan(cv).any():
            continue
        yi, labels, seed = r["y_index"], r["classes"][r["y_index"]], learned_seed(r["seed"])

        def wide(rows_: np.ndarray) -> np.ndarray:
            proba = StackingHead(None, seed).fit(F[rows_], labels[rows_]).predict_proba(r["Fw"])
            return -np.log(np.clip(proba[np.arange(len(yw)), yw], 1e-12, 1))

        full = wide(np.arange(len(yi)))
        folds = np.mean([wide(train) for train, _ in r["folds"]], axis=0)
        rare, rare_w = yi == 0, yw == 0
        shown = np.zeros(len(yi), dtype=bool)
        shown[r["shown"]] = True
        add = lambda key, value: rows.setdefault(key, []).append(float(value))  # noqa: E731
        add("stack: cross-validated loss − wide-test loss of the refit", cv.mean() - full.mean())
        add("  fold heads on the wide texts − the refit there (learning curve, 80%)", folds.mean() - full.mean())
        add("  fold heads: their held-out texts − the wide texts", cv.mean() - folds.mean())
        add("other classes: fold heads − refit, on the wide texts", folds[~rare_w].mean() - full[~rare_w].mean())
        add("other classes: held-out texts − wide texts, same heads", cv[~rare].mean() - folds[~rare_w].mean())
        add("  of them example texts", cv[~rare & shown].mean() - folds[~rare_w].mean())
        add("  of them the rest", cv[~rare & ~shown].mean() - folds[~rare_w].mean())
        add("rarest class: cross-validated loss", cv[rare].mean())
        add("rarest class: refit's wide-test loss", full[rare_w].mean() if rare_w.any() else np.nan)
        add("rarest class: share of training texts", rare.mean())
        add("rarest class: share of wide texts", rare_w.mean())
        rng = np.random.default_rng(d)
        for share in (0.5, 0.65, 0.8, 0.95):
            losses = []
            for _ in range(6):
                while True:  # every class kept twice, as a fold the stack can fit
                    keep = np.sort(rng.choice(len(yi), round(share * len(yi)), replace=False))
                    if np.bincount(yi[keep], minlength=len(r["classes"])).min() >= 2:
                        break
                losses.append(wide(keep).mean())
            add(f"heads fitted on {share:.0%} of the texts − the refit, on the wide texts",
                np.mean(losses) - full.mean())
    print(f"TREC drawn alike, {N} texts, the stacked candidate, {len(next(iter(rows.values())))} draws\n")
    print("| quantity (nats; mean ± SE over draws) | value |\n|---|---:|")
    for key, values in rows.items():
        finite = [v for v in values if np.isfinite(v)]
        print(f"| {key} | {pm(finite)} |")


if __name__ == "__main__":
    {"capture": capture, "analyse": analyse}[sys.argv[1]]()

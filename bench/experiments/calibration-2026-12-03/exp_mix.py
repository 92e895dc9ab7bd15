"""Paired experiment: LLMLabelClassifierCV with scored rows weighed to the labels' class mix vs not;
saves the default arm's out-of-fold, test and wide probabilities for offline calibrators, in the cache
folder outside the repository (``calib.ARRAYS``). A draw is skipped when OUT holds its record and the cache
its arrays.

usage: exp_mix.py OUT DATASETS SIZES DRAWS [WIDE]   (comma-separated lists; starts the engine)"""

import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE))
from calib import ARRAYS

from bench import selection as S

import llm_label_clf.selection.search as search_mod
from llm_label_clf import LLMLabelClassifier, LLMLabelClassifierCV
from llm_label_clf.reading.cache import ReadCache


class Draw(NamedTuple):
    """One draw of ``bench/selection.py``: its key and seed, training texts and
    labels, the 300 test texts and the wide texts."""

    key: str
    seed: int
    X: list
    y: np.ndarray
    Xt: list
    yt: np.ndarray
    Xw: list
    yw: np.ndarray


def each_draw(names, sizes, draws, wide_n, done):
    """Each draw of ``bench/selection.py`` whose key is not in ``done``, read
    under one cache per dataset that keeps the test texts' reads and forgets
    each draw's own once the caller is done with it."""
    for name in names:
        test, pool = S.test_and_pool(name, 300)
        cache = ReadCache()
        with cache.active():
            S.prewarm(test)
            mark = len(cache.entries)
            for n in sizes:
                for d in draws:
                    key = f"{name}/{n}/{d}"
                    if key in done:
                        continue
                    seed, train = S.training_draw(name, n, d, pool)
                    Xw, yw = S.wide_texts(pool.drop(train.index), wide_n, seed)
                    X, y = train["text"].tolist(), train["label"].to_numpy()
                    yield Draw(key, seed, X, y, test["text"].tolist(), test["label"].to_numpy(), Xw, yw)
                    for entry in list(cache.entries)[mark:]:
                        del cache.entries[entry]


def fit_capturing(base, X, y):
    """The default ``LLMLabelClassifierCV`` with ``recalibrate="temperature"``
    fitted on (X, y), and the chosen candidate's out-of-fold log-probabilities
    it fits the temperature on (``oof``, ``oof_rows``, ``y_index``), caught by
    wrapping the private ``_temperature`` for the length of the fit."""
    original = LLMLabelClassifierCV._temperature
    captured = {}

    def capture(held_out, y_index, folds):
        parts = [p for p in held_out if p is not None]
        rws = [t for p, (_, t) in zip(held_out, folds, strict=False) if p is not None]
        if parts:
            captured.update(oof=np.vstack(parts), oof_rows=np.concatenate(rws), y_index=np.asarray(y_index))
        return original(held_out, y_index, folds)

    LLMLabelClassifierCV._temperature = staticmethod(capture)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = LLMLabelClassifierCV(LLMLabelClassifier(**base), recalibrate="temperature").fit(X, y)
    finally:
        LLMLabelClassifierCV._temperature = staticmethod(original)
    return s, captured


def main():
    if not hasattr(search_mod, "WEIGHT_SCORED_MIX"):
        raise SystemExit(f"the weighted arm needs the library change: git apply {HERE / 'class-mix-weights.patch'}")
    out_path = sys.argv[1]
    names = sys.argv[2].split(",")
    sizes = [int(s) for s in sys.argv[3].split(",")]
    draws = range(int(sys.argv[4]))
    wide_n = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    res = json.load(open(out_path)) if os.path.exists(out_path) else {}
    ARRAYS.mkdir(parents=True, exist_ok=True)
    done = {key for key in res if (ARRAYS / f"{key.replace('/', '_')}.npz").is_file()}
    for key, seed, X, y, Xt, yt, Xw, yw in each_draw(names, sizes, draws, wide_n, done):
        t0 = time.perf_counter()
        base = dict(progress=False, low_mass="ignore", random_state=seed)
        rec = {}
        for arm, flag in (("unweighted", False), ("weighted", True)):
            search_mod.WEIGHT_SCORED_MIX = flag
            s, captured = fit_capturing(base, X, y)
            p = s.best_estimator_.predict_proba(Xt)
            r = {
                "chose": S.chose(s.best_params_),
                "best_index": int(s.best_index_),
                "best_score": float(s.best_score_),
                "held_out": float(s.held_out_score_),
                "T": float(s.temperature_),
                "test": S.scores(s.classes_, p, yt),
                "test_T": S.scores(s.classes_, s.predict_proba(Xt), yt),
            }
            if wide_n:
                pw = s.best_estimator_.predict_proba(Xw)
                r["wide"] = S.scores(s.classes_, pw, yw)
                r["wide_T"] = S.scores(s.classes_, s.predict_proba(Xw), yw)
            rec[arm] = r
            if arm == "unweighted":
                cls = list(s.classes_)
                arrays = dict(
                    captured,
                    test=p,
                    yt=np.array([cls.index(v) for v in yt]),
                    shown=np.array(s.example_rows_, dtype=int),
                )
                if wide_n:
                    arrays.update(wide=pw, yw=np.array([cls.index(v) for v in yw]))
                np.savez_compressed(str(ARRAYS / f"{key.replace('/', '_')}.npz"), **arrays)
        rec["seconds"] = time.perf_counter() - t0
        res[key] = rec
        json.dump(res, open(out_path, "w"))
        u, w = rec["unweighted"], rec["weighted"]
        print(
            key,
            f"{rec['seconds']:.0f}s",
            u["chose"],
            "|",
            w["chose"],
            "acc {:.3f} {:.3f} ece {:.3f} {:.3f} ll {:.3f} {:.3f} held {:.3f} {:.3f}".format(
                u["test"]["accuracy"],
                w["test"]["accuracy"],
                u["test"]["ece"],
                w["test"]["ece"],
                u["test"]["log_loss"],
                w["test"]["log_loss"],
                -u["held_out"],
                -w["held_out"],
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()

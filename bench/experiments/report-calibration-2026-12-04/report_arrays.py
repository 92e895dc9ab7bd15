"""Saves the report sets' arrays for the offline calibrators, to report them
(not to choose them: they were chosen on the design sets' arrays).

For each draw of ``bench/selection.py`` (its seeds, training rows, 300 test
texts and ``wide`` pool texts), one default ``LLMLabelClassifierCV`` fit with
``recalibrate="temperature"``, the chosen candidate's out-of-fold
log-probabilities caught during the fit (``exp_mix.fit_capturing``), and its
probabilities on the test and wide texts, saved as ``arrays/{name}_{n}_{d}.npz``
in the layout of ``../calibration-2026-12-03/arrays`` (which ``tshrink.py``
reads). Per-draw picks, temperatures (unshrunk: run before
``temperature.shrunk`` was merged) and seconds go to ``draws.json``.

usage: report_arrays.py DATASETS SIZES DRAWS WIDE   (comma-separated lists)"""

import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent / "calibration-2026-12-03"))
from exp_mix import each_draw, fit_capturing

from bench import selection as S


def main():
    names, sizes = sys.argv[1].split(","), [int(s) for s in sys.argv[2].split(",")]
    draws, wide_n = range(int(sys.argv[3])), int(sys.argv[4])
    log = HERE / "draws.json"
    res = json.loads(log.read_text()) if log.exists() else {}
    (HERE / "arrays").mkdir(exist_ok=True)
    for key, seed, X, y, Xt, yt, Xw, yw in each_draw(names, sizes, draws, wide_n, res):
        began = time.perf_counter()
        base = dict(progress=False, low_mass="ignore", random_state=seed)
        search, captured = fit_capturing(base, X, y)
        classes = list(search.classes_)
        p, pw = search.best_estimator_.predict_proba(Xt), search.best_estimator_.predict_proba(Xw)
        np.savez_compressed(
            str(HERE / "arrays" / f"{key.replace('/', '_')}.npz"),
            **captured,
            test=p,
            yt=np.array([classes.index(v) for v in yt]),
            wide=pw,
            yw=np.array([classes.index(v) for v in yw]),
            shown=np.array(search.example_rows_, dtype=int),
        )
        res[key] = {
            "chose": S.chose(search.best_params_),
            "T": float(search.temperature_),
            "wide": S.scores(search.classes_, pw, yw),
            "seconds": time.perf_counter() - began,
        }
        log.write_text(json.dumps(res, indent=1))
        r = res[key]
        print(
            key,
            f"{r['seconds']:.0f}s",
            r["chose"],
            f"T {r['T']:.2f}",
            f"wide ECE {r['wide']['ece']:.3f} acc {r['wide']['accuracy']:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

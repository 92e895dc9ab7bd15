"""Saves the report sets' arrays for the offline calibrators, to report them
(not to choose them: they were chosen on the design sets' arrays).

For each draw of ``bench/selection.py`` (its seeds, training rows, 300 test
texts and ``wide`` pool texts), one default ``LLMLabelClassifierCV`` fit with
``recalibrate="temperature"``, the chosen candidate's out-of-fold
log-probabilities caught during the fit (``exp_mix.fit_capturing``), and its
probabilities on the test and wide texts, saved as ``{name}_{n}_{d}.npz`` in
``ARRAYS``, this experiment's cache folder outside the repository, in the
layout of ``../calibration-2026-12-03``'s arrays (which ``tshrink.py`` reads).
Per-draw picks, temperatures (unshrunk: run before ``temperature.shrunk`` was
merged) and seconds go to ``draws.json`` here. A draw is skipped when
``draws.json`` holds its record and the cache its arrays.

usage: report_arrays.py DATASETS SIZES DRAWS WIDE   (comma-separated lists; starts the engine)"""

import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent / "calibration-2026-12-03"))
from calib import experiments_cache, saved
from exp_mix import each_draw, fit_capturing

from bench import selection as S

#: The report sets' arrays: per draw, the pick's out-of-fold log-probabilities, its test and wide probabilities.
ARRAYS = experiments_cache(HERE.name) / "arrays"


def arrays() -> list[str]:
    """The saved arrays (emotion and AG News, 64 and 128 texts, 10 draws, 1000 wide texts); when the cache
    has none, this script writes them first, with the engine."""
    return saved(ARRAYS, writer=[HERE / "report_arrays.py", "emotion,ag_news", "64,128", "10", "1000"])


def main():
    names, sizes = sys.argv[1].split(","), [int(s) for s in sys.argv[2].split(",")]
    draws, wide_n = range(int(sys.argv[3])), int(sys.argv[4])
    log = HERE / "draws.json"
    res = json.loads(log.read_text()) if log.exists() else {}
    ARRAYS.mkdir(parents=True, exist_ok=True)
    done = {key for key in res if (ARRAYS / f"{key.replace('/', '_')}.npz").is_file()}
    for key, seed, X, y, Xt, yt, Xw, yw in each_draw(names, sizes, draws, wide_n, done):
        began = time.perf_counter()
        base = dict(progress=False, low_mass="ignore", random_state=seed)
        search, captured = fit_capturing(base, X, y)
        classes = list(search.classes_)
        p, pw = search.best_estimator_.predict_proba(Xt), search.best_estimator_.predict_proba(Xw)
        np.savez_compressed(
            str(ARRAYS / f"{key.replace('/', '_')}.npz"),
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

"""Offline: how low can the wide-test ECE go at all, with the calibration
maps measured so far, given as many labels as the folds score?

Three bounds per draw, on the pick's saved wide probabilities (no engine):

* oracle: the temperature, and the temperature with a bias per class
  (``calib.fit_bias``, unpenalised), fitted on the 1000 wide texts and scored
  on the same texts: the best either map can do, optimistic (in-sample);
* fresh labels: the same maps (and the shrunk temperature of
  ``selection.temperature.shrunk``) fitted on m wide texts drawn at random,
  m = the texts the draw's folds scored, and scored on the other wide texts:
  what m labels give with no selection luck, which the folds cannot beat;
* no labels: the pick's probabilities debiased as batch calibration does
  (``fitting.calibration.mean_bias`` over the predicted texts, toward the
  training labels' prior), alone and after the shrunk temperature.

usage: calib_bounds.py [ARRAYS_FOLDER ...]   (cells with 64 texts or more)

Without a folder it reads the design sets' arrays (``calib.ARRAYS``) and the
report sets' (``report_arrays.ARRAYS``), both in their experiments' cache
folders outside the repository, each regenerated with the engine when absent."""

import collections
import sys
from pathlib import Path

import numpy as np
from scipy.special import log_softmax

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent / "calibration-2026-12-03"))
sys.path.insert(0, str(HERE))
from calib import arrays, fit_bias, saved, sem
from report_arrays import arrays as report_arrays

from bench.selection import ece_floor
from bench.selection import expected_calibration_error as ece

from llm_label_clf.fitting.calibration import class_prior, debias, mean_bias
from llm_label_clf.selection.temperature import SHRINK_TEXTS, fit_temperature, shrunk, tempered

FRESH_TRIALS = 5
COLUMNS = (
    "none",
    "oracle T",
    "oracle bias+T",
    "fresh: shrunk T",
    "fresh: T",
    "fresh: bias+T",
    "fresh: bias+T shrunk",
    "no labels: debias",
    "folds' shrunk T + debias",
    "floor",
)


def with_bias(log_proba, theta, weight=1.0):
    """Log-probabilities under a fitted bias+T map (``calib.fit_bias``'s theta: log T, then one bias per
    class), its parameters scaled by ``weight`` (the shrink)."""
    return log_softmax(log_proba / np.exp(weight * theta[0]) + weight * theta[1:], axis=1)


def one_draw(z, rng):
    """The row of COLUMNS for one saved draw."""
    proba, y = z["wide"], z["yw"]
    log_proba = np.log(np.clip(proba, 1e-300, None))
    classes = np.arange(proba.shape[1])

    def score(lp, rows=slice(None)):
        return ece(classes, np.exp(lp[rows]), y[rows])

    rows = z["oof_rows"]
    m = len(rows)
    weight = m / (m + SHRINK_TEXTS)  # the weight shrunk() gives log T, for the bias+T map
    fresh = []
    for _ in range(FRESH_TRIALS):
        order = rng.permutation(len(y))
        fit_rows, rest = order[:m], order[m:]
        temperature = fit_temperature(log_proba[fit_rows], y[fit_rows])
        theta = fit_bias(log_proba[fit_rows], y[fit_rows], 1.0)
        fresh.append(
            [
                score(tempered(log_proba, shrunk(temperature, m)), rest),
                score(tempered(log_proba, temperature), rest),
                score(with_bias(log_proba, theta), rest),
                score(with_bias(log_proba, theta, weight), rest),
            ]
        )
    prior = class_prior(z["y_index"], proba.shape[1])
    folds_t = tempered(log_proba, shrunk(fit_temperature(z["oof"], z["y_index"][rows]), m))
    return [
        score(log_proba),
        score(tempered(log_proba, fit_temperature(log_proba, y))),
        score(with_bias(log_proba, fit_bias(log_proba, y, 0.0))),
        *np.mean(fresh, axis=0),
        score(debias(log_proba, mean_bias(log_proba, prior))),
        score(debias(folds_t, mean_bias(folds_t, prior))),
        ece_floor(classes, proba),
    ]


def main():
    rng = np.random.default_rng(0)
    cells = collections.defaultdict(list)
    files = [f for folder in sys.argv[1:] for f in saved(folder)] if len(sys.argv) > 1 else arrays() + report_arrays()
    for path in files:
        z = np.load(path)
        dataset, texts, _ = Path(path).stem.rsplit("_", 2)
        if "wide" in z and "oof_rows" in z and int(texts) >= 64:
            cells[(dataset, int(texts))].append(one_draw(z, rng))
    print(f"wide-test ECE, mean ± standard error over the draws; fresh: {FRESH_TRIALS} random fits per draw")
    print("| set, texts | draws | " + " | ".join(COLUMNS) + " |")
    print("|---|---:|" + "---:|" * len(COLUMNS))
    for (dataset, texts), rows in sorted(cells.items()):
        table = np.array(rows)
        means = " | ".join(f"{c.mean():.3f} ± {sem(c):.3f}" for c in table.T)
        print(f"| {dataset} {texts} | {len(table)} | {means} |")


if __name__ == "__main__":
    main()

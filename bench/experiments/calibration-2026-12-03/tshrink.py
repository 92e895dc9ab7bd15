"""Offline: the held-out temperature with its log shrunk toward 0 by the
number of texts the folds scored, log T' = log T * m / (m + n0).

A temperature fitted on m out-of-fold texts is a noisy estimate and, on the
pick, a lucky one; shrinking its log toward 0 (no temperature) with a weight
that grows with m is the usual empirical-Bayes form. n0 is the one knob, to
be chosen on these design draws. Compared per cell on the wide test, paired
against no temperature (mean ± standard error over the draws): the full T,
a fixed T^0.5, and m / (m + n0) for n0 in 32, 64, 128. Reads the pick's
saved out-of-fold and wide probabilities: exp_mix.py's (``calib.ARRAYS``, in
the cache folder outside the repository; regenerated with the engine when
absent), or another folder in that layout, such as the report sets' arrays of
../report-calibration-2026-12-04/report_arrays.py in that experiment's cache.

usage: tshrink.py [ARRAYS_FOLDER]   (no engine once the arrays are there)"""

import collections
import sys

import numpy as np
from calib import arrays, ece_, fit_bias, fitT, nll, saved, sem
from scipy.special import softmax

N0 = (32, 64, 128)
PENALTIES = (1.0, 10.0)


def main():
    res = collections.defaultdict(lambda: collections.defaultdict(list))
    weights = collections.defaultdict(list)
    files = saved(sys.argv[1]) if len(sys.argv) > 1 else arrays()
    for f in files:
        z = np.load(f)
        ds, n, _ = Path_stem(f).rsplit("_", 2)
        if "oof" not in z or "wide" not in z:
            continue
        rows, yi = z["oof_rows"], z["y_index"]
        T = fitT(z["oof"], yi[rows])
        m = len(rows)
        P, yy = z["wide"], z["yw"]
        cls = np.arange(P.shape[1])
        lp = np.log(np.clip(P, 1e-300, None))
        shrinks = {"none": 0.0, "T": 1.0, "T^0.5": 0.5} | {f"n0={n0}": m / (m + n0) for n0 in N0}
        for name, lam in shrinks.items():
            Q = softmax(lp / T**lam, axis=1)
            res[(ds, int(n))][name].append((ece_(cls, Q, yy), nll(np.log(np.clip(Q, 1e-12, None)), yy)))
        for penalty in PENALTIES:
            theta = fit_bias(z["oof"], yi[rows], penalty)
            for name, lam in ({"b+T": 1.0} | {f"b+T n0={n0}": m / (m + n0) for n0 in N0}).items():
                Q = softmax(lp / np.exp(lam * theta[0]) + lam * theta[1:], axis=1)
                res[(ds, int(n))][f"{name} pen={penalty:g}"].append(
                    (ece_(cls, Q, yy), nll(np.log(np.clip(Q, 1e-12, None)), yy))
                )
        weights[(ds, int(n))].append(m)
    print("wide-test ECE (log-loss) per cell; in brackets, minus no temperature, paired: mean ± SE over draws")
    totals = collections.defaultdict(list)
    for key in sorted(res):
        base = np.array(res[key]["none"])
        print(f"{key[0]} {key[1]}: {len(base)} draws, folds scored {np.mean(weights[key]):.0f} texts")
        for name, v in res[key].items():
            a = np.array(v)
            d = a - base
            if key[1] >= 64:
                totals[name].append(d[:, 0].mean())
            print(
                f"   {name:7s} ECE {a[:, 0].mean():.3f}±{sem(a[:, 0]):.3f} ({d[:, 0].mean():+.3f}±{sem(d[:, 0]):.3f})"
                f"  log-loss {a[:, 1].mean():.3f} ({d[:, 1].mean():+.3f}±{sem(d[:, 1]):.3f})"
            )
    print(
        "mean change in ECE over the cells at 64 and 128 texts:",
        ", ".join(f"{k} {np.mean(v):+.4f}" for k, v in totals.items()),
    )


def Path_stem(f):
    return f.split("/")[-1][:-4]


if __name__ == "__main__":
    main()

"""How well can one temperature be fitted from n texts with no selection at all? Fit T on n random wide texts
of a draw, score the other wide texts; compare with T fitted on all of them (the oracle) and with no T.
Reads exp_mix.py's arrays (``calib.ARRAYS``, in the cache folder outside the repository; regenerated with the
engine when absent).

usage: tsample.py   (no engine once the arrays are in the cache)"""

import collections
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
D = str(HERE)
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, D)
from calib import arrays, fitT
from scipy.special import softmax

from bench.selection import expected_calibration_error as ece

rng = np.random.default_rng(0)
R = collections.defaultdict(list)
for f in arrays():
    z = np.load(f)
    key = f.split("/")[-1][:-4]
    ds, n, d = key.rsplit("_", 2)
    if "wide" not in z or "oof_rows" not in z or int(n) < 64:
        continue
    P, y = z["wide"], z["yw"]
    lp = np.log(np.clip(P, 1e-300, None))
    K = P.shape[1]
    cls = np.arange(K)
    m = len(z["oof_rows"])
    To = fitT(lp, y)
    for _rep in range(10):
        idx = rng.permutation(len(y))
        a, b = idx[:m], idx[m:]
        T = fitT(lp[a], y[a])
        R[(ds, n)].append(
            (
                ece(cls, P[b], y[b]),
                ece(cls, softmax(lp[b] / T, axis=1), y[b]),
                ece(cls, softmax(lp[b] / To, axis=1), y[b]),
                m,
            )
        )
for k, v in sorted(R.items()):
    a = np.array(v)
    print(
        *k,
        f"n_fit~{a[:, 3].mean():.0f}",
        "ECE none {:.3f}  T from n random texts {:.3f}  oracle T {:.3f}".format(*tuple(a[:, :3].mean(0))),
    )

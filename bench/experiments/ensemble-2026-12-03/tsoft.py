"""Offline: the held-out temperature only where it softens, T' = max(1, T).

The folds' T sharpens (T < 1) in most draws, and at 16-64 texts that is the
choice's luck; softening is what a lucky pick would need. Evaluated on the
pick's saved out-of-fold, and wide probabilities of the 80 design draws
(../calibration-2026-12-03's arrays, in that experiment's cache folder outside
the repository: ``calib.ARRAYS``, regenerated with the engine when absent),
with that folder's calib.py helpers. No engine once they are there."""

import collections
import sys
from pathlib import Path

import numpy as np
from scipy.special import softmax

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "calibration-2026-12-03"))
from calib import arrays, ece_, fitT, sem  # noqa: E402  (that folder's helpers)

res = collections.defaultdict(lambda: collections.defaultdict(list))
for f in arrays():
    z = np.load(f)
    if "oof" not in z or "wide" not in z:
        continue
    ds, n, _ = Path(f).stem.rsplit("_", 2)
    yi, rows = z["y_index"], z["oof_rows"]
    T = fitT(z["oof"], yi[rows])
    P, yw = z["wide"], z["yw"]
    lp, cls = np.log(np.clip(P, 1e-300, None)), np.arange(P.shape[1])
    for name, t in (("none", 1.0), ("T", T), ("max(1, T)", max(1.0, T))):
        res[(ds, int(n))][name].append(ece_(cls, softmax(lp / t, axis=1), yw))
    res[(ds, int(n))]["share of draws with T > 1"].append(float(T > 1))
for key in sorted(res):
    print(*key, "wide-test ECE, draws:", len(res[key]["none"]))
    for name, v in res[key].items():
        print(f"   {name:26s} {np.mean(v):.3f} ± {sem(np.array(v)):.3f}")

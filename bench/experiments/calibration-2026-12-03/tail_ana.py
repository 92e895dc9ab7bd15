"""The learned calibration's C, refitted on learned_tail.py's saved reads (``calib.TAIL_ARRAYS``, in the
cache folder outside the repository; regenerated with the engine when absent).

usage: tail_ana.py   (no engine once the reads are in the cache)"""

import collections
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE))

from calib import tail_arrays

from bench.selection import expected_calibration_error as ece

from llm_label_clf.fitting.calibration import LearnedCalibrator, _logistic

R = collections.defaultdict(lambda: collections.defaultdict(list))
for f in tail_arrays():
    z = np.load(f)
    F, Fw, y, yw, seed = z["F"], z["Fw"], z["y"], z["yw"], int(z["seed"])
    kind = "fewshot" if not f.endswith("0.npz") else "zeroshot"
    K = 2
    cls = np.arange(K)

    def rec(name, P):
        over = P.max(1).mean() - (P.argmax(1) == yw).mean()
        R[kind][name].append((ece(cls, P, yw), -np.mean(np.log(np.clip(P[np.arange(len(yw)), yw], 1e-12, None))), over))

    base = LearnedCalibrator.fit(F, y, K, random_state=seed)
    rec("current", np.exp(base.log_proba(Fw, K)))
    for C in (0.01, 0.1, 1.0, 10.0):
        m = LearnedCalibrator.fit(F, y, K, random_state=seed, Cs=[C])
        rec(f"C={C}", np.exp(m.log_proba(Fw, K)))
    one = _logistic(base.C, None).fit(F, y)
    rec("refit", one.predict_proba(Fw))
    d = (F[:, 1] - F[:, 0])[:, None]
    dw = (Fw[:, 1] - Fw[:, 0])[:, None]
    m = LearnedCalibrator.fit(d, y, K, random_state=seed)
    rec("logit-only", np.exp(m.log_proba(dw, K)))
    raw = np.exp(Fw)
    rec("raw", raw / raw.sum(1, keepdims=True))
    R[kind]["_C"].append((base.C, 0, 0))
    # how confident are training rows vs wide rows under current?
    Ptr = np.exp(base.log_proba(F, K))
    R[kind]["_conf_train_vs_wide"].append((Ptr.max(1).mean(), np.exp(base.log_proba(Fw, K)).max(1).mean(), 0))
for kind in R:
    print(kind, len(R[kind]["current"]))
    for name, v in R[kind].items():
        a = np.array(v)
        print(
            f"   {name:22s} ECE {a[:, 0].mean():.3f}±{a[:, 0].std(ddof=1) / np.sqrt(len(a)):.3f} "
            f"ll {a[:, 1].mean():.3f} over {a[:, 2].mean():+.3f}"
        )
    print("   Cs chosen", collections.Counter(x[0] for x in R[kind]["_C"]))

"""Offline: a temperature fitted on the selection's own out-of-fold
probabilities rather than the pick's.

The pick's out-of-fold log-probabilities are where it looked best of 13
candidates, so a temperature fitted on them inherits the winner's luck (on
SST-2 at 64 texts the folds ask for T near 1 while new texts need 1.1-2.6).
Here each fold's rows get the probabilities of the candidate that the *other*
folds' rows would have picked (selection done without the rows it is scored
on: nested cross-validation of the whole search, no extra read), and one
temperature is fitted on those. Compared on the wide test, on the pick:
no temperature, T fitted on the pick's out-of-fold rows (the library's
``recalibrate="temperature"``), T fitted on the nested rows, and the same
applied only where it softens (T > 1). Same trials as ens_offline.py (its
candidates, labelled sets, folds and seeds), on the same saved reads
(``ens_offline.WIDE_READS``, in the cache folder outside the repository;
regenerated with the engine when absent). Otherwise no engine is started.

usage: nested_t.py DATASET SIZE LABELLED [TRIALS]"""

import collections
import sys
from pathlib import Path

import numpy as np
from ens_offline import READERS, ece, ece_floor, fit_temperature, logloss, softmax, trial, wide_reads


def tempered(P, T):
    return softmax(np.log(np.clip(P, 1e-12, None)) / T)


def nested_oof(cands, y, folds):
    """Each fold's rows scored by the candidate the other folds' rows pick."""
    out = np.zeros_like(cands[0][1])
    switched = 0
    full = int(np.argmin([logloss(c[1], y) for c in cands]))
    for _, te in folds:
        rest = np.setdiff1d(np.arange(len(y)), te)
        inner = int(np.argmin([logloss(c[1][rest], y[rest]) for c in cands]))
        switched += inner != full
        out[te] = cands[inner][1][te]
    return out, switched / len(folds)


def main():
    name, size, labelled = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    trials = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    R = collections.defaultdict(list)
    for d, f in enumerate(wide_reads(name, size)):
        z = np.load(f)
        reads, yw = {r: z[r] for r in READERS}, z["yw"]
        K = int(max(r.shape[1] for r in reads.values()))
        for t in range(trials):
            y, ye, cands, folds = trial(reads, yw, K, int(Path(f).stem.split("_")[-1]), t, labelled)
            best = int(np.argmin([logloss(c[1], y) for c in cands]))
            pick_oof, pick_test = cands[best][1], cands[best][2]
            nested, switched = nested_oof(cands, y, folds)
            t_pick = fit_temperature(np.log(np.clip(pick_oof, 1e-12, None)), y)
            t_nest = fit_temperature(np.log(np.clip(nested, 1e-12, None)), y)
            rules = {
                "none": pick_test,
                "T pick": tempered(pick_test, t_pick),
                "T nested": tempered(pick_test, t_nest),
                "max(1,T nested)": tempered(pick_test, max(1.0, t_nest)),
                "sqrt(T pick)": tempered(pick_test, np.sqrt(t_pick)),
                "sqrt(T nested)": tempered(pick_test, np.sqrt(t_nest)),
            }
            cls = np.arange(K)
            for rule, P in rules.items():
                acc = (P.argmax(1) == ye).mean()
                R[rule].append((d, ece(cls, P, ye), logloss(P, ye), P.max(1).mean() - acc))
            R["floor"].append((d, ece_floor(cls, pick_test), 0, 0))
            R["_t"].append((d, t_pick, t_nest, switched))
            # the oracle: T fitted on the test rows themselves
            t_best = fit_temperature(np.log(np.clip(pick_test, 1e-12, None)), ye)
            R["_oracle"].append((d, t_best, ece(cls, tempered(pick_test, t_best), ye), 0))

    def by_draw(rows):
        a = np.array(rows)
        return np.array([a[a[:, 0] == i, 1:].mean(0) for i in np.unique(a[:, 0])])

    base = by_draw(R["none"])
    print(
        f"{name}: {len(base)} draws of {size} texts, wide reads, {labelled} labelled per trial, "
        f"{len(R['none'])} trials (mean ± standard error over the draws; 'minus none' is paired)"
    )
    for rule in ("none", "T pick", "T nested", "max(1,T nested)", "sqrt(T pick)", "sqrt(T nested)", "floor"):
        a = by_draw(R[rule])
        m, se = a.mean(0), a.std(0, ddof=1) / np.sqrt(len(a))
        line = f"  {rule:16s} ECE {m[0]:.3f}±{se[0]:.3f}  log-loss {m[1]:.3f}  over {m[2]:+.3f}"
        if rule not in ("none", "floor"):
            dd = a - base
            dm, dse = dd.mean(0), dd.std(0, ddof=1) / np.sqrt(len(dd))
            line += f"   minus none: ECE {dm[0]:+.3f}±{dse[0]:.3f} log-loss {dm[1]:+.3f}±{dse[1]:.3f}"
        print(line)
    t = np.array(R["_t"])[:, 1:]
    o = np.array(R["_oracle"])[:, 1:]
    print(
        f"  T on the pick's rows: median {np.median(t[:, 0]):.2f} (above 1 in {np.mean(t[:, 0] > 1):.0%}); "
        f"T nested: median {np.median(t[:, 1]):.2f} (above 1 in {np.mean(t[:, 1] > 1):.0%}); "
        f"oracle T on the test rows: median {np.median(o[:, 0]):.2f} (above 1 in {np.mean(o[:, 0] > 1):.0%}), "
        f"its ECE {o[:, 1].mean():.3f}; folds whose inner pick differs: {t[:, 2].mean():.0%}"
    )
    lo = np.log(o[:, 0])
    print(
        f"  correlation of log T with the oracle's, over trials: pick {np.corrcoef(np.log(t[:, 0]), lo)[0, 1]:+.2f}, "
        f"nested {np.corrcoef(np.log(t[:, 1]), lo)[0, 1]:+.2f}"
    )


if __name__ == "__main__":
    main()

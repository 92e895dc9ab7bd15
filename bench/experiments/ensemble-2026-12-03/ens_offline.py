"""Offline: does a weighted average of candidates beat picking one?

Reads saved by ens_reads.py (WIDE_READS/{dataset}_{n}_{draw}.npz, in the
cache folder outside the repository; regenerated with the engine, 10 draws,
when none is there for DATASET and SIZE): four
readers (the two plain default prompts, few-shot 4 and zero-shot), fitted on
one draw of bench/selection.py, read the same wide texts. Each trial takes
``labelled`` random wide texts as the labelled set and the rest as the test:
candidates are reader x {raw, batch, learned} plus the learned regression
over all four readers side by side (the stacked candidate), each scored by
5-fold out-of-fold log-loss on the labelled texts. Compared on the test:
the pick (best out-of-fold log-loss, what the search does), and greedy
ensemble selection (Caruana et al. 2004: 20 rounds, with replacement, each
adding the candidate that most lowers the mixture's out-of-fold log-loss),
averaging probabilities or their logs, with and without one temperature
fitted on the mixture's out-of-fold log-probabilities. No engine is started.

usage: ens_offline.py DATASET SIZE LABELLED [TRIALS]"""

import collections
import sys
from pathlib import Path

import numpy as np
from sklearn.model_selection import StratifiedKFold

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent / "calibration-2026-12-03"))
from calib import experiments_cache, saved  # that folder's cache helpers

from bench.selection import ece_floor
from bench.selection import expected_calibration_error as ece

from llm_label_clf.fitting.calibration import MIN_BATCH, LearnedCalibrator, class_prior, debias, mean_bias
from llm_label_clf.selection.temperature import fit_temperature

READERS = ("default", "instruction", "default0", "instruction0")
#: ens_reads.py's reads: per draw, the four readers' label log-probabilities of the wide texts.
WIDE_READS = experiments_cache(HERE.name) / "wide_reads"


def wide_reads(name: str, size: int, draws: int = 10) -> list[str]:
    """The saved reads of DATASET at SIZE texts; when the cache has none, ens_reads.py writes them first."""
    return saved(WIDE_READS, f"{name}_{size}_*.npz", writer=[HERE / "ens_reads.py", name, size, draws])


def softmax(F):
    P = np.exp(F - F.max(1, keepdims=True))
    return P / P.sum(1, keepdims=True)


def logloss(P, y):
    return float(-np.mean(np.log(np.clip(P[np.arange(len(y)), y], 1e-12, None))))


def batch(F_train, F_test, prior):
    bias = mean_bias(F_test if len(F_test) >= MIN_BATCH else F_train, prior)
    return np.exp(debias(F_test, bias))


def candidates(F, y, Fe, seed, K, folds, raw=True):
    """(name, out-of-fold proba on the labelled rows, proba on the test rows)."""
    prior = class_prior(y, K)
    out = []
    if raw:
        out.append(("raw", softmax(F), softmax(Fe)))
        oof = np.zeros((len(F), K))
        for tr, te in folds:
            oof[te] = batch(F[tr], F[te], class_prior(y[tr], K))
        out.append(("batch", oof, batch(F, Fe, prior)))
    oof = np.zeros((len(F), K))
    try:
        for tr, te in folds:
            oof[te] = np.exp(LearnedCalibrator.fit(F[tr], y[tr], K, random_state=seed).log_proba(F[te], K))
    except ValueError:  # a class with under 2 texts in a fold's training part: the search scores it NaN
        return out
    out.append(("learned", oof, np.exp(LearnedCalibrator.fit(F, y, K, random_state=seed).log_proba(Fe, K))))
    return out


def mix(ps, w, geometric):
    if geometric:
        return softmax(sum(wi * np.log(np.clip(p, 1e-12, None)) for wi, p in zip(w, ps, strict=True) if wi))
    return sum(wi * p for wi, p in zip(w, ps, strict=True) if wi)


def greedy(oofs, y, geometric, rounds=20):
    chosen = []
    for _ in range(rounds):

        def loss(i):
            w = np.bincount(chosen + [i], minlength=len(oofs)) / (len(chosen) + 1)
            return logloss(mix(oofs, w, geometric), y)

        chosen.append(min(range(len(oofs)), key=loss))
    return np.bincount(chosen, minlength=len(oofs)) / len(chosen)


def trial(reads, yw, K, draw, t, labelled):
    """Trial ``t`` of a draw: the labelled rows' labels, the test rows' labels,
    and the 13 candidates (name, out-of-fold proba, test proba)."""
    seed = 1000 * draw + t
    rng = np.random.default_rng(seed)
    # 2 texts of every class first (as the search needs to score them), then at random
    first = np.concatenate([rng.choice(np.flatnonzero(yw == c), 2, replace=False) for c in range(K)])
    rest = rng.permutation(np.setdiff1d(np.arange(len(yw)), first))
    lab = np.concatenate([first, rest[: labelled - len(first)]])
    ev = rest[labelled - len(first) :]
    y, ye = yw[lab], yw[ev]
    k = int(min(5, np.bincount(y, minlength=K).min()))
    folds = list(StratifiedKFold(k, shuffle=True, random_state=seed).split(y, y))
    cands = []
    for reader, Fw in reads.items():
        for cal, oof, pe in candidates(Fw[lab], y, Fw[ev], seed, K, folds):
            cands.append((f"{reader}/{cal}", oof, pe))
    S = np.hstack(list(reads.values()))
    cands += [("stack/learned", *c[1:]) for c in candidates(S[lab], y, S[ev], seed, K, folds, raw=False)]
    return y, ye, cands, folds


def main():
    name, size, labelled = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    trials = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    R = collections.defaultdict(list)
    picked, members = collections.Counter(), collections.Counter()
    for f in wide_reads(name, size):
        z = np.load(f)
        reads, yw = {r: z[r] for r in READERS}, z["yw"]
        K = int(max(r.shape[1] for r in reads.values()))
        for t in range(trials):
            y, ye, cands, _ = trial(reads, yw, K, int(Path(f).stem.split("_")[-1]), t, labelled)
            best = int(np.argmin([logloss(c[1], y) for c in cands]))
            rules = {"pick": cands[best][2]}
            for geometric in (False, True):
                w = greedy([c[1] for c in cands], y, geometric)
                rules["greedy-geo" if geometric else "greedy"] = mix([c[2] for c in cands], w, geometric)
                T = fit_temperature(np.log(np.clip(mix([c[1] for c in cands], w, geometric), 1e-12, None)), y)
                key = "greedy-geo+T" if geometric else "greedy+T"
                rules[key] = softmax(np.log(np.clip(rules[key[:-2]], 1e-12, None)) / T)
                if not geometric:
                    members.update(c[0] for wi, c in zip(w, cands, strict=True) if wi)
                    R["_members"].append((int((w > 0).sum()),))
            picked[cands[best][0]] += 1
            cls = np.arange(K)
            for rule, P in rules.items():
                R[rule].append(
                    (
                        len(R["_draws"]),
                        ece(cls, P, ye),
                        logloss(P, ye),
                        (P.argmax(1) == ye).mean(),
                        P.max(1).mean() - (P.argmax(1) == ye).mean(),
                    )
                )
            R["floor"].append((len(R["_draws"]), ece_floor(cls, rules["pick"]), 0, 0, 0))
        R["_draws"].append(f)

    def by_draw(rows):  # trials of one draw share its reads: the draws are the independent units
        a = np.array(rows)
        return np.array([a[a[:, 0] == d, 1:].mean(0) for d in np.unique(a[:, 0])])

    n = len(R["pick"])
    print(
        f"{name}: {len(R['_draws'])} draws of {size} texts, wide reads, {labelled} labelled per trial, {n} trials"
        " (mean ± standard error over the draws)"
    )
    pick = by_draw(R["pick"])
    for rule in ("pick", "greedy", "greedy-geo", "greedy+T", "greedy-geo+T", "floor"):
        a = by_draw(R[rule])
        se = a.std(0, ddof=1) / np.sqrt(len(a))
        m = a.mean(0)
        line = f"  {rule:11s} ECE {m[0]:.3f}±{se[0]:.3f}  log-loss {m[1]:.3f}  acc {m[2]:.3f}  over {m[3]:+.3f}"
        if rule.startswith("greedy"):
            d = a - pick
            dse = d.std(0, ddof=1) / np.sqrt(len(d))
            dm = d.mean(0)
            line += (
                f"   minus pick: ECE {dm[0]:+.3f}±{dse[0]:.3f} log-loss {dm[1]:+.3f}±{dse[1]:.3f}"
                f" acc {100 * dm[2]:+.1f}±{100 * dse[2]:.1f} pts"
            )
        print(line)
    print(
        "  members per ensemble",
        np.mean(R["_members"]).round(2),
        "picked:",
        picked.most_common(4),
        "in ensembles:",
        members.most_common(4),
    )


if __name__ == "__main__":
    main()

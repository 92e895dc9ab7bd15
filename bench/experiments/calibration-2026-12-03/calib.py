"""The calibrators on the saved picks, and this folder's shared helpers: the cache folder outside the
repository where the experiments' arrays live (``experiments_cache``), and ``saved``, which lists a folder's
arrays and, when it has none, first runs the script that writes them (with the engine).

usage: calib.py   (no engine, once arrays/ is in the cache)"""

import collections
import glob
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from scipy.special import logsumexp, softmax

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from bench.selection import ece_floor
from bench.selection import expected_calibration_error as ece_

from llm_label_clf.selection.temperature import LOG_T_BOUNDS, fit_temperature


def experiments_cache(name: str) -> Path:
    """The folder outside the repository for experiment ``name``'s saved arrays:
    ``$LLM_LABEL_CLF_EXPERIMENTS_CACHE/NAME``, else ``~/.cache/llm_label_clf/experiments/NAME``."""
    root = os.environ.get("LLM_LABEL_CLF_EXPERIMENTS_CACHE", Path.home() / ".cache" / "llm_label_clf" / "experiments")
    return Path(root) / name


#: exp_mix.py's arrays: per draw, the pick's out-of-fold log-probabilities, its test and wide probabilities.
ARRAYS = experiments_cache(HERE.name) / "arrays"
#: learned_tail.py's reads: per draw and reader, the label log-probabilities of the texts scored and the wide texts.
TAIL_ARRAYS = experiments_cache(HERE.name) / "tail_arrays"


def saved(folder: Path, pattern: str = "*.npz", writer: list[str] | None = None) -> list[str]:
    """The arrays in ``folder`` matching ``pattern``, sorted. When there are none, runs ``writer`` (a script and
    its arguments; it starts the engine) to write them first; without one, exits saying which folder is empty."""
    files = sorted(glob.glob(str(Path(folder) / pattern)))
    if files:
        return files
    if writer is None:
        raise SystemExit(f"no {pattern} in {folder}: run the script that writes them first (see this folder's README)")
    command = [sys.executable, *map(str, writer)]
    print(f"no {pattern} in {folder}: regenerating them with the engine: {' '.join(command)}", file=sys.stderr)
    if subprocess.run(command).returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {folder} still holds no arrays")
    files = sorted(glob.glob(str(Path(folder) / pattern)))
    if not files:
        raise SystemExit(f"{' '.join(command)} wrote no {pattern} in {folder}")
    return files


def arrays() -> list[str]:
    """exp_mix.py's arrays (the 80 design draws), regenerated with the README's command when the cache has none."""
    return saved(ARRAYS, writer=[HERE / "exp_mix.py", HERE / "mix.json", "sst2,trec", "16,32,64,128", "10", "1000"])


def tail_arrays() -> list[str]:
    """learned_tail.py's reads (SST-2, 64 texts, 10 draws), regenerated with the engine when the cache has none."""
    return saved(TAIL_ARRAYS, writer=[HERE / "learned_tail.py", "sst2", "64", "10"])


def sem(values):
    return values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0


def lsm(z):
    return z - logsumexp(z, axis=1, keepdims=True)


def nll(lp, y, w=None):
    return -np.average(lp[np.arange(len(y)), y], weights=w)


def mixw(yi, rows):
    K = yi.max() + 1
    a = np.bincount(yi, minlength=K) / len(yi)
    b = np.bincount(yi[rows], minlength=K) / len(rows)
    r = np.divide(a, b, out=np.zeros(K), where=b > 0)
    return r[yi[rows]]


def fitT(lp, y, w=None):
    """The library's ``fit_temperature``; with weights ``w`` (which it does
    not take on main) the same bounded search over log T, weighted."""
    if w is None:
        return fit_temperature(lp, y)

    def f(t):
        return nll(lsm(lp / np.exp(t)), y, w)

    return np.exp(minimize_scalar(f, bounds=LOG_T_BOUNDS, method="bounded", options={"xatol": 1e-4}).x)


def fit_bias(lp, y, lam=1.0, w=None):
    K = lp.shape[1]

    def f(th):
        t, b = th[0], th[1:]
        return nll(lsm(lp / np.exp(t) + b), y, w) + lam * np.sum(b**2) / len(y)

    th = minimize(f, np.zeros(K + 1), method="L-BFGS-B").x
    return th


def apply(method, lp_fit, y_fit, w, P):
    lp = np.log(np.clip(P, 1e-300, None))
    if method == "none":
        return P
    if method == "T":
        return softmax(lp / fitT(lp_fit, y_fit), axis=1)
    if method.startswith("Tshr"):  # log T shrunk by factor
        lam = float(method[4:])
        return softmax(lp / fitT(lp_fit, y_fit) ** lam, axis=1)
    if method.startswith("Twshr"):
        lam = float(method[5:])
        return softmax(lp / fitT(lp_fit, y_fit, w) ** lam, axis=1)
    if method.startswith("bias1shr"):
        th = fit_bias(lp_fit, y_fit, 1.0, w)
        return softmax(lp / np.exp(0.5 * th[0]) + th[1:], axis=1)
    if method.startswith("bias"):
        th = fit_bias(lp_fit, y_fit, float(method[4:]), w)
        return softmax(lp / np.exp(th[0]) + th[1:], axis=1)
    raise ValueError(method)


methods = ["none", "T", "Tshr0.25", "Tshr0.5", "Tshr0.75", "Twshr0.5", "bias1", "bias1shr0.5"]
res = collections.defaultdict(lambda: collections.defaultdict(list))


def main():
    for f in arrays():
        z = np.load(f)
        key = f.split("/")[-1][:-4]
        ds, n, d = key.rsplit("_", 2)
        if "oof" not in z:
            continue
        yi = z["y_index"]
        rows = z["oof_rows"]
        lp_fit = z["oof"]
        y_fit = yi[rows]
        w = mixw(yi, rows)
        K = z["test"].shape[1]
        cls = np.arange(K)
        for which in ("test", "wide"):
            if which not in z:
                continue
            P, yy = z[which], z["yt" if which == "test" else "yw"]
            for m in methods:
                Q = apply(m, lp_fit, y_fit, w, P)
                res[(ds, n, which)][m].append((ece_(cls, Q, yy), nll(np.log(np.clip(Q, 1e-12, None)), yy)))
            # oracle T on these texts
            lp = np.log(np.clip(P, 1e-300, None))
            Q = softmax(lp / fitT(lp, yy), axis=1)
            res[(ds, n, which)]["oracleT"].append((ece_(cls, Q, yy), nll(np.log(np.clip(Q, 1e-12, None)), yy)))
            res[(ds, n, which)]["floor"].append((ece_floor(cls, P, 20), 0))
    for key in sorted(res):
        print(*key, len(res[key]["none"]))
        for m, v in res[key].items():
            a = np.array(v)
            print(f"   {m:8s} ECE {a[:, 0].mean():.3f}±{sem(a[:, 0]):.3f}  ll {a[:, 1].mean():.3f}")


if __name__ == "__main__":
    main()

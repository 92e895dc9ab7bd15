"""Issue 43: the estimate's bias with the fixed test set's own sampling error.
Every draw is scored on the same test texts, so the SE over draws cannot see
their luck. From the runs that record each pick's per-text test losses, per
dataset and size: the mean bias with its SE over draws, over draws and test
texts bootstrapped jointly, and over the test texts alone.

Run: ``python bench/experiments/honest-estimate-2026-12-04/test_error.py [RUN ...]``
(default: ``selection-nested`` and ``selection-nested-trec-iid``; no engine).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from bench.selection import bias_missed  # noqa: E402

RESULTS = ROOT / "bench" / "results"
DRAWS = 2000


def joint(est: np.ndarray, losses: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """Mean bias, its bootstrap SE over draws and test texts jointly, and over test texts alone.
    ``est``: (draws,) held-out scores; ``losses``: (draws, texts) the picks' per-text test losses."""
    rng = np.random.default_rng(seed)
    bias = float(np.mean(est) + losses.mean())
    both, texts_only = [], []
    d, t = losses.shape
    for _ in range(DRAWS):
        rows, cols = rng.integers(0, d, d), rng.integers(0, t, t)
        both.append(est[rows].mean() + losses[np.ix_(rows, cols)].mean())
        texts_only.append(est.mean() + losses[:, cols].mean())
    return bias, float(np.std(both, ddof=1)), float(np.std(texts_only, ddof=1))


def main() -> None:
    names = sys.argv[1:] or ["selection-nested", "selection-nested-trec-iid"]
    print("| run | dataset | texts | draws | bias | SE over draws | SE over draws and test texts "
          "| SE of the test set alone | within 2 joint SE |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for name in names:
        path = RESULTS / f"{name}.json"
        if not path.exists():
            continue
        cells: dict[tuple[str, int], list[dict]] = {}
        for r in json.loads(path.read_text())["draws"].values():
            f = r.get("fit", {})
            if f.get("test_losses") and np.isfinite(f["held_out_score"]):
                cells.setdefault((r["dataset"], r["n"]), []).append(f)
        for (dataset, n), fits in sorted(cells.items()):
            est = np.array([f["held_out_score"] for f in fits])
            losses = np.array([f["test_losses"] for f in fits])
            per_draw = est + losses.mean(axis=1)
            bias, se_joint, se_test = joint(est, losses)
            se_draws = per_draw.std(ddof=1) / np.sqrt(len(per_draw))
            print(f"| {name} | {dataset} | {n} | {len(fits)} | {bias:+.3f} | {se_draws:.3f} | {se_joint:.3f} "
                  f"| {se_test:.3f} | {'no' if bias_missed(bias, se_joint) else 'yes'} |")


if __name__ == "__main__":
    main()

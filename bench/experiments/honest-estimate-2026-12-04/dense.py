"""Issue 43, tried and lost: a stacked nested choice scored from more texts.

At commit 432c436 the nested estimate scored a split whose choice was the
stacked candidate with heads fitted on every text but a quarter of the split
(95% of the texts at 5 folds) instead of the 80% outside it, to test whether
the stacked picks' pessimism at 128 texts was a learning-curve bias. This
compares that run (``dense-draws.json`` here: SST-2 at 128 texts, 10 draws,
written by ``bench/selection.py --datasets sst2 --sizes 128 --repeats 1
--name selection-dense`` at that commit, then moved here) with the run of
the library's estimate on the same draws (``bench/results/selection-nested.json``:
the same seeds, so the same training and test texts), and prints the
estimate's bias (``held_out_score_`` − the pick's test neg-log-loss; + is
optimistic) and how often ``held_out_score_ ± 2 * held_out_score_sem_``
covers the test score, before and after, for every draw and for the draws
whose pick is the stacked candidate; and whether every draw kept its pick
(the change touched the estimate only).

Rerun: ``git checkout 432c436 -- llm_label_clf/selection``, the bench command
above, ``git checkout HEAD -- llm_label_clf/selection``, move the JSON here,
then ``python bench/experiments/honest-estimate-2026-12-04/dense.py`` (no engine).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import cells, pm  # noqa: E402

HERE = Path(__file__).resolve().parent
BEFORE = HERE.parents[1] / "results" / "selection-nested.json"
AFTER = HERE / "dense-draws.json"


def bias_and_cover(draws: list[dict]) -> tuple[list[float], list[float]]:
    bias, covers = [], []
    for r in draws:
        f = r["fit"]
        est, sem, test = f["held_out_score"], f["held_out_score_sem"], -f["test_without_temperature"]["log_loss"]
        if np.isfinite(est):
            bias.append(est - test)
            covers.append(float(abs(est - test) <= 2 * sem))
    return bias, covers


def stacked(r: dict) -> bool:
    return bool(r["fit"]["best_params"].get("stack"))


def main() -> None:
    print("| dataset | texts | draws | bias before | after | covers before | after "
          "| stacked picks | their bias before | after | picks kept |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    new = cells(json.loads(AFTER.read_text()))
    old = cells(json.loads(BEFORE.read_text()))
    for (name, n), draws in sorted(new.items()):
        before = {r["draw"]: r for r in old.get((name, n), [])}
        pairs = [(before[r["draw"]], r) for r in draws if r["draw"] in before]
        b0, c0 = bias_and_cover([o for o, _ in pairs])
        b1, c1 = bias_and_cover([a for _, a in pairs])
        s0, _ = bias_and_cover([o for o, a in pairs if stacked(a)])
        s1, _ = bias_and_cover([a for _, a in pairs if stacked(a)])
        kept = sum(o["fit"]["best_params"] == a["fit"]["best_params"] for o, a in pairs)
        share = lambda c: "–" if not c else f"{np.mean(c):.0%}"  # noqa: E731
        print(f"| {name} | {n} | {len(pairs)} | {pm(b0)} | {pm(b1)} | {share(c0)} | {share(c1)} "
              f"| {len(s1)} | {pm(s0)} | {pm(s1)} | {kept} of {len(pairs)} |")


if __name__ == "__main__":
    main()

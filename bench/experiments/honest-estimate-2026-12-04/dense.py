"""Issue 43, second step: a stacked nested choice scored from more texts.

Reads the protocol run after the change (``bench/results/selection-dense.json``
and ``selection-dense-trec-iid.json``, written by ``bench/selection.py --name
selection-dense`` and ``--name selection-dense-trec-iid --test-from-pool``)
and the run before it on the same draws (``selection-nested.json``,
``selection-nested-trec-iid.json``: the same seeds, so the same training and
test texts), and prints per dataset and size, mean ± standard error over the
draws of the estimate's bias (``held_out_score_`` − the pick's test
neg-log-loss; + is optimistic) and how often ``held_out_score_ ± 2 *
held_out_score_sem_`` covers the test score, before and after, for every
draw and for the draws whose pick is the stacked candidate; and whether
every draw kept its pick (the change touches the estimate only).

Run: ``python bench/experiments/honest-estimate-2026-12-04/dense.py`` (no engine).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import cells, pm  # noqa: E402

RESULTS = Path(__file__).resolve().parents[3] / "bench" / "results"
PAIRS = [("selection-nested", "selection-dense"), ("selection-nested-trec-iid", "selection-dense-trec-iid")]


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
    print("| run | dataset | texts | draws | bias before | after | covers before | after "
          "| stacked picks | their bias before | after | picks kept |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for old_name, new_name in PAIRS:
        path = RESULTS / f"{new_name}.json"
        if not path.exists():
            continue
        new = cells(json.loads(path.read_text()))
        old = cells(json.loads((RESULTS / f"{old_name}.json").read_text()))
        for (name, n), draws in sorted(new.items()):
            before = {r["draw"]: r for r in old.get((name, n), [])}
            pairs = [(before[r["draw"]], r) for r in draws if r["draw"] in before]
            b0, c0 = bias_and_cover([o for o, _ in pairs])
            b1, c1 = bias_and_cover([a for _, a in pairs])
            s0, _ = bias_and_cover([o for o, a in pairs if stacked(a)])
            s1, _ = bias_and_cover([a for _, a in pairs if stacked(a)])
            kept = sum(o["fit"]["best_params"] == a["fit"]["best_params"] for o, a in pairs)
            share = lambda c: "–" if not c else f"{np.mean(c):.0%}"  # noqa: E731
            print(f"| {new_name} | {name} | {n} | {len(pairs)} | {pm(b0)} | {pm(b1)} | {share(c0)} | {share(c1)} "
                  f"| {len(s1)} | {pm(s0)} | {pm(s1)} | {kept} of {len(pairs)} |")


if __name__ == "__main__":
    main()

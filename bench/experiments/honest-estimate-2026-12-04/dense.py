"""Issue 43, tried and lost: a stacked nested choice scored from more texts.
``dense-draws.json`` (SST-2) and ``dense-trec-draws.json`` (TREC drawn alike)
are 128-text runs of ``bench/selection.py --repeats 1`` at commit 432c436,
where a stacked split was scored with heads fitted on 95% of the texts
instead of 80%; this prints, against the library's estimate on the same draws
(``bench/results/selection-nested*.json``), the bias and ±2 SE coverage before
and after, for all picks and the stacked ones, and whether every pick stayed.

Rerun: ``git checkout 432c436 -- llm_label_clf/selection``, ``python bench/selection.py
--datasets sst2 --sizes 128 --repeats 1 --name selection-dense``, ``git checkout HEAD --
llm_label_clf/selection``, move the JSON here, then this script (no engine).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from compare import cells, pm  # noqa: E402

from bench.selection import estimate_against  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parents[1] / "results"
#: (after, before): SST-2 on its fixed test set; TREC drawn alike, with wide tests
PAIRS = [(HERE / "dense-draws.json", RESULTS / "selection-nested.json"),
         (HERE / "dense-trec-draws.json", RESULTS / "selection-nested-trec-iid.json")]


def bias_and_cover(draws: list[dict], wide: list[dict] | None = None) -> tuple[list[float], list[float]]:
    """Per draw, the estimate minus the test score and whether ±2 SE covers it; against the
    wide test recorded in ``wide`` (the same draws) where given."""
    bias, covers = [], []
    for i, r in enumerate(draws):
        f = r["fit"]
        scored = (wide[i]["fit"]["wide_test"] if wide else f["test_without_temperature"])
        if np.isfinite(f["held_out_score"]):
            b, c = estimate_against(f, scored["log_loss"])
            bias.append(b)
            covers.append(c)
    return bias, covers


def stacked(r: dict) -> bool:
    return bool(r["fit"]["best_params"].get("stack"))


def main() -> None:
    print("| dataset | texts | test | draws | bias before | after | covers before | after "
          "| stacked picks | their bias before | after | picks kept |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for after, before_path in PAIRS:
        if not after.exists():
            continue
        new = cells(json.loads(after.read_text()))
        old = cells(json.loads(before_path.read_text()))
        for (name, n), draws in sorted(new.items()):
            before = {r["draw"]: r for r in old.get((name, n), [])}
            pairs = [(before[r["draw"]], r) for r in draws if r["draw"] in before]
            olds, news = [o for o, _ in pairs], [a for _, a in pairs]
            wide = olds if all("wide_test" in o["fit"] for o in olds) else None  # same picks: the same wide score
            b0, c0 = bias_and_cover(olds, wide)
            b1, c1 = bias_and_cover(news, wide)
            stack = [i for i, a in enumerate(news) if stacked(a)]
            s0, _ = bias_and_cover([olds[i] for i in stack], wide and [wide[i] for i in stack])
            s1, _ = bias_and_cover([news[i] for i in stack], wide and [wide[i] for i in stack])
            kept = sum(o["fit"]["best_params"] == a["fit"]["best_params"] for o, a in pairs)
            share = lambda c: "–" if not c else f"{np.mean(c):.0%}"  # noqa: E731
            print(f"| {name} | {n} | {'wide' if wide else 'fixed'} | {len(pairs)} | {pm(b0)} | {pm(b1)} "
                  f"| {share(c0)} | {share(c1)} | {len(stack)} | {pm(s0)} | {pm(s1)} | {kept} of {len(pairs)} |")


if __name__ == "__main__":
    main()

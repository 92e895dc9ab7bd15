"""Issue 43: what the nested, every-text estimate changed, draw by draw. From
``bench/results/selection-nested.json`` (the new defaults) and
``selection-protocol.json`` (the earlier ones; same seeds, so the same texts),
per dataset and size, mean ± SE over draws: the estimate's bias against the
test neg-log-loss and how often ±2 SE covers it, before and after; the pick's
test log-loss minus zero-shot's (and draws worse by > 0.05 nats); and each
rule's pick ("best", "guarded", "one_se") on the same split scores.

Run: ``python bench/experiments/honest-estimate-2026-12-04/compare.py`` (no engine).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
NEW = ROOT / "bench" / "results" / "selection-nested.json"
OLD = ROOT / "bench" / "results" / "selection-protocol.json"


def pm(values: list[float], digits: int = 3, sign: str = "+") -> str:
    v = np.array([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if not len(v):
        return "–"
    se = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else float("nan")
    return f"{v.mean():{sign}.{digits}f} ± {se:.{digits}f}"


def cells(doc: dict) -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = {}
    for r in doc["draws"].values():
        if "fit" in r:
            out.setdefault((r["dataset"], r["n"]), []).append(r)
    return out


def fit_row(draws: list[dict]) -> tuple[list[float], list[float], list[float], list[float]]:
    bias, covers, vs_zero, worse = [], [], [], []
    for r in draws:
        f = r["fit"]
        test = -f["test_without_temperature"]["log_loss"]
        est, sem = f["held_out_score"], f["held_out_score_sem"]
        if np.isfinite(est):
            bias.append(est - test)
            covers.append(float(abs(est - test) <= 2 * sem) if np.isfinite(sem) else np.nan)
        zero = r["fixed"].get("zero-shot", {}).get("log_loss")
        if zero is not None:
            vs_zero.append(-test - zero)
            worse.append(float(-test - zero > 0.05))
    return bias, covers, vs_zero, worse


def main() -> None:
    if not NEW.exists():
        sys.exit(f"{NEW} is missing: run bench/selection.py --name selection-nested --repeats 1 first")
    new = cells(json.loads(NEW.read_text()))
    old = cells(json.loads(OLD.read_text())) if OLD.exists() else {}
    print("| dataset | texts | draws | estimate − test, before | after | covers (±2 SE), before | after "
          "| log-loss − zero-shot's, before | after | worse by > 0.05, before | after |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (name, n), draws in sorted(new.items()):
        b_new, c_new, z_new, w_new = fit_row(draws)
        seeds = {r["draw"] for r in draws}
        b_old, c_old, z_old, w_old = fit_row([r for r in old.get((name, n), []) if r["draw"] in seeds])
        share = lambda c: "–" if not c else f"{np.nanmean(c):.0%}"  # noqa: E731
        count = lambda w: "–" if not w else f"{int(sum(w))} of {len(w)}"  # noqa: E731
        print(f"| {name} | {n} | {len(draws)} | {pm(b_old)} | {pm(b_new)} | {share(c_old)} | {share(c_new)} "
              f"| {pm(z_old)} | {pm(z_new)} | {count(w_old)} | {count(w_new)} |")
    print()
    print("Rules on the same split scores (r1 = the fit's own folds; 'all' candidates): test accuracy and log-loss "
          "of each rule's pick, mean ± SE over draws.")
    print("| dataset | texts | best: accuracy | log-loss | guarded: accuracy | log-loss | one_se: accuracy | log-loss "
          "| picks that differ (best vs guarded) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (name, n), draws in sorted(new.items()):
        row = []
        for rule in ("best", "guarded", "one_se"):
            acc, loss = [], []
            for r in draws:
                pick = r["variants"].get(f"{rule}/r1/all")
                test = r["candidates"][pick["index"]].get("test") if pick else None
                if test:
                    acc.append(test["accuracy"])
                    loss.append(test["log_loss"])
            row += [pm(acc, sign=""), pm(loss, sign="")]
        differ = sum(r["variants"]["best/r1/all"]["index"] != r["variants"]["guarded/r1/all"]["index"]
                     for r in draws if "guarded/r1/all" in r["variants"])
        print(f"| {name} | {n} | " + " | ".join(row) + f" | {differ} of {len(draws)} |")


if __name__ == "__main__":
    main()

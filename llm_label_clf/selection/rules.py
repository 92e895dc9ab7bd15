"""How ``LLMLabelClassifierCV`` chooses one candidate from its fold scores,
and what that choice is worth on texts that did not make it.

With 16-128 labelled texts the folds are small and the ~30 candidates'
mean scores differ mostly by noise: the highest mean ("best") tends to be a
complex candidate (few-shot, stacked) that was lucky on these folds. The
"one_se" rule (the one-standard-error rule of Breiman et al. and of
``glmnet``'s ``lambda.1se``) takes the simplest candidate whose mean is
within one standard error of the highest. ``held_out_estimate`` scores the
rule itself: each split's score is that of the candidate the rule chose
from the other folds of the same repeat, so the split's own scores never
took part in the choice (its rows were in those folds' training parts, as
ever). Plain functions of score tables; nothing here reads or fits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .candidates import Candidate

__all__ = ["COMPLEXITY", "RULES", "check_rule", "choose", "complexity_of", "held_out_choices", "held_out_estimate",
           "split_sem"]

#: The complexity levels, simplest first: "one_se" prefers a lower level.
COMPLEXITY = ("zero-shot", "zero-shot calibrated", "few-shot", "stacked")
#: The selection rules ``choose`` takes.
RULES = ("best", "one_se")


def complexity_of(candidate: Candidate | Mapping[str, Any]) -> int:
    """The candidate's level in ``COMPLEXITY``: 0 zero-shot uncalibrated, 1
    zero-shot calibrated (contextual, batch or learned), 2 few-shot (any
    calibration), 3 the stacked candidate. Takes a ``Candidate`` or its
    parameters (a row of ``cv_results_["params"]``)."""
    if isinstance(candidate, Candidate):
        if candidate.reader is None:
            return 3
        params = candidate.params
    else:
        params = candidate
    if params.get("stack"):
        return 3
    if params.get("few_shot", 0):
        return 2
    return 0 if params.get("calibration") is None else 1


def check_rule(rule: Any, owner: str = "") -> None:
    """Raises ValueError when ``rule`` is not one of ``RULES``; ``owner`` starts the message."""
    if rule not in RULES:
        prefix = f"{owner}: " if owner else ""
        raise ValueError(f"{prefix}rule must be one of {sorted(RULES)}; got rule={rule!r}")


def split_sem(split_scores: np.ndarray, n_folds: int) -> np.ndarray:
    """Each row's standard error of its mean split score: the standard
    deviation over sqrt(``n_folds``), the folds of one repeat (repeats reuse
    the same texts, so they do not count as more folds)."""
    return np.asarray(split_scores, dtype=np.float64).std(axis=-1) / np.sqrt(n_folds)


def choose(means: np.ndarray, sems: np.ndarray, complexity: np.ndarray, rule: str) -> int:
    """The index of the candidate ``rule`` chooses from their mean scores
    (higher is better), their standard errors and their complexity levels.

    "best": the highest mean (the first, on a tie). "one_se": among the
    candidates whose mean is at least the highest mean minus that
    candidate's standard error, the lowest complexity level, then the
    highest mean within it. A NaN mean is never chosen. Raises ValueError
    for an unknown rule or when every mean is NaN."""
    check_rule(rule)
    means = np.asarray(means, dtype=np.float64)
    scored = ~np.isnan(means)
    if not scored.any():
        raise ValueError("no candidate has a mean score to choose by (every mean is NaN)")
    best = int(np.flatnonzero(scored)[np.argmax(means[scored])])
    if rule == "best":
        return best
    sem = float(np.asarray(sems, dtype=np.float64)[best])
    near = scored & (means >= means[best] - (sem if np.isfinite(sem) else 0.0))
    near[best] = True
    levels = np.asarray(complexity)
    simplest = near & (levels == levels[near].min())
    return int(np.flatnonzero(simplest)[np.argmax(means[simplest])])


def held_out_choices(split_scores: np.ndarray, complexity: np.ndarray, rule: str, n_folds: int) -> np.ndarray:
    """For each split (column ``r * n_folds + k`` is fold ``k`` of repeat
    ``r``), the candidate ``rule`` chooses from the mean and standard error
    over the other folds of its repeat; -1 where no candidate has a score
    there. ``split_scores`` is (n_candidates, n_splits)."""
    check_rule(rule)
    scores = np.asarray(split_scores, dtype=np.float64)
    n_splits = scores.shape[1]
    if n_folds < 2 or n_splits % n_folds:
        raise ValueError(f"n_folds={n_folds} must be at least 2 and divide the {n_splits} splits")
    chosen = np.full(n_splits, -1, dtype=np.int64)
    for s in range(n_splits):
        start = s - s % n_folds
        others = scores[:, [j for j in range(start, start + n_folds) if j != s]]
        means = others.mean(axis=1)
        sems = split_sem(others, others.shape[1])
        if not np.isnan(means).all():
            chosen[s] = choose(means, sems, complexity, rule)
    return chosen


def held_out_estimate(split_scores: np.ndarray, complexity: np.ndarray, rule: str, n_folds: int) -> tuple[float, float]:
    """The score of choosing by ``rule``, estimated on splits that took no
    part in the choice, and its standard error: each split scored by the
    candidate chosen without it (``held_out_choices``), the mean over the
    splits and its ``split_sem``. NaN where a split had no candidate to
    choose, or its choice failed on it."""
    scores = np.asarray(split_scores, dtype=np.float64)
    chosen = held_out_choices(scores, complexity, rule, n_folds)
    picked = np.array([scores[c, s] if c >= 0 else np.nan for s, c in enumerate(chosen)])
    return float(picked.mean()), float(split_sem(picked, n_folds))

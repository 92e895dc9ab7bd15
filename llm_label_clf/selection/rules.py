"""How ``LLMLabelClassifierCV`` chooses one candidate from its fold scores
("best", "guarded", "one_se"). Plain functions of score tables; nothing
here reads or fits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .candidates import Candidate

__all__ = ["COMPLEXITY", "RULES", "check_rule", "choose", "complexity_of", "split_sem"]

#: The complexity levels, simplest first: "one_se" prefers a lower level.
COMPLEXITY = ("zero-shot", "zero-shot calibrated", "few-shot", "stacked")
#: The selection rules ``choose`` takes.
RULES = ("best", "guarded", "one_se")


def complexity_of(candidate: Candidate | Mapping[str, Any]) -> int:
    """The candidate's level in ``COMPLEXITY``: 0 zero-shot with the
    default calibration ("auto") or none, 1 zero-shot calibrated otherwise
    (contextual, batch or learned), 2 few-shot (any calibration), 3 the
    stacked candidate. Takes a ``Candidate`` or its parameters (a row of
    ``cv_results_["params"]``)."""
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
    return 0 if params.get("calibration") in (None, "auto") else 1


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


def choose(
    means: np.ndarray,
    sems: np.ndarray,
    complexity: np.ndarray,
    rule: str,
    split_scores: np.ndarray | None = None,
    n_folds: int | None = None,
) -> int:
    """The index of the candidate ``rule`` chooses from their mean scores
    (higher is better), their standard errors and their complexity levels.

    "best": the highest mean (the first, on a tie). "guarded": the highest
    mean, if it beats the simple reading (the first candidate of complexity
    0: the first prompt, zero-shot, the first calibration listed, "auto" by
    default) by more than the standard error of their paired differences
    over ``split_scores`` (n_candidates, n_splits; ``split_sem`` over
    ``n_folds``), else that simple reading; "best" where there is none, or no
    ``split_scores``.
    "one_se": among the candidates whose mean is at least the highest mean
    minus that candidate's standard error, the lowest complexity level, then
    the highest mean within it. A NaN mean is never chosen. Raises ValueError
    for an unknown rule or when every mean is NaN."""
    check_rule(rule)
    means = np.asarray(means, dtype=np.float64)
    scored = ~np.isnan(means)
    if not scored.any():
        raise ValueError("no candidate has a mean score to choose by (every mean is NaN)")
    best = int(np.flatnonzero(scored)[np.argmax(means[scored])])
    levels = np.asarray(complexity)
    if rule == "guarded":
        simple = np.flatnonzero(scored & (levels == 0))
        if split_scores is None or simple.size == 0 or simple[0] == best:
            return best
        table = np.asarray(split_scores, dtype=np.float64)
        gain = table[best] - table[simple[0]]
        if np.isnan(gain).any():
            return best
        return best if gain.mean() > float(split_sem(gain, n_folds or len(gain))) else int(simple[0])
    if rule == "best":
        return best
    sem = float(np.asarray(sems, dtype=np.float64)[best])
    near = scored & (means >= means[best] - (sem if np.isfinite(sem) else 0.0))
    near[best] = True
    simplest = near & (levels == levels[near].min())
    return int(np.flatnonzero(simplest)[np.argmax(means[simplest])])

"""Ties in ``predict`` (two or more classes with exactly the same top
probability, as bf16 reads give): a tie goes to the tied class with the
largest class prior from fit, then the first in ``classes_``, with one
``TiedPredictionWarning`` per call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..exceptions import TiedPredictionWarning, warn_user

__all__ = ["argmax_breaking_ties", "tie_priors", "warn_ties"]


def tie_priors(estimator: Any) -> list[np.ndarray] | None:
    """Per output, the log class prior fit settled (None for an estimator
    that keeps none: ties then go to the first tied class)."""
    outputs = getattr(estimator, "outputs_", None)
    if not outputs:
        return None
    return [output.calibration.log_prior for output in outputs]


def argmax_breaking_ties(scores: np.ndarray, log_prior: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``scores`` (n, n_classes; probabilities or their logs),
    the index of the most probable class under the module's rule, and
    whether two or more classes tied at the top there."""
    scores = np.asarray(scores)
    if scores.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    tied = scores == scores.max(axis=1, keepdims=True)
    rank = np.zeros(scores.shape[1]) if log_prior is None else np.asarray(log_prior, dtype=np.float64)
    # np.argmax takes the first of equal maxima: the first class among equal priors
    index = np.argmax(np.where(tied, rank[None, :], -np.inf), axis=1)
    return np.where(tied.any(axis=1), index, np.argmax(scores, axis=1)), tied.sum(axis=1) > 1


def warn_ties(tied: Sequence[np.ndarray], classes: Sequence[Any]) -> None:
    """Warns once when any row of any output tied (``tied``: per output, the
    rows' tie mask from ``argmax_breaking_ties``), naming the first such row."""
    rows = np.zeros(len(tied[0]) if tied else 0, dtype=bool)
    for mask in tied:
        rows |= mask
    if not rows.any():
        return
    first = int(np.flatnonzero(rows)[0])
    where = f"item {first}" + (f", classes of {len(classes)} outputs" if len(tied) > 1 else "")
    warn_user(
        f"{int(rows.sum())} of {rows.size} texts have two or more classes tied at exactly the top "
        f"probability ({where}); predict gave each tie to the tied class with the largest class prior "
        "from fit, then to the first in classes_. Exact ties come from low-precision (bf16) reads: "
        "read in float32 with engine_options={'dtype': 'float32'} (or LLM_LABEL_CLF_DTYPE=float32)",
        TiedPredictionWarning,
    )

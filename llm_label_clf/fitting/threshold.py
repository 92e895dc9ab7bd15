"""Multi-label ``threshold="auto"``: one threshold on P(label applies) for
every label, the one that maximises the expected micro-F1 over the
training texts' calibrated probabilities (a plug-in: no labels are used)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["FIXED_THRESHOLD", "fitted_threshold", "micro_f1_threshold", "threshold_in_use"]

#: The threshold "auto" falls back to when no label's calibration read the training texts.
FIXED_THRESHOLD = 0.5


def micro_f1_threshold(p_yes: np.ndarray) -> float:
    """The threshold on (n, labels) calibrated probabilities ``p_yes`` that
    maximises the expected micro-F1 of ``p_yes >= threshold`` were each
    label to apply with its probability: the probability of the last
    text-label pair marked."""
    order = np.argsort(-p_yes, axis=None, kind="stable")
    hits = np.cumsum(p_yes.ravel()[order])
    f1 = 2 * hits / (np.arange(1, order.size + 1) + p_yes.sum())
    return float(p_yes.ravel()[order][int(np.argmax(f1))])


def fitted_threshold(threshold: Any, reads: Sequence[tuple[np.ndarray, np.ndarray] | None]) -> float:
    """``threshold`` itself, or for "auto" ``micro_f1_threshold`` over the
    training rows every label's calibration read (``reads``: per label, the
    rows and their calibrated P(applies)); ``FIXED_THRESHOLD`` when some
    label's calibration read none (``calibration=None`` or "contextual")."""
    if threshold != "auto":
        return float(threshold)
    if not reads or any(r is None for r in reads):
        return FIXED_THRESHOLD
    common = reads[0][0]
    for rows, _ in reads[1:]:
        common = np.intersect1d(common, rows)
    if common.size == 0:
        return FIXED_THRESHOLD
    return micro_f1_threshold(np.stack([p[np.searchsorted(rows, common)] for rows, p in reads], axis=1))


def threshold_in_use(estimator: Any) -> float:
    """The threshold a multi-label ``predict`` marks labels at: the
    estimator's ``threshold`` when it is a number (set it after fit to
    change ``predict`` without reading again), else what "auto" fitted."""
    threshold = getattr(estimator, "threshold", FIXED_THRESHOLD)
    if threshold == "auto":
        return float(getattr(estimator, "threshold_", FIXED_THRESHOLD))
    return float(threshold)

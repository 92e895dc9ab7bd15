"""Temperature scaling of ``LLMLabelClassifierCV``'s chosen candidate: one
temperature fitted on its out-of-fold log-probabilities (Guo et al. 2017),
its log shrunk toward 0 by the texts it was fitted on. Plain arithmetic;
nothing here reads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp

__all__ = ["LOG_T_BOUNDS", "SHRINK_TEXTS", "fit_temperature", "held_out_temperature", "shrunk", "tempered"]

#: The search range of log T: T from e^-3 (sharper, ~0.05) to e^3 (flatter, ~20).
LOG_T_BOUNDS = (-3.0, 3.0)
#: n0 of ``shrunk``: the log-temperature fitted on m texts keeps m / (m + n0) of
#: itself (chosen: docs/architecture.md).
SHRINK_TEXTS = 64
#: log(1e-300): probabilities are clipped there, as ``predict_log_proba`` clips them.
_LOG_FLOOR = float(np.log(1e-300))


def tempered(log_proba: np.ndarray, temperature: float) -> np.ndarray:
    """The log of softmax(``log_proba`` / ``temperature``), row by row (a
    stable log-softmax; log-probabilities clipped at log(1e-300) first)."""
    scaled = np.maximum(np.asarray(log_proba, dtype=np.float64), _LOG_FLOOR) / temperature
    return scaled - logsumexp(scaled, axis=1, keepdims=True)


def fit_temperature(log_proba: np.ndarray, y_index: np.ndarray) -> float:
    """The temperature T > 0 that minimises the log-loss of
    softmax(``log_proba`` / T) against the class indices ``y_index``,
    searched over log T in ``LOG_T_BOUNDS``; 1.0 when there are no rows."""
    log_proba = np.asarray(log_proba, dtype=np.float64)
    y_index = np.asarray(y_index, dtype=np.int64)
    if log_proba.shape[0] == 0:
        return 1.0
    rows = np.arange(len(y_index))

    def loss(log_t: float) -> float:
        return float(-tempered(log_proba, np.exp(log_t))[rows, y_index].mean())

    found = minimize_scalar(loss, bounds=LOG_T_BOUNDS, method="bounded", options={"xatol": 1e-4})
    return float(np.exp(found.x))


def shrunk(temperature: float, n_texts: int, prior_texts: float = SHRINK_TEXTS) -> float:
    """``temperature`` with its log shrunk toward 0 (no temperature) by the
    ``n_texts`` it was fitted on: exp(log T * m / (m + ``prior_texts``)), the
    usual empirical-Bayes weight."""
    if n_texts <= 0:
        return 1.0
    return float(np.exp(np.log(temperature) * n_texts / (n_texts + prior_texts)))


def held_out_temperature(
    held_out: Sequence[np.ndarray | None], y_index: np.ndarray, folds: Sequence[tuple[np.ndarray, np.ndarray]]
) -> float:
    """The temperature fitted on a candidate's held-out log-probabilities of
    every split (None where it has none), kept from the scoring, then
    ``shrunk`` by the number of distinct texts scored; 1.0 with none."""
    parts = [p for p in held_out if p is not None]
    if not parts:
        return 1.0
    scored = np.concatenate([test for p, (_, test) in zip(held_out, folds, strict=True) if p is not None])
    return shrunk(fit_temperature(np.vstack(parts), y_index[scored]), len(np.unique(scored)))

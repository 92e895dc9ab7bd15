"""What each prediction method returns, from per-output log-probabilities:
the one place that knows how outputs are shaped (one array; a list, one per
output; multi-label's P(label applies) side by side), how ``predict`` is
the argmax (or multi-label's threshold) and how binary scores become
log-odds. The estimator, the search, Ray's vLLM stage and the Ray/Dask
output columns all shape through it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .targets import stack_columns
from .ties import argmax_breaking_ties, warn_ties

__all__ = ["PROBA_METHODS", "method_result", "output_kind", "predicted_from"]

#: The methods whose results are probabilities (or their logs): ``predict``
#: can be derived from either without reading again.
PROBA_METHODS = ("predict_proba", "predict_log_proba")


def output_kind(estimator: Any) -> str:
    """"single", "multioutput" or "multilabel", from fitted attributes only:
    ``output_kind_`` where the estimator sets it, else ``classes_`` being a
    list (scikit-learn's multi-output classifiers)."""
    kind = getattr(estimator, "output_kind_", None)
    if kind in ("multioutput", "multilabel"):
        return kind
    return "multioutput" if isinstance(estimator.classes_, list) else "single"


def _by_kind(kind: str, per_output: list[np.ndarray]) -> Any:
    if kind == "single":
        return per_output[0]
    return np.column_stack(per_output) if kind == "multilabel" else per_output


def method_result(
    method: str, kind: str, log_probas: Sequence[np.ndarray], classes: Any, threshold: float = 0.5,
    priors: Sequence[np.ndarray] | None = None,
) -> Any:
    """``method``'s result ("predict_proba", "predict_log_proba", "predict",
    "decision_function") from each output's (n, n_classes) log-probabilities.
    Multi-label outputs are yes/no reads: column 1 is "applies". ``priors``:
    per output, the log class prior that breaks ``predict``'s ties (``ties``)."""
    if method == "decision_function":  # binary: log-odds of the second class
        return _by_kind(kind, [lp[:, 1] - lp[:, 0] if lp.shape[1] == 2 else lp for lp in log_probas])
    if method == "predict":
        shaped = method_result("predict_log_proba", kind, log_probas, classes)
        return predicted_from(kind, shaped, classes, threshold, priors=priors)
    shaped = _by_kind(kind, [lp[:, 1] for lp in log_probas] if kind == "multilabel" else list(log_probas))
    if method == "predict_log_proba":
        return shaped
    if method == "predict_proba":
        return [np.exp(s) for s in shaped] if isinstance(shaped, list) else np.exp(shaped)
    raise ValueError(f"method {method!r} is not a prediction method")


def predicted_from(
    kind: str, result: Any, classes: Any, threshold: float = 0.5, *, log: bool = True,
    priors: Sequence[np.ndarray] | None = None,
) -> np.ndarray:
    """``predict`` from a probability method's result (``log``: of
    ``predict_log_proba``): each output's most probable class (several
    outputs: one column each, in their common dtype), or multi-label's 0/1
    of P(label applies) >= ``threshold``. Exact ties go by ``priors`` (per
    output, the log class prior from fit) and warn (``ties``)."""
    if kind == "multilabel":
        proba = np.exp(result) if log else np.asarray(result)
        return (proba >= threshold).astype(np.int64)
    per_output = [result] if kind == "single" else list(result)
    all_classes = [classes] if kind == "single" else list(classes)
    picked, tied = [], []
    for j, (c, r) in enumerate(zip(all_classes, per_output, strict=True)):
        index, ties = argmax_breaking_ties(r, None if priors is None else priors[j])
        picked.append(np.asarray(c)[index])
        tied.append(ties)
    warn_ties(tied, all_classes)
    return picked[0] if kind == "single" else stack_columns(picked)

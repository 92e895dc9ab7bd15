"""Calibration of zero- and few-shot label probabilities, which small models
bias toward some labels. Three ways, after the papers that measured them:

* contextual (Zhao et al. 2021, "Calibrate Before Use"): the probabilities
  the prompt gives content-free inputs ("N/A", "", "[MASK]") are the bias;
  dividing by them (subtracting their logs) removes it.
* batch (Zhou et al., ICLR 2024, "Batch Calibration"): the bias is the mean
  probability of each class over the texts being predicted.
* learned: a multinomial logistic regression on the label log-probabilities,
  fitted on labelled training texts, cross-fitted over K folds (each model
  never sees the rows it is averaged with at fit time) and averaged.

All work on (n, n_classes) log-probabilities and return log-probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import logsumexp

__all__ = [
    "CALIBRATIONS",
    "CONTENT_FREE_INPUTS",
    "MIN_BATCH",
    "LearnedCalibrator",
    "batch_bias",
    "calibrate",
    "contextual_bias",
    "debias",
]

CALIBRATIONS = (None, "contextual", "batch", "learned")
#: Content-free inputs of contextual calibration (Zhao et al. 2021).
CONTENT_FREE_INPUTS = ("N/A", "", "[MASK]")
#: Below this many texts in one call, batch calibration uses the bias
#: estimated on the training texts at fit time (one text's own mean is itself).
MIN_BATCH = 16


def _mean_log(log_proba: np.ndarray) -> np.ndarray:
    """log of the mean probability of each class over the rows."""
    return logsumexp(log_proba, axis=0) - np.log(log_proba.shape[0])


def contextual_bias(content_free_log_proba: np.ndarray) -> np.ndarray:
    """The bias of contextual calibration: log of the mean content-free probabilities."""
    return _mean_log(content_free_log_proba)


def batch_bias(log_proba: np.ndarray) -> np.ndarray:
    """The bias of batch calibration: log of each class's mean probability."""
    return _mean_log(log_proba)


def debias(log_proba: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Divides the probabilities by ``bias`` (per class) and renormalises."""
    shifted = log_proba - bias[None, :]
    return shifted - logsumexp(shifted, axis=1, keepdims=True)


@dataclass
class LearnedCalibrator:
    """K logistic regressions on (n, n_classes) log-probabilities, each fitted
    on K-1 folds of the training rows; predictions average them."""

    models: list[Any] = field(default_factory=list)

    @classmethod
    def fit(cls, log_proba: np.ndarray, y_index: np.ndarray, n_classes: int, *, random_state: Any) -> LearnedCalibrator:
        """Fits on rows with class indices ``y_index``. Raises ValueError when a
        class has fewer than 2 rows (no fold could hold it out and keep it)."""
        from sklearn.linear_model import LogisticRegression
        from sklearn.model_selection import StratifiedKFold

        counts = np.bincount(y_index, minlength=n_classes)
        if counts.min() < 2:
            missing = np.flatnonzero(counts < 2).tolist()
            raise ValueError(
                f"calibration='learned' needs at least 2 training texts of every class outside the "
                f"few-shot examples; class indices {missing} have fewer: pass more labelled texts "
                "to fit, lower few_shot, or use calibration='batch' or 'contextual'"
            )
        k = int(min(5, counts.min()))
        folds = StratifiedKFold(n_splits=k, shuffle=True, random_state=random_state)
        models = []
        for train, _ in folds.split(log_proba, y_index):
            model = LogisticRegression(C=1.0, max_iter=1000)
            model.fit(log_proba[train], y_index[train])
            models.append(model)
        return cls(models)

    def log_proba(self, log_proba: np.ndarray, n_classes: int) -> np.ndarray:
        """Averaged calibrated probabilities, as logs, columns in class order."""
        total = np.zeros((log_proba.shape[0], n_classes))
        for model in self.models:
            total[:, model.classes_] += model.predict_proba(log_proba)
        return np.log(np.clip(total / len(self.models), 1e-300, None))


def calibrate(
    log_proba: np.ndarray, kind: str | None, bias: np.ndarray | None, calibrator: LearnedCalibrator | None
) -> np.ndarray:
    """Applies calibration ``kind`` with what fit estimated (``bias`` or the
    learned ``calibrator``) to (n, n_classes) log-probabilities. Batch
    calibration uses the call's own texts when there are ``MIN_BATCH`` or more."""
    if kind is None or log_proba.shape[0] == 0:
        return log_proba
    if kind == "learned":
        assert calibrator is not None
        return calibrator.log_proba(log_proba, log_proba.shape[1])
    if kind == "batch" and log_proba.shape[0] >= MIN_BATCH:
        return debias(log_proba, batch_bias(log_proba))
    assert bias is not None
    return debias(log_proba, bias)


def content_free_records(fields: Sequence[str]) -> list[dict[str, str]]:
    """One record per content-free input, every field set to it."""
    return [{f: value for f in fields} for value in CONTENT_FREE_INPUTS]

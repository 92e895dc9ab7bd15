"""What ``y`` asks for: one output (a column of classes), several outputs (a
2-D array or DataFrame, one column each), or multi-label (an indicator matrix
of 0/1, or one collection of labels per row). Checked here so that every
problem names the row, column or label at fault."""

from __future__ import annotations

import warnings
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from sklearn.exceptions import DataConversionWarning

__all__ = ["Target", "as_target", "subset_accuracy", "unique_classes"]


@dataclass(frozen=True)
class Target:
    """``y`` split into columns. ``kind`` is "single", "multioutput" or
    "multilabel"; ``names`` are the column names (DataFrame columns, or the
    labels of a multi-label target, else None)."""

    kind: str
    columns: list[np.ndarray]
    names: list[Any] | None


def unique_classes(column: np.ndarray, where: str = "") -> tuple[np.ndarray, np.ndarray]:
    """A column's sorted classes and each row's index into them; ``where``
    (e.g. "output 'topic': ") starts the error for a column of mixed types."""
    try:
        return np.unique(column, return_inverse=True)
    except TypeError:
        kinds = sorted({type(v).__name__ for v in column})
        raise ValueError(f"{where}y mixes label types {kinds}; use one type for every label (e.g. all str)") from None


def _check_missing(column: np.ndarray, where: str) -> None:
    for i, value in enumerate(column):
        if value is None or (isinstance(value, float) and np.isnan(value)):
            raise ValueError(f"y {where}item {i} is missing ({value!r}); every text needs a label")


def _is_label_sets(y: Any) -> bool:
    if isinstance(y, (str, bytes, np.ndarray, pd.DataFrame)) or not isinstance(y, Sequence | pd.Series):
        return False
    items = list(y)
    return bool(items) and all(
        isinstance(v, Collection) and not isinstance(v, (str, bytes, np.ndarray)) for v in items
    )


def as_target(y: Any, n: int) -> Target:
    """Splits ``y`` for ``n`` texts; raises ValueError naming what is wrong."""
    if _is_label_sets(y):
        sets = [list(v) for v in y]
        if len(sets) != n:
            raise ValueError(f"X has {n} texts but y has {len(sets)} label sets")
        names = sorted({label for labels in sets for label in labels}, key=str)
        if not names:
            raise ValueError("y holds only empty label sets: give at least one label to some text")
        index = {label: j for j, label in enumerate(names)}
        matrix = np.zeros((n, len(names)), dtype=np.int64)
        for i, labels in enumerate(sets):
            for label in labels:
                matrix[i, index[label]] = 1
        return Target("multilabel", [matrix[:, j] for j in range(len(names))], names)
    names = list(y.columns) if isinstance(y, pd.DataFrame) else None
    array = y.to_numpy() if isinstance(y, (pd.DataFrame, pd.Series)) else np.asarray(y, dtype=object)
    if array.ndim == 2 and array.shape[1] == 1:
        warnings.warn(
            "A column-vector y was passed when a 1d array was expected; it is read as one output",
            DataConversionWarning,
            stacklevel=4,
        )
        array = array[:, 0]
        names = None
    if array.ndim == 1:
        if len(array) != n:
            raise ValueError(f"X has {n} texts but y has {len(array)} labels")
        _check_missing(array, "")
        return Target("single", [array], None)
    if array.ndim != 2 or array.shape[1] == 0:
        raise ValueError(
            f"y has shape {array.shape}; give one label per text (1-D), one column per output "
            "(2-D), or one collection of labels per text (multi-label)"
        )
    if array.shape[0] != n:
        raise ValueError(f"X has {n} texts but y has {array.shape[0]} rows")
    for j in range(array.shape[1]):
        _check_missing(array[:, j], f"column {names[j] if names else j} ")
    if _is_indicator(array):
        return Target("multilabel", [array[:, j].astype(np.int64) for j in range(array.shape[1])], names)
    return Target("multioutput", [array[:, j] for j in range(array.shape[1])], names)


def _is_indicator(array: np.ndarray) -> bool:
    """scikit-learn's rule: a 2-D target of only 0 and 1 is a multi-label indicator."""
    try:
        values = {v for v in np.unique(array.astype(object)).tolist()}
    except TypeError:
        return False
    return all(isinstance(v, (int, np.integer, bool, np.bool_, float)) for v in values) and values <= {0, 1}


def subset_accuracy(target: Target, pred: np.ndarray, labels: list[Any] | None, sample_weight: Any = None) -> float:
    """The share of rows whose every output (label) is predicted right, as
    scikit-learn's multi-output classifiers and ``accuracy_score`` on
    indicators count it. ``labels``: a multi-label estimator's labels, to
    align a named ``y``'s columns with the predictions'."""
    truth = np.column_stack(target.columns)
    if target.names is not None and labels and set(target.names) <= set(labels):
        aligned = np.zeros((truth.shape[0], len(labels)), dtype=truth.dtype)
        for j, name in enumerate(target.names):
            aligned[:, labels.index(name)] = truth[:, j]
        truth = aligned
    if truth.shape != pred.shape:
        raise ValueError(f"y has shape {truth.shape} but the predictions have shape {pred.shape}")
    return float(np.average(np.all(truth == pred, axis=1), weights=sample_weight))

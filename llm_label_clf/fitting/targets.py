"""What ``y`` asks for: one output (a column of classes), several outputs (a
2-D array or DataFrame, one column each), or multi-label (an indicator matrix
of 0/1, or one collection of labels per row). Checked here so that every
problem names the row, column or label at fault. Each column keeps the dtype
``y`` gave it (ints, bools, numpy strings or objects), so that ``classes_``
and ``predict`` return values of that dtype, as scikit-learn's classifiers do."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from sklearn.exceptions import DataConversionWarning

from ..exceptions import warn_user

__all__ = ["Target", "as_classes", "as_target", "stack_columns", "subset_accuracy", "unique_classes"]


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


def _kind(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    return "str" if isinstance(value, str) else type(value).__name__


def as_classes(values: Sequence[Any]) -> np.ndarray:
    """``values`` as numpy would hold a list of them (ints as int64, bools as
    bool, strings as numpy str), or as objects when they are of several kinds
    (numpy would turn ``[True, 2]`` into ints and ``["a", 1]`` into strings)."""
    items = list(values)
    if len({_kind(v) for v in items}) == 1:
        array = np.asarray(items)
        if array.ndim == 1:
            return array
    return np.array(items + [None], dtype=object)[:-1]  # the None stops numpy nesting tuples


def _with_dtype(column: np.ndarray, dtype: np.dtype | None) -> np.ndarray:
    """An object column of checked labels in ``y``'s own dtype: ``dtype`` when
    ``y`` had one (an array or pandas column), else as ``as_classes`` infers it."""
    if dtype is None:
        return as_classes(column)
    return column if dtype.kind == "O" else column.astype(dtype)


def _column_dtypes(y: Any, n_columns: int) -> list[np.dtype | None]:
    if isinstance(y, pd.DataFrame):
        return [np.asarray(y.iloc[:, j]).dtype for j in range(n_columns)]
    if isinstance(y, pd.Series):
        return [np.asarray(y).dtype]
    if isinstance(y, np.ndarray):
        return [y.dtype] * n_columns
    return [None] * n_columns


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
    array = np.asarray(y.to_numpy() if isinstance(y, (pd.DataFrame, pd.Series)) else y, dtype=object)
    dtypes = _column_dtypes(y, array.shape[1] if array.ndim == 2 else 1)
    if array.ndim == 2 and array.shape[1] == 1:
        warn_user(
            "A column-vector y was passed when a 1d array was expected; it is read as one output",
            DataConversionWarning,
        )
        array = array[:, 0]
        names = None
    if array.ndim == 1:
        if len(array) != n:
            raise ValueError(f"X has {n} texts but y has {len(array)} labels")
        _check_missing(array, "")
        return Target("single", [_with_dtype(array, dtypes[0])], None)
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
    return Target("multioutput", [_with_dtype(array[:, j], dtypes[j]) for j in range(array.shape[1])], names)


def _is_indicator(array: np.ndarray) -> bool:
    """scikit-learn's rule: a 2-D target of only 0 and 1 is a multi-label indicator."""
    try:
        values = {v for v in np.unique(array.astype(object)).tolist()}
    except TypeError:
        return False
    return all(isinstance(v, (int, np.integer, bool, np.bool_, float)) for v in values) and values <= {0, 1}


def stack_columns(columns: Sequence[np.ndarray]) -> np.ndarray:
    """Per-output columns side by side, shape (n, n_outputs): in their common
    dtype when they are of one kind (ints, bools, strings), else as objects,
    so that an int output is not turned into strings by a string output."""
    if len({c.dtype.kind for c in columns}) == 1:
        return np.column_stack(columns)
    stacked = np.empty((len(columns[0]), len(columns)), dtype=object)
    for j, column in enumerate(columns):
        stacked[:, j] = column
    return stacked


def subset_accuracy(target: Target, pred: np.ndarray, labels: list[Any] | None, sample_weight: Any = None) -> float:
    """The share of rows whose every output (label) is predicted right, as
    scikit-learn's multi-output classifiers and ``accuracy_score`` on
    indicators count it. ``labels``: a multi-label estimator's labels, to
    align a named ``y``'s columns with the predictions'."""
    columns = list(target.columns)
    if target.names is not None and labels and set(target.names) <= set(labels):
        aligned = [np.zeros(pred.shape[0], dtype=columns[0].dtype) for _ in labels]
        for j, name in enumerate(target.names):
            aligned[labels.index(name)] = columns[j]
        columns = aligned
    if (len(columns[0]), len(columns)) != pred.shape:
        raise ValueError(f"y has shape {(len(columns[0]), len(columns))} but the predictions have shape {pred.shape}")
    right = np.column_stack([np.asarray(c == pred[:, j], dtype=bool) for j, c in enumerate(columns)])
    return float(np.average(np.all(right, axis=1), weights=sample_weight))

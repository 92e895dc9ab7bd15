"""Output columns of a fitted estimator, shared by Ray Data and Dask: which
methods a batch may be scored with, their column names (``proba_<class>``,
``predicted``; ``proba_<j>_<class>`` with several outputs) and dtypes, and
the table of one batch's results (the empty one, Dask's ``meta``, from
``classes_`` alone)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.utils.validation import check_is_fitted

from ..fitting.shaping import PROBA_METHODS, output_kind, predicted_from
from ..fitting.threshold import threshold_in_use
from ..fitting.ties import tie_priors

__all__ = ["METHODS", "check_methods", "empty_output", "output_frame"]

#: The batch methods an estimator can be scored with, in column order.
METHODS = ("predict_proba", "predict_log_proba", "predict", "decision_function", "transform")
#: The column prefix of each probability method; they add ``predicted`` from the argmax.
_PROBA = dict(zip(PROBA_METHODS, ("proba", "log_proba"), strict=True))


def check_methods(estimator: Any, method: str | Sequence[str]) -> tuple[str, ...]:
    """The methods to call, checked: known, offered by ``estimator``, fitted.
    Raises ValueError naming an unknown or missing method and the choices,
    and scikit-learn's NotFittedError for an unfitted estimator."""
    methods = (method,) if isinstance(method, str) else tuple(method)
    if not methods:
        raise ValueError(f"method: give at least one of {list(METHODS)}")
    for name in methods:
        if name not in METHODS:
            raise ValueError(f"method {name!r} is not a batch method; choose from {list(METHODS)}")
        if not callable(getattr(estimator, name, None)):
            raise ValueError(
                f"{type(estimator).__name__} has no {name}(); it offers "
                f"{[m for m in METHODS if callable(getattr(estimator, m, None))]}"
            )
    if len(set(methods)) != len(methods):
        raise ValueError(f"method {list(methods)} names a method twice")
    check_is_fitted(estimator)
    return tuple(m for m in METHODS if m in methods)


def _class_dtype(classes: np.ndarray) -> Any:
    """The dtype pandas gives a column of these classes (strings: pandas' own
    string dtype where it infers one, so batches and ``meta`` agree)."""
    return pd.Series(classes.tolist() if classes.dtype == object else classes).dtype


def _per_class(prefix: str, classes: Sequence[Any], output: int | None) -> list[str]:
    head = prefix if output is None else f"{prefix}_{output}"
    return [f"{head}_{c}" for c in classes]


def _blocks(estimator: Any, method: str, result: Any, n: int) -> list[tuple[list[str], np.ndarray, Any]]:
    """One method's result as (names, 2-D values, dtype) blocks. ``result`` None
    stands for an empty batch (``meta``): zero rows of the right columns."""
    kind = output_kind(estimator)
    outputs = list(estimator.classes_) if kind == "multioutput" else [np.asarray(estimator.classes_)]
    float_ = np.dtype(np.float64)
    if method == "transform":
        names = [str(c) for c in estimator.get_feature_names_out()]
        values = np.zeros((n, len(names))) if result is None else np.asarray(result, dtype=np.float64)
        return [(names, values.reshape(n, len(names)), float_)]
    if method in _PROBA or method == "decision_function":
        prefix = _PROBA.get(method, "decision")
        parts = ([None] * len(outputs) if result is None else list(result)) if kind == "multioutput" else [result]
        blocks = []
        for j, (classes, part) in enumerate(zip(outputs, parts, strict=True)):
            output = j if kind == "multioutput" else None
            names = _per_class(prefix, classes.tolist(), output)
            if method == "decision_function" and kind != "multilabel" and len(classes) == 2:
                names = [prefix if output is None else f"{prefix}_{output}"]  # binary: the log-odds of classes[1]
            values = np.zeros((n, len(names))) if part is None else np.asarray(part, dtype=np.float64)
            blocks.append((names, values.reshape(n, len(names)), float_))
        return blocks
    # predict: the classes (several outputs: one column each; multi-label: 0/1 per label)
    if kind == "multilabel":
        names = _per_class("predicted", outputs[0].tolist(), None)
        values = np.zeros((n, len(names)), dtype=np.int64) if result is None else np.asarray(result, dtype=np.int64)
        return [(names, values.reshape(n, len(names)), np.dtype(np.int64))]
    blocks = []
    for j, classes in enumerate(outputs):
        name = "predicted" if kind == "single" else f"predicted_{j}"
        column = classes[:0] if result is None else np.asarray(result) if kind == "single" else np.asarray(result)[:, j]
        blocks.append(([name], np.asarray(column, dtype=classes.dtype).reshape(n, 1), _class_dtype(classes)))
    return blocks


def _with_predicted(estimator: Any, results: Mapping[str, Any]) -> dict[str, Any]:
    """``results`` plus ``predict``'s, derived from a probability method when
    ``predict`` itself was not called (see ``calls``)."""
    out = dict(results)
    if "predict" not in out:
        source = next((m for m in _PROBA if m in out), None)
        if source is not None:  # no second read: the argmax (multi-label: P >= threshold) of what was read
            threshold, log = threshold_in_use(estimator), source == "predict_log_proba"
            kind, result, classes = output_kind(estimator), out[source], estimator.classes_
            out["predict"] = None if result is None else predicted_from(
                kind, result, classes, threshold, log=log, priors=tie_priors(estimator)
            )
    return out


def calls(methods: Sequence[str]) -> list[str]:
    """The methods to actually call on a batch: ``predict`` is derived from
    ``predict_proba``/``predict_log_proba`` when either is asked for."""
    return [m for m in methods if not (m == "predict" and any(p in methods for p in _PROBA))]


def output_frame(
    estimator: Any, methods: Sequence[str], results: Mapping[str, Any] | None, n: int, index: Any = None
) -> pd.DataFrame:
    """The output columns of ``n`` rows: each method's columns in ``METHODS``
    order, then ``predicted`` (from ``predict``, or derived from a probability
    method). ``results`` maps a called method to its result (None: an empty
    table, ``n`` must be 0)."""
    shown = [m for m in METHODS if m in methods or (m == "predict" and any(p in methods for p in _PROBA))]
    filled = _with_predicted(estimator, results or dict.fromkeys(calls(methods)))
    columns: dict[str, pd.Series] = {}
    row_index = pd.RangeIndex(n) if index is None else index
    for method in shown:
        for names, values, dtype in _blocks(estimator, method, filled.get(method), n):
            for k, name in enumerate(names):
                if name in columns:
                    raise ValueError(
                        f"two output columns are named {name!r}; rename the classes or call the methods separately"
                    )
                columns[name] = pd.Series(values[:, k], index=row_index, dtype=dtype)
    return pd.DataFrame(columns, index=row_index)


def empty_output(estimator: Any, methods: Sequence[str]) -> pd.DataFrame:
    """The output columns with no rows: names and dtypes from the fitted
    classes only (Dask's ``meta``); the engine is never touched."""
    return output_frame(estimator, methods, None, 0)


def check_collisions(inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
    """Raises ValueError when an output column would overwrite an input column."""
    clash = sorted(set(map(str, inputs)) & set(map(str, outputs)))
    if clash:
        raise ValueError(
            f"the input already has column(s) {clash}, which the scores would overwrite: rename or drop them first"
        )

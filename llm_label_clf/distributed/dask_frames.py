"""Scoring a Dask DataFrame with a fitted estimator, on a Dask cluster: every
partition mapped through the estimator (``map_partitions``), each worker
process reusing one engine. Workers must not be daemonic
(``distributed.worker.daemon: False``) to start an embedded engine."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..engines.workers import WORKER_ENGINE_ENV, in_worker_process
from ._batch import attach_engine, llm_heads, score_batch
from ._columns import check_collisions, check_methods, empty_output

if TYPE_CHECKING:  # dask is an optional extra: imported when called, never by the package
    import dask.dataframe

__all__ = ["DAEMON_SETTING", "check_can_start_engine", "score_dask_dataframe"]

#: The Dask setting that makes worker processes daemonic.
DAEMON_SETTING = "distributed.worker.daemon"
#: The Dask setting whose variables a nanny sets in its workers.
NANNY_ENVIRON = "distributed.nanny.pre-spawn-environ"
#: Those of them an engine process must not inherit (see module).
_NOT_FOR_ENGINES = ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _import_dask() -> Any:
    try:
        import dask
        import dask.dataframe
    except ImportError as exc:
        raise ImportError(
            "score_dask_dataframe needs Dask: pip install 'llm_label_clf[dask]' (or 'dask[dataframe]' distributed)"
        ) from exc
    return dask


def _starts_engine(estimator: Any) -> bool:
    """Whether reading with ``estimator`` here would start an embedded engine."""
    local = any(h.base_url is None for h in llm_heads(estimator))
    own = os.environ.get(WORKER_ENGINE_ENV, "own").strip().lower() == "own"
    return local and own


@contextlib.contextmanager
def _without_nanny_environ() -> Iterator[None]:
    """The nanny's memory and thread settings out of ``os.environ`` for the
    block (those that still hold the values of ``NANNY_ENVIRON``), then back
    (see module)."""
    import dask

    nanny = dask.config.get(NANNY_ENVIRON, default={}) or {}
    removed = {
        name: os.environ.pop(name)
        for name in _NOT_FOR_ENGINES
        if name in nanny and os.environ.get(name) == str(nanny[name])
    }
    try:
        yield
    finally:
        os.environ.update(removed)


def check_can_start_engine(estimator: Any) -> None:
    """Raises RuntimeError, naming the Dask setting, when ``estimator`` would
    start an embedded engine in a daemonic process (vLLM's engine process
    cannot be started there, and vLLM's own error does not say why)."""
    if not (_starts_engine(estimator) and multiprocessing.current_process().daemon):
        return
    raise RuntimeError(
        f"this Dask worker process is daemonic, and a daemonic process cannot start vLLM's engine process: "
        f"create the cluster with dask.config.set({{{DAEMON_SETTING!r}: False}}) in effect for its whole life "
        "(or DASK_DISTRIBUTED__WORKER__DAEMON=False for `dask worker`, or `dask worker --no-nanny`); or give "
        f"the estimator a base_url; or set {WORKER_ENGINE_ENV}=shared in the workers' environment to read "
        "through one vLLM server per machine"
    )


def _score_partition(
    partition: pd.DataFrame,
    estimator: Any,
    methods: Sequence[str],
    input_columns: str | Sequence[str],
    id_column: str | None,
) -> pd.DataFrame:
    """One partition scored in a worker (see ``score_batch``)."""
    if in_worker_process():
        os.environ.setdefault(WORKER_ENGINE_ENV, "own")  # one engine per worker, not the loopback server
    check_can_start_engine(estimator)
    if _starts_engine(estimator):
        with _without_nanny_environ():  # found, or started without the nanny's settings (see module)
            attach_engine(estimator)
    return score_batch(estimator, partition, methods, input_columns, id_column, by_index=True)


def score_dask_dataframe(
    frame: dask.dataframe.DataFrame,
    estimator: Any,
    *,
    method: str | Sequence[str] = "predict_proba",
    input_columns: str | Sequence[str] = "text",
    id_column: str | None = None,
) -> dask.dataframe.DataFrame:
    """Scores a Dask DataFrame with a fitted estimator, partition by partition.

    ``map_partitions`` with the ``meta`` computed from ``classes_`` (no engine
    is touched here); each worker process holds one engine per (model,
    engine options) and reuses it for every partition and every later call.
    Embedded engines need non-daemonic workers: set
    ``dask.config.set({"distributed.worker.daemon": False})`` for the
    cluster's whole life (vLLM's engine is a child process).

    Parameters
    ----------
    frame : dask.dataframe.DataFrame
        The rows to score.
    estimator : LLMLabelClassifier
        A fitted estimator.
    method : str or list of str, default="predict_proba"
        As for :func:`score_ray_dataset`: ``predict_proba`` adds
        ``proba_<class>`` and ``predicted``, ``transform`` the
        ``get_feature_names_out()`` columns, and so on.
    input_columns : str or list of str, default="text"
        The text column, or columns filling the prompt fields of their names.
    id_column : str or None, default=None
        The column that names rows in errors (else the partition's index).

    Returns
    -------
    dask.dataframe.DataFrame
        Lazy: ``frame``'s rows (partitions, index and order kept) with the
        scores beside their columns.

    Raises
    ------
    ValueError
        An unknown method, an output column that clashes with one of
        ``frame``'s, or ``frame`` not a Dask DataFrame.
    NotFittedError
        ``estimator`` is not fitted.
    ImportError
        Dask is not installed (``pip install "llm_label_clf[dask]"``).

    Examples
    --------
    >>> import dask.dataframe as dd
    >>> import pandas as pd
    >>> from llm_label_clf import LLMLabelClassifier, score_dask_dataframe
    >>> frame = dd.from_pandas(pd.DataFrame({"text": ["a gem of a film"]}), npartitions=1)
    >>> score_dask_dataframe(frame, LLMLabelClassifier())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sklearn.exceptions.NotFittedError: This LLMLabelClassifier instance is not fitted yet...
    >>> scored = score_dask_dataframe(frame, fitted_clf, id_column="id")  # doctest: +SKIP
    >>> scored.to_parquet("scored/")  # doctest: +SKIP
    """
    dask = _import_dask()
    if not isinstance(frame, dask.dataframe.DataFrame):
        raise ValueError(f"frame must be a dask.dataframe.DataFrame, got {type(frame).__name__}")
    methods = check_methods(estimator, method)
    scores = empty_output(estimator, methods)
    check_collisions(frame.columns, scores.columns)
    meta = pd.concat([frame._meta, scores.set_axis(frame._meta.index[:0])], axis=1)
    shipped = dask.delayed(estimator, pure=True)
    return frame.map_partitions(
        _score_partition, shipped, methods, input_columns, id_column, meta=meta, enforce_metadata=False
    )

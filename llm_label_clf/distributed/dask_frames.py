"""Scoring a Dask DataFrame with a fitted estimator, on a Dask cluster.

``score_dask_dataframe`` maps every partition through the estimator
(``map_partitions``), with the ``meta`` Dask needs computed from the fitted
classes without touching any engine. The estimator travels once, as one
task of the graph (``dask.delayed``). Each worker process holds one engine
per (model, engine options) in the process-wide registry and reuses it for
every partition it scores, this call's and later ones'.

Daemonic workers. A Dask nanny starts its worker processes as daemonic
processes by default (``distributed.worker.daemon: True``), and a daemonic
process may not start children: vLLM's engine core is one, so an embedded
engine cannot start there. Create the cluster with the setting off, for the
cluster's whole life (the nanny reads it again when it restarts a worker)::

    dask.config.set({"distributed.worker.daemon": False})
    cluster = LocalCluster(n_workers=2, processes=True, threads_per_worker=1)

or ``DASK_DISTRIBUTED__WORKER__DAEMON=False dask worker ...`` (or ``dask
worker --no-nanny``, whose worker is no child). In a daemonic worker the
partition fails at once with an error naming the setting. Estimators with a
``base_url`` start no engine and run anywhere. Also possible there: setting
``LLM_LABEL_CLF_WORKER_ENGINE=shared`` in the workers' environment makes
them read through one vLLM server per machine (``engines.shared``), which
daemonic workers may use.

Within a worker process (a ``multiprocessing`` child) the package would by
default read through that shared server, as it does for joblib's workers;
here each worker starts its own engine instead (``LLM_LABEL_CLF_WORKER_ENGINE``
is set to ``own`` in the worker unless already set), which is what a
multi-machine cluster wants: one engine per worker, no loopback server.

The nanny's environment. A nanny starts its worker with
``MALLOC_TRIM_THRESHOLD_=65536`` and ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
``OPENBLAS_NUM_THREADS`` at 1 (``distributed.nanny.pre-spawn-environ``),
settings for the worker's own memory and libraries, and an engine process
started there inherited them: the float32 engine then read 200 texts in
8.5 s against 3.1 s without them (``MKL_NUM_THREADS=1`` alone: 6.1 s; the
malloc trim threshold alone: 4.7 s). The engine binds its own threads to the
cores it may use, so those variables are taken out of the environment while
it starts (only where they still hold the nanny's values) and put back
after: the worker itself keeps them.
"""

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

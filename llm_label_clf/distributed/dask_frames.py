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
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..engines.workers import WORKER_ENGINE_ENV, in_worker_process
from ._batch import score_batch
from ._columns import check_collisions, check_methods, empty_output

if TYPE_CHECKING:  # dask is an optional extra: imported when called, never by the package
    import dask.dataframe

__all__ = ["DAEMON_SETTING", "check_can_start_engine", "score_dask_dataframe"]

#: The Dask setting that makes worker processes daemonic.
DAEMON_SETTING = "distributed.worker.daemon"


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
    heads = [estimator, *(getattr(estimator, "estimators_", None) or [])]
    local = any(hasattr(h, "base_url") and h.base_url is None for h in heads)
    own = os.environ.get(WORKER_ENGINE_ENV, "own").strip().lower() == "own"
    return local and own


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
    return score_batch(estimator, partition, methods, input_columns, id_column, by_index=True)


def score_dask_dataframe(
    frame: dask.dataframe.DataFrame,
    estimator: Any,
    *,
    method: str | Sequence[str] = "predict_proba",
    input_columns: str | Sequence[str] = "text",
    id_column: str | None = None,
) -> dask.dataframe.DataFrame:
    """A lazy Dask DataFrame: ``frame``'s rows (partitions, index and order
    kept) with the fitted ``estimator``'s scores beside their columns, named
    as ``score_ray_dataset`` names them (``proba_<class>``, ``predicted``,
    ...). ``input_columns``: the text column, or columns filling the prompt
    fields of their names; ``id_column`` names rows in errors (else the
    partition's index). Needs non-daemonic workers for embedded engines (see
    module). Raises ValueError for an unknown method or clashing column,
    NotFittedError for an unfitted estimator, ImportError without Dask."""
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

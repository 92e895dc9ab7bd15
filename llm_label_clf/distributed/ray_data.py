"""Scoring a ``ray.data.Dataset`` with a fitted estimator, on a Ray cluster.

``score_ray_dataset`` adds a ``map_batches`` stage over a pool of actors: the
fitted estimator (plain data, never an engine) is pickled once into Ray's
object store and each actor builds from it; each actor attaches its engine
when it starts (the process-wide registry: embedded vLLM, or the remote
servers of ``base_url``) and keeps it for its lifetime, so the model loads
once per actor, not per batch. Execution is Ray Data's streaming one: the
result is a lazy Dataset, nothing is materialised here.

Fault tolerance: an actor that dies (its node lost, the process killed) is
restarted by Ray (``max_restarts=-1``) and its in-flight batch re-run on it
(``max_task_retries=3``: a batch that kills its actor four times fails the
job instead of looping); a batch's output is only kept once it completes, so
nothing is lost or duplicated. Row errors (the estimator refusing a text)
are not retried: they fail the job with the row named (``id_column``), in
Ray's ``RayTaskError(UserCodeException)``, whose message carries ours.

Resources: ``num_cpus``/``num_gpus`` are per actor. On a CPU node one actor
using every core is fastest (vLLM binds its threads to all the cores the
process may use); on GPU nodes one actor per GPU (``num_gpus=1``).

Not done: Ray's own vLLM stage (``ray.data.llm``) runs only on GPUs in this
Ray, and a fitted plan may need several reads per text (one per distinct
label prefix) where that stage maps one row to one request; a preprocess /
postprocess pair for it could not be tested on this CPU-only machine, so it
is not offered. ``score_ray_dataset`` runs vLLM itself inside the actors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from ._batch import score_batch
from ._columns import check_methods

if TYPE_CHECKING:  # ray is an optional extra: imported when called, never by the package
    import ray.data

__all__ = ["ACTOR_DEFAULTS", "score_ray_dataset"]

#: Actor options applied unless ``ray_remote_args`` sets them (see module).
ACTOR_DEFAULTS: dict[str, Any] = {"max_restarts": -1, "max_task_retries": 3}


def _import_ray() -> Any:
    try:
        import ray.data
    except ImportError as exc:
        raise ImportError(
            "score_ray_dataset needs Ray Data: pip install 'llm_label_clf[ray]' (or 'ray[data]')"
        ) from exc
    return ray


def attach_engine(estimator: Any) -> None:
    """Starts (or finds) the engine of ``estimator`` and of each of its
    per-output estimators in this process, so that a model that cannot load
    fails the actor's creation (which Ray Data stops retrying after a few
    attempts) instead of every batch. Estimators without an engine spec
    (other scikit-learn estimators) attach on their first read, if at all."""
    from ..classifier import LLMLabelClassifier
    from ..engines import engine_for

    heads = [estimator, *(getattr(estimator, "estimators_", None) or [])]
    for head in heads:
        if isinstance(head, LLMLabelClassifier):
            engine_for(head.model, head.base_url, head.engine_options, owner=type(head).__name__)


class EstimatorActor:
    """The callable class Ray Data runs as actors: holds the estimator (and
    through the registry its engine) and scores each batch."""

    def __init__(
        self, estimator: Any, methods: Sequence[str], input_columns: str | Sequence[str], id_column: str | None
    ) -> None:
        self.estimator = estimator
        self.methods = tuple(methods)
        self.input_columns = input_columns
        self.id_column = id_column
        attach_engine(estimator)

    def __call__(self, batch: pd.DataFrame) -> pd.DataFrame:
        return score_batch(self.estimator, batch, self.methods, self.input_columns, self.id_column)


def _compute(concurrency: int | tuple[int, int]) -> Any:
    """Ray Data's actor pool: a fixed size, or (min, max) to autoscale."""
    from ray.data import ActorPoolStrategy

    if isinstance(concurrency, int):
        if concurrency < 1:
            raise ValueError(f"concurrency={concurrency}: need at least one actor")
        return ActorPoolStrategy(size=concurrency)
    low, high = concurrency
    return ActorPoolStrategy(min_size=low, max_size=high)


def score_ray_dataset(
    dataset: ray.data.Dataset,
    estimator: Any,
    *,
    method: str | Sequence[str] = "predict_proba",
    input_columns: str | Sequence[str] = "text",
    id_column: str | None = None,
    batch_size: int | None = 256,
    concurrency: int | tuple[int, int] = 1,
    num_cpus: float | None = 1,
    num_gpus: float | None = None,
    ray_remote_args: Mapping[str, Any] | None = None,
) -> ray.data.Dataset:
    """A lazy Dataset: ``dataset``'s rows with the fitted ``estimator``'s scores
    beside their columns. ``method`` (one or several of ``predict_proba``,
    ``predict_log_proba``, ``predict``, ``decision_function``, ``transform``)
    picks the columns: ``proba_<class>`` and ``predicted`` for
    ``predict_proba``, ``get_feature_names_out()`` for ``transform``, and per
    output / per label with several outputs or multi-label (``_columns``).
    ``input_columns``: the text column (fills ``{text}``), or a list of columns
    filling the prompt fields of their names. ``id_column`` names rows in
    errors. ``batch_size`` rows go to an actor at once (None: one block); ``concurrency`` actors
    (or a (min, max) autoscaling range), each with ``num_cpus``/``num_gpus``
    and ``ray_remote_args`` (over ``ACTOR_DEFAULTS``).

    Rows come back in input order only when the Dataset's
    ``DataContext.execution_options.preserve_order`` is set; carry an id
    column to join otherwise. Raises ValueError for an unknown method,
    NotFittedError for an unfitted estimator, ImportError without Ray."""
    ray = _import_ray()
    methods = check_methods(estimator, method)
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: need at least one row per batch")
    remote_args = {**ACTOR_DEFAULTS, **dict(ray_remote_args or {})}
    resources = {k: v for k, v in {"num_cpus": num_cpus, "num_gpus": num_gpus}.items() if v is not None}
    if not isinstance(dataset, ray.data.Dataset):
        raise ValueError(f"dataset must be a ray.data.Dataset, got {type(dataset).__name__}")
    return dataset.map_batches(
        EstimatorActor,
        fn_constructor_kwargs={
            "estimator": estimator,
            "methods": methods,
            "input_columns": input_columns,
            "id_column": id_column,
        },
        compute=_compute(concurrency),
        batch_size=batch_size,
        batch_format="pandas",
        **resources,
        **remote_args,
    )

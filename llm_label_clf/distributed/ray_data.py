"""Scoring a ``ray.data.Dataset`` with a fitted estimator, on a Ray cluster:
a ``map_batches`` stage over a pool of actors, each holding one engine for
its lifetime; the result is a lazy Dataset. Fault tolerance is Ray Data's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from ._batch import attach_engine, score_batch
from ._columns import check_methods

if TYPE_CHECKING:  # ray is an optional extra: imported when called, never by the package
    import ray.data

__all__ = ["score_ray_dataset"]


def _import_ray() -> Any:
    try:
        import ray.data
    except ImportError as exc:
        raise ImportError(
            "score_ray_dataset needs Ray Data: pip install 'llm_label_clf[ray]' (or 'ray[data]')"
        ) from exc
    return ray


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
    """Scores a Ray Data ``Dataset`` with a fitted estimator, on a pool of actors.

    A ``map_batches`` stage over actors that each attach one engine (embedded
    vLLM, or the servers of the estimator's ``base_url``) in their
    constructor and keep it for every batch. The estimator is pickled once
    (plain data, never an engine). Rows come back in input order only when
    the Dataset's ``DataContext.execution_options.preserve_order`` is set;
    carry an id column to join otherwise.

    Parameters
    ----------
    dataset : ray.data.Dataset
        The rows to score.
    estimator : LLMLabelClassifier
        A fitted estimator.
    method : str or list of str, default="predict_proba"
        One or several of ``predict_proba``, ``predict_log_proba``,
        ``predict``, ``decision_function``, ``transform``: they pick the
        columns added (``proba_<class>`` and ``predicted`` for
        ``predict_proba``, ``get_feature_names_out()`` for ``transform``; per
        output or per label with several outputs or multi-label).
    input_columns : str or list of str, default="text"
        The text column (fills ``{text}``), or a list of columns filling the
        prompt fields of their names.
    id_column : str or None, default=None
        The column that names rows in errors (else their place in the batch
        and their text's start).
    batch_size : int or None, default=256
        Rows sent to an actor at once (None: one block).
    concurrency : int or (int, int), default=1
        Actors, or a (min, max) autoscaling range.
    num_cpus, num_gpus : float or None
        Resources per actor (defaults 1 and None). On a CPU node give one
        actor all the cores.
    ray_remote_args : dict or None, default=None
        Further keyword arguments of ``map_batches`` (``memory``,
        ``resources``, ``accelerator_type``, ``runtime_env``, ...; actor
        options such as ``max_task_retries`` too, which Ray 2.60 deprecates
        there).

    Returns
    -------
    ray.data.Dataset
        Lazy: ``dataset``'s rows with the scores beside their columns.

    Raises
    ------
    ValueError
        An unknown method, a ``batch_size`` below 1, or ``dataset`` not a
        Dataset.
    NotFittedError
        ``estimator`` is not fitted.
    ImportError
        Ray is not installed (``pip install "llm_label_clf[ray]"``).

    Examples
    --------
    >>> import ray  # doctest: +SKIP
    >>> clf = LLMLabelClassifier(prompt="Review: {text}\\nSentiment:").fit(train.text, train.label)  # doctest: +SKIP
    >>> scored = score_ray_dataset(ray.data.read_parquet("reviews/"), clf, id_column="id",
    ...                            concurrency=4, num_gpus=1)  # doctest: +SKIP
    >>> scored.write_parquet("scored/")  # id, text, proba_negative, proba_positive, predicted  # doctest: +SKIP
    """
    ray = _import_ray()
    methods = check_methods(estimator, method)
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: need at least one row per batch")
    remote_args = dict(ray_remote_args or {})
    resources = {k: v for k, v in {"num_cpus": num_cpus, "num_gpus": num_gpus}.items() if v is not None}
    if not isinstance(dataset, ray.data.Dataset):
        raise ValueError(f"dataset must be a ray.data.Dataset, got {type(dataset).__name__}")
    actor = {"estimator": estimator, "methods": methods, "input_columns": input_columns, "id_column": id_column}
    return dataset.map_batches(
        EstimatorActor,
        fn_constructor_kwargs=actor,
        compute=_compute(concurrency),
        batch_size=batch_size,
        batch_format="pandas",
        **resources,
        **remote_args,
    )

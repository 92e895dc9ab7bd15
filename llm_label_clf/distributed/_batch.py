"""One batch (a Ray Data batch or a Dask partition, as a pandas DataFrame)
scored with a fitted estimator: each method called once over one shared
read of each prompt (a ``ReadCache``), the scores beside the batch's
columns, and a refused row re-raised naming the dataset's own row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..exceptions import GenerationError, InvalidInputError
from ..reading.cache import ReadCache
from ._columns import calls, check_collisions, output_frame

__all__ = ["attach_engine", "llm_heads", "score_batch"]

_TEXT_SHOWN = 60


def llm_heads(estimator: Any) -> list[Any]:
    """The ``LLMLabelClassifier``s that ``estimator`` reads with: itself, its
    per-output estimators (``estimators_``), the winner of a search
    (``best_estimator_``) and the steps of a ``Pipeline``."""
    from ..classifier import LLMLabelClassifier

    found, todo = [], [estimator]
    while todo:
        head = todo.pop(0)
        if isinstance(head, LLMLabelClassifier):
            found.append(head)
        todo.extend(getattr(head, "estimators_", None) or [])
        if getattr(head, "best_estimator_", None) is not None:
            todo.append(head.best_estimator_)
        todo.extend(step for _, step in getattr(head, "steps", None) or [])
    return found


def attach_engine(estimator: Any) -> None:
    """Starts (or finds) the engine of every classifier ``estimator`` reads
    with (``llm_heads``), in this process, before any batch, even where the
    read store would answer every read (docs/architecture.md: ``distributed/_batch.py``)."""
    from ..engines import engine_for

    for head in llm_heads(estimator):
        engine_for(head.model, head.base_url, head.engine_options, owner=type(head).__name__).start()


def as_x(batch: pd.DataFrame, input_columns: str | Sequence[str]) -> pd.Series | pd.DataFrame:
    """``X`` for the estimator: one column as texts (they fill ``{text}``), or
    several as a DataFrame (they fill the prompt fields of their names)."""
    wanted = [input_columns] if isinstance(input_columns, str) else list(input_columns)
    missing = [c for c in wanted if c not in batch.columns]
    if missing:
        raise ValueError(
            f"input column(s) {missing} not in the data, whose columns are "
            f"{[str(c) for c in batch.columns]}: set input_columns to the text column(s)"
        )
    return (batch[input_columns] if isinstance(input_columns, str) else batch[wanted]).reset_index(drop=True)


def _describe(
    batch: pd.DataFrame, items: list[int], id_column: str | None, x: Any, by_index: bool
) -> tuple[str, list[Any]]:
    """Words naming the failed rows, and their ids (or batch positions)."""
    if id_column is not None or by_index:
        values = batch.index if id_column is None else batch[id_column]
        name = "index" if id_column is None else id_column
        ids = [values[i] if id_column is None else values.iloc[i] for i in items]
        ids = [i.item() if isinstance(i, np.generic) else i for i in ids]
        shown = ids if len(ids) <= 20 else [*ids[:20], "..."]
        return (f"the row with {name}={ids[0]!r}" if len(ids) == 1 else f"rows with {name} in {shown}"), ids
    first = items[0]
    row = x.iloc[first]
    text = row if not isinstance(row, pd.Series) else " | ".join(map(str, row.tolist()))
    words = f"item {first} of a batch of {len(batch)} rows (text {str(text)[:_TEXT_SHOWN]!r})"
    if len(items) > 1:
        words += f" and items {items[1:21]} of that batch"
    return words + " (pass id_column= to name rows by their ids)", items


def score_batch(
    estimator: Any,
    batch: pd.DataFrame,
    methods: Sequence[str],
    input_columns: str | Sequence[str],
    id_column: str | None,
    *,
    by_index: bool = False,
) -> pd.DataFrame:
    """``batch`` with the scores of ``methods`` beside its columns, rows in
    order, index kept. Row errors are re-raised naming the row (see module):
    by ``id_column``, else by the batch's index label when ``by_index`` (a
    Dask partition's index is the frame's), else by place and text."""
    if id_column is not None and id_column not in batch.columns:
        raise ValueError(
            f"id_column {id_column!r} not in the data, whose columns are {[str(c) for c in batch.columns]}"
        )
    x = as_x(batch, input_columns)
    results = {}
    with ReadCache().active():  # one engine read per prompt, whatever the methods (see module)
        for method in calls(methods):
            try:
                results[method] = getattr(estimator, method)(x) if len(batch) else None
            except (InvalidInputError, GenerationError) as exc:  # re-made to name the dataset's rows
                items = [i for i in exc.items if 0 <= i < len(batch)]
                if not items:
                    raise
                where, ids = _describe(batch, items, id_column, x, by_index)
                raise type(exc)(f"{method} failed on {where}: {exc}", ids) from exc  # items: the rows' ids
    scores = output_frame(estimator, methods, results if len(batch) else None, len(batch), index=batch.index)
    check_collisions(batch.columns, scores.columns)
    return pd.concat([batch, scores], axis=1)

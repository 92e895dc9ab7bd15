"""Reading through the persistent read store (``llm_label_clf.store``): a
reading plan with a ``StoreRef`` asks the store for its prompts' reads, reads
only the others on the engine, and stores those in one transaction before it
returns, so a run killed after a batch keeps that batch's reads and a rerun
reads only what is not stored yet. Joint reads are not stored."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import numpy as np

from ..exceptions import GenerationError, ReadStoreWarning, warn_user
from ..store.handle import StoreRef
from ..store.sqlite import StoredRead, StoreWriteError, prompt_digest
from .batches import LabelScores

__all__ = ["read_distinct", "read_through", "stack_scores"]

Prompt = tuple[int, ...]
Result = TypeVar("Result")


async def read_distinct(
    read: Callable[..., Coroutine[Any, Any, Result]],
    engine: Any,
    distinct: Sequence[Prompt],
    ids: Sequence[Prompt],
    offset: int,
) -> Result:
    """``read(engine, distinct)``'s result; a ``GenerationError`` names the items of
    ``ids`` (the caller's prompts, ``ids[0]`` being input item ``offset``)
    where each failed prompt first occurs."""
    try:
        return await read(engine, list(distinct), offset=0)
    except GenerationError as exc:
        first = {p: i for i, p in reversed(list(enumerate(ids)))}
        items = sorted({offset + first[distinct[k]] for k in exc.items if k < len(distinct)})
        reason = getattr(exc, "reason", str(exc))
        error = GenerationError(f"label reads failed for input item(s) {items[:20]}: {reason}", items)
        error.reason = reason  # type: ignore[attr-defined]  # so nested layers name the items once
        raise error from exc


def stack_scores(rows: Sequence[tuple[np.ndarray, int, float | None]], width: int) -> LabelScores:
    """Per-prompt (sequence logprobs, top token, first-token log mass) rows
    as one ``LabelScores`` (the mass None when any row has none)."""
    logprobs = np.array([r[0] for r in rows], dtype=np.float64).reshape(len(rows), width)
    top = np.array([r[1] for r in rows], dtype=np.int64)
    masses = [r[2] for r in rows]
    first = None if any(m is None for m in masses) else np.array(masses, dtype=np.float64)
    return LabelScores(logprobs, top, first)


def _rows(scores: LabelScores) -> list[StoredRead]:
    first = scores.first_logmass
    return [
        StoredRead(scores.logprobs[k], int(scores.top_token[k]), None if first is None else float(first[k]))
        for k in range(scores.logprobs.shape[0])
    ]


async def read_through(
    ref: StoreRef, plan: Any, engine: Any, prompts: Sequence[Sequence[int]], *, offset: int = 0
) -> tuple[LabelScores, int]:
    """``plan``'s scores of ``prompts``, from the store where it holds them
    and from the engine (``plan.read_engine``) otherwise, and how many
    distinct prompts the engine read. Engine reads are stored before this
    returns. Raises ReadStoreError when the store is damaged or not ours,
    GenerationError naming the failed items."""
    db = ref.database
    width = len(plan.trie.sequences)
    sequences = json.dumps(plan.sequences_key)
    space = db.space(ref.reader, sequences, model=ref.model, key=ref.key)
    ids = [tuple(int(t) for t in p) for p in prompts]
    digests = {p: prompt_digest(p) for p in dict.fromkeys(ids)}
    found = db.get(space, digests.values(), width)
    missing = [p for p, d in digests.items() if d not in found]
    if missing:
        fresh = _rows(await read_distinct(plan.read_engine, engine, missing, ids, offset))
        new = [(digests[p], read) for p, read in zip(missing, fresh, strict=True)]
        found.update(new)
        if not db.writes_failed:
            try:
                db.put(space, new)
            except StoreWriteError as exc:
                db.writes_failed = True
                warn_user(f"{exc}. Reads go on without being stored (the stored ones still answer).", ReadStoreWarning)
    rows = [found[digests[p]] for p in ids]
    return stack_scores([(r.logprobs, r.top_token, r.first_logmass) for r in rows], width), len(missing)

"""A cache of label reads, so model selection reads each distinct prompt once.

Cross-validated selection (``LLMLabelClassifierCV``) scores many candidates
that differ only in what happens after the read (calibration, length norm,
the folds) and refits the winner; all of them ask for the same reads. While a
``ReadCache`` is active (``with cache.active():``), the chunk driver runs every
``ReadingPlan`` through it: a prompt (its token ids) already read with the
same label sequences is answered from memory, and only the others reach the
engine. ``reads`` counts the engine reads made, for the cost of a fit.

A cache lives for one ``fit`` and is never pickled with an estimator."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..exceptions import GenerationError
from .batches import LabelScores
from .plan import ClassReads, ReadingPlan

__all__ = ["CachedPlan", "ReadCache", "active_cache", "with_cache"]

_ACTIVE: contextvars.ContextVar[ReadCache | None] = contextvars.ContextVar("llm_label_clf_read_cache", default=None)


@dataclass
class ReadCache:
    """Sequence logprobs, top token and first-token label mass (log; None
    when the read gives none) per (label sequences, prompt ids); ``reads``
    engine reads were made to fill it, ``texts`` prompts read."""

    entries: dict[tuple[Any, tuple[int, ...]], tuple[np.ndarray, int, float | None]] = field(default_factory=dict)
    reads: int = 0
    texts: int = 0

    @contextlib.contextmanager
    def active(self) -> Iterator[ReadCache]:
        """Routes this context's reads (``read_plans``) through the cache."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)


def active_cache() -> ReadCache | None:
    """The cache active in this context, if any."""
    return _ACTIVE.get()


@dataclass(frozen=True)
class CachedPlan:
    """``plan`` with its engine reads answered from ``cache`` where it can:
    same ``encode``, same result, fewer reads."""

    plan: ReadingPlan
    cache: ReadCache

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plan, name)

    async def read(self, engine: Any, prompts: Sequence[Sequence[int]], *, offset: int = 0) -> list[ClassReads]:
        key = self.plan.sequences_key
        ids = [tuple(int(t) for t in p) for p in prompts]
        missing = [i for i, p in enumerate(ids) if (key, p) not in self.cache.entries]
        unique = list(dict.fromkeys(ids[i] for i in missing))
        if unique:
            first = {p: i for i, p in reversed(list(enumerate(ids)))}
            try:
                scores = await self.plan.read_sequences(engine, unique, offset=0)
            except GenerationError as exc:
                items = sorted({offset + first[unique[k]] for k in exc.items if k < len(unique)})
                raise GenerationError(f"label reads failed for input item(s) {items[:20]}: {exc}", items) from exc
            for k, p in enumerate(unique):
                first_mass = None if scores.first_logmass is None else float(scores.first_logmass[k])
                self.cache.entries[(key, p)] = (scores.logprobs[k], int(scores.top_token[k]), first_mass)
            self.cache.reads += len(unique) * len(self.plan.trie.reads)
            self.cache.texts += len(unique)
        rows = [self.cache.entries[(key, p)] for p in ids]
        n_sequences = len(self.plan.trie.sequences)
        logprobs = np.array([r[0] for r in rows], dtype=np.float64).reshape(len(rows), n_sequences)
        top = np.array([r[1] for r in rows], dtype=np.int64)
        masses = [r[2] for r in rows]
        first = None if any(m is None for m in masses) else np.array(masses, dtype=np.float64)
        return [self.plan.finish(LabelScores(logprobs, top, first))]


def with_cache(plans: Sequence[Any]) -> list[Any]:
    """``plans`` with each ``ReadingPlan`` routed through the active cache (a
    ``JointPlan`` reads as it is); unchanged when no cache is active."""
    cache = active_cache()
    if cache is None:
        return list(plans)
    return [CachedPlan(p, cache) if isinstance(p, ReadingPlan) else p for p in plans]

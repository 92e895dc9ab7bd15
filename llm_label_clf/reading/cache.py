"""A cache of label reads, so model selection reads each distinct prompt once."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .plan import ClassReads, ReadingPlan
from .stored import read_distinct, stack_scores

__all__ = ["CachedPlan", "ReadCache", "active_cache", "with_cache"]

_ACTIVE: contextvars.ContextVar[ReadCache | None] = contextvars.ContextVar("llm_label_clf_read_cache", default=None)


Key = tuple[Any, tuple[int, ...]]
Entry = tuple[np.ndarray, int, float | None]


@dataclass
class ReadCache:
    """Sequence logprobs, top token and first-token label mass (log; None
    when the read gives none) per (label sequences, prompt ids); ``reads``
    reads were made to fill it (by the engine, or by ``parent`` when it held
    them), ``texts`` prompts read. ``parent``: the cache consulted before
    the engine, which also stores and counts this cache's engine reads."""

    entries: dict[Key, Entry] = field(default_factory=dict)
    reads: int = 0
    texts: int = 0
    parent: ReadCache | None = field(default=None, repr=False, compare=False)

    def adopt(self, key: Key) -> bool:
        """Copies ``key``'s entry from the nearest ancestor holding it; False when none does."""
        ancestor = self.parent
        while ancestor is not None:
            if key in ancestor.entries:
                self.entries[key] = ancestor.entries[key]
                return True
            ancestor = ancestor.parent
        return False

    def store(self, key: Key, entry: Entry) -> None:
        """Stores an engine read here and in every ancestor."""
        cache: ReadCache | None = self
        while cache is not None:
            cache.entries[key] = entry
            cache = cache.parent

    def charge(self, texts: int, engine_texts: int, reads_per_text: int) -> None:
        """Counts ``texts`` new prompts here, ``engine_texts`` of them read by
        the engine (the others answered by an ancestor or the read store),
        which every ancestor counts too."""
        self.reads += texts * reads_per_text
        self.texts += texts
        ancestor = self.parent
        while ancestor is not None:
            ancestor.reads += engine_texts * reads_per_text
            ancestor.texts += engine_texts
            ancestor = ancestor.parent

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
        new = list(dict.fromkeys(p for p in ids if (key, p) not in self.cache.entries))
        unique = [p for p in new if not self.cache.adopt((key, p))]  # what no ancestor holds either
        per_text = len(self.plan.trie.reads)
        self.cache.charge(len(new) - len(unique), 0, per_text)  # answered by an ancestor
        if unique:
            scores, engine_texts = await read_distinct(self.plan.read_counted, engine, unique, ids, offset)
            for k, p in enumerate(unique):
                first_mass = None if scores.first_logmass is None else float(scores.first_logmass[k])
                self.cache.store((key, p), (scores.logprobs[k], int(scores.top_token[k]), first_mass))
            self.cache.charge(len(unique), engine_texts, per_text)  # a read store's answers: not the engine's
        rows = [self.cache.entries[(key, p)] for p in ids]
        return [self.plan.finish(stack_scores(rows, len(self.plan.trie.sequences)))]

def with_cache(plans: Sequence[Any]) -> list[Any]:
    """``plans`` with each ``ReadingPlan`` routed through the active cache (a
    ``JointPlan`` reads as it is); unchanged when no cache is active."""
    cache = active_cache()
    if cache is None:
        return list(plans)
    return [CachedPlan(p, cache) if isinstance(p, ReadingPlan) else p for p in plans]

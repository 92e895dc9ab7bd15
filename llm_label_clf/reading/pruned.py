"""Pruned reading of many multi-token labels: a best-first search down the
label trie expanding only the prefixes that can still come within
``margin`` nats of the best complete label; the argmax stays exact."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from ..engines.handle import Engine
from ..exceptions import GenerationError
from .batches import LabelScores, read_label_logprobs
from .label_trie import LabelTrie

__all__ = ["PrunedScores", "TrieIndex", "read_sequence_logprobs_pruned"]


@dataclass(frozen=True)
class TrieIndex:
    """What the search needs of a trie, computed once per call: per read, the
    columns of its prefix path, its parent read, and the longest length
    divisor of the sequences below it; per sequence, the reads along its path."""

    prefix_columns: tuple[tuple[int, ...], ...]
    parent: tuple[int, ...]
    below: tuple[tuple[int, ...], ...]
    """Per read, the sequences below its prefix."""
    path_reads: tuple[tuple[int, ...], ...]
    """Per sequence, the read of each of its tokens (the read of its prefix)."""

    @classmethod
    def of(cls, trie: LabelTrie) -> TrieIndex:
        # a constrained trie reads only some prefixes: a read's parent is the
        # nearest read above it, and a path has one column per read along it
        read_of = {r.prefix: i for i, r in enumerate(trie.reads)}
        path_reads = tuple(
            tuple(read_of[seq[:d]] for d in range(len(seq)) if seq[:d] in read_of) for seq in trie.sequences
        )
        below = tuple(
            tuple(
                s for s, seq in enumerate(trie.sequences)
                if len(seq) > len(r.prefix) and seq[: len(r.prefix)] == r.prefix
            )
            for r in trie.reads
        )
        # a read's prefix path is the start of the path of any sequence below it
        depth = [path_reads[seqs[0]].index(r) for r, seqs in enumerate(below)]
        parent = tuple(path_reads[seqs[0]][d - 1] if d else -1 for seqs, d in zip(below, depth, strict=True))
        prefix_columns = tuple(tuple(trie.paths[seqs[0]][:d]) for seqs, d in zip(below, depth, strict=True))
        return cls(prefix_columns, parent, below, path_reads)


@dataclass(frozen=True)
class PrunedScores:
    """``scores`` as from an exact read (some sequences approximated, as the
    module says), and how many reads each prompt took."""

    scores: LabelScores
    reads_per_prompt: np.ndarray


def _bound(prefix_lp: float, read: int, index: TrieIndex, lengths: np.ndarray | None) -> float:
    """The best score any sequence below ``read`` can reach."""
    if lengths is None:
        return prefix_lp
    # a negative logprob divided by the longest divisor below is the largest
    return prefix_lp / float(lengths[list(index.below[read])].max())


async def _read_group(
    engine: Engine, prompts: Sequence[Sequence[int]], rows: list[int], prefix: tuple[int, ...],
    next_ids: tuple[int, ...], offset: int,
) -> LabelScores:
    """One trie read for the prompts ``rows``; errors name the caller's items."""
    try:
        return await read_label_logprobs(engine, [[*prompts[i], *prefix] for i in rows], next_ids)
    except GenerationError as exc:
        items = [offset + rows[i] for i in exc.items]
        raise GenerationError(f"label reads failed for input item(s) {items}: {exc}", items) from exc


async def read_sequence_logprobs_pruned(
    engine: Engine,
    prompts: Sequence[Sequence[int]],
    trie: LabelTrie,
    margin: float,
    *,
    lengths: Sequence[float] | None = None,
    offset: int = 0,
) -> PrunedScores:
    """log P(sequence | prompt) of each of ``trie.sequences`` after each prompt,
    reading only the prefixes whose bound (under ``lengths``, the length
    divisors, when scores are length-normalised) comes within ``margin`` nats of
    the best complete sequence's score; the rest are approximated (see the
    module). Rounds of reads run for all prompts at once; the first read, made
    for every prompt, gives ``top_token`` and ``first_logmass`` exactly."""
    index = TrieIndex.of(trie)
    n = len(prompts)
    divisors = None if lengths is None else np.asarray(lengths, dtype=np.float64)
    columns = np.full((n, trie.n_columns), np.nan)
    done = np.zeros((n, len(trie.reads)), dtype=bool)
    top = np.zeros(n, dtype=np.int64)
    first = np.zeros(n)
    starts = np.cumsum([0, *(len(r.next_ids) for r in trie.reads)])
    pending = {0: list(range(n))}  # read -> prompt rows to read it for
    while pending:
        results = await asyncio.gather(
            *(_read_group(engine, prompts, rows, trie.reads[r].prefix, trie.reads[r].next_ids, offset)
              for r, rows in pending.items())
        )
        for (r, rows), scores in zip(pending.items(), results, strict=True):
            span = range(starts[r], starts[r + 1])
            columns[np.ix_(rows, span)] = trie.normalise_read(scores.logprobs)
            done[rows, r] = True
            if r == 0:
                top[rows] = scores.top_token
                first[rows] = logsumexp(scores.logprobs, axis=1)
        pending = _next_round(columns, done, index, trie, divisors, margin)
    sequence_lp = _finish(columns, done, index, trie)
    return PrunedScores(LabelScores(sequence_lp, top, first), done.sum(axis=1))


def _complete_scores(columns: np.ndarray, trie: LabelTrie, divisors: np.ndarray | None) -> np.ndarray:
    """(n, n_sequences) scores of the sequences read to the end; -inf elsewhere."""
    lp = trie.sequence_logprobs(columns)
    lp = np.where(np.isnan(lp), -np.inf, lp)
    return lp if divisors is None else lp / divisors[None, :]


def _next_round(
    columns: np.ndarray, done: np.ndarray, index: TrieIndex, trie: LabelTrie,
    divisors: np.ndarray | None, margin: float,
) -> dict[int, list[int]]:
    """The reads to run next: unread children of read prefixes whose bound is
    within ``margin`` of each prompt's best complete score; while a prompt has
    no complete sequence yet, only its most promising open prefix (a dive
    towards a first complete one, which then sets the bar)."""
    best = _complete_scores(columns, trie, divisors).max(axis=1)
    bounds = np.full(done.shape, -np.inf)
    for r in range(1, len(trie.reads)):
        for i in np.flatnonzero(done[:, index.parent[r]] & ~done[:, r]):
            prefix_lp = float(columns[i, list(index.prefix_columns[r])].sum())
            bounds[i, r] = _bound(prefix_lp, r, index, divisors)
    pending: dict[int, list[int]] = {}
    for i in range(done.shape[0]):
        if np.isfinite(best[i]):
            chosen = np.flatnonzero(np.isfinite(bounds[i]) & (bounds[i] >= best[i] - margin))
        elif np.isfinite(bounds[i]).any():
            chosen = [int(np.argmax(bounds[i]))]
        else:
            chosen = []
        for r in chosen:
            pending.setdefault(int(r), []).append(i)
    return dict(sorted(pending.items()))


def _finish(columns: np.ndarray, done: np.ndarray, index: TrieIndex, trie: LabelTrie) -> np.ndarray:
    """Sequence logprobs: exact where read to the end; else the deepest read
    prefix's logprob shared equally among the sequences below the first read
    the search left closed."""
    out = trie.sequence_logprobs(np.nan_to_num(columns, nan=0.0))
    for s, reads in enumerate(index.path_reads):
        path = trie.paths[s]
        for i in np.flatnonzero(~done[:, list(reads)].all(axis=1)):
            depth = next(d for d, r in enumerate(reads) if not done[i, r])
            closed = reads[depth]
            out[i, s] = columns[i, list(path[:depth])].sum() - np.log(len(index.below[closed]))
    return out

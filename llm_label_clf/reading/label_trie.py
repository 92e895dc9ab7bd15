"""Exact scores of multi-token labels from next-token reads: the labels' token
sequences form a trie, and each distinct prefix (the empty one included) is
one read of ``prompt + prefix`` for the tokens that can follow it. A label's
logprob is the sum along its path, log P(t1 | p) + log P(t2 | p t1) + ...

Reads are grouped by prefix length so that each level runs after the one
before it has put the prompt into vLLM's prefix cache; a text's prompt is then
computed once, not once per label. Labels of one token each need one read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["LabelTrie", "TrieRead"]


@dataclass(frozen=True)
class TrieRead:
    """One read: after ``prompt + prefix``, the logprobs of ``next_ids``."""

    prefix: tuple[int, ...]
    next_ids: tuple[int, ...]


@dataclass(frozen=True)
class LabelTrie:
    """The reads that score ``sequences``, and where each sequence's tokens land
    among the reads' concatenated columns."""

    sequences: tuple[tuple[int, ...], ...]
    reads: tuple[TrieRead, ...]
    paths: tuple[tuple[int, ...], ...]
    """Per sequence, the column of each of its tokens in the concatenated reads."""

    @classmethod
    def build(cls, sequences: Sequence[Sequence[int]]) -> LabelTrie:
        """The trie of ``sequences`` (each non-empty). Raises ValueError for an
        empty sequence."""
        seqs = tuple(tuple(int(t) for t in s) for s in sequences)
        for i, seq in enumerate(seqs):
            if not seq:
                raise ValueError(f"label sequence {i} is empty: every label needs at least one token")
        children: dict[tuple[int, ...], list[int]] = {}
        for seq in seqs:
            for depth, token in enumerate(seq):
                following = children.setdefault(seq[:depth], [])
                if token not in following:
                    following.append(token)
        prefixes = sorted(children, key=lambda p: (len(p), p))
        reads = tuple(TrieRead(p, tuple(children[p])) for p in prefixes)
        column: dict[tuple[tuple[int, ...], int], int] = {}
        for read in reads:
            for token in read.next_ids:
                column[(read.prefix, token)] = len(column)
        paths = tuple(tuple(column[(seq[:d], t)] for d, t in enumerate(seq)) for seq in seqs)
        return cls(seqs, reads, paths)

    @property
    def n_columns(self) -> int:
        return sum(len(r.next_ids) for r in self.reads)

    @property
    def levels(self) -> list[list[int]]:
        """Read indices grouped by prefix length, shortest first."""
        out: dict[int, list[int]] = {}
        for i, read in enumerate(self.reads):
            out.setdefault(len(read.prefix), []).append(i)
        return [out[k] for k in sorted(out)]

    @property
    def max_prefix_len(self) -> int:
        """Tokens added to a prompt by the deepest read."""
        return max(len(r.prefix) for r in self.reads)

    def sequence_logprobs(self, columns: np.ndarray) -> np.ndarray:
        """(n, n_columns) read logprobs -> (n, n_sequences) summed path logprobs."""
        out = np.empty((columns.shape[0], len(self.paths)))
        for j, path in enumerate(self.paths):
            out[:, j] = columns[:, list(path)].sum(axis=1)
        return out

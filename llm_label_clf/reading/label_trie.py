"""Exact scores of multi-token labels from next-token reads: the labels'
token sequences form a trie, each distinct prefix one read, a label's
logprob the sum along its path; a constrained trie renormalises where the
labels branch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import log_softmax

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
    """Per sequence, the column of each of its read tokens in the concatenated
    reads (every token; constrained: the tokens at the root and at branches)."""
    constrained: bool = False
    """Reads renormalised over their own tokens, and only the root and the
    branching prefixes read (see the module)."""

    @classmethod
    def build(cls, sequences: Sequence[Sequence[int]], *, constrained: bool = False) -> LabelTrie:
        """The trie of ``sequences`` (each non-empty); ``constrained``: the
        constrained trie (see the module), for sequences none of which is the
        start of another (``reading.constrained.check_constrained_labels``
        checks labels for that). Raises ValueError for an empty sequence."""
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
        if constrained:
            children = {p: ids for p, ids in children.items() if not p or len(ids) > 1}
        prefixes = sorted(children, key=lambda p: (len(p), p))
        reads = tuple(TrieRead(p, tuple(children[p])) for p in prefixes)
        column: dict[tuple[tuple[int, ...], int], int] = {}
        for read in reads:
            for token in read.next_ids:
                column[(read.prefix, token)] = len(column)
        paths = tuple(
            tuple(column[(seq[:d], t)] for d, t in enumerate(seq) if seq[:d] in children) for seq in seqs
        )
        return cls(seqs, reads, paths, constrained)

    @property
    def mode_key(self) -> tuple[str, ...]:
        """What tells this trie's sequence scores apart from a plain trie's of
        the same sequences (for caches and stores): () or ("constrained",)."""
        return ("constrained",) if self.constrained else ()

    def normalise(self, columns: np.ndarray) -> np.ndarray:
        """(n, n_columns) read logprobs as the sums along paths need them: as
        read, or (constrained) each read's log-softmax over its own tokens.
        Idempotent; a read's NaN columns (not read) stay NaN."""
        if not self.constrained:
            return columns
        out = np.array(columns, dtype=np.float64, copy=True)
        start = 0
        for read in self.reads:
            stop = start + len(read.next_ids)
            out[:, start:stop] = self.normalise_read(out[:, start:stop])
            start = stop
        return out

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

    def normalise_read(self, logprobs: np.ndarray) -> np.ndarray:
        """(n, len(next_ids)) logprobs of one read as ``normalise`` leaves them."""
        return log_softmax(logprobs, axis=1) if self.constrained else logprobs

    def sequence_logprobs(self, columns: np.ndarray) -> np.ndarray:
        """(n, n_columns) read logprobs -> (n, n_sequences) summed path
        logprobs (constrained: of the renormalised reads)."""
        columns = self.normalise(columns)
        out = np.empty((columns.shape[0], len(self.paths)))
        for j, path in enumerate(self.paths):
            out[:, j] = columns[:, list(path)].sum(axis=1)
        return out


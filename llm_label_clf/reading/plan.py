"""The reading plan: what fit decided about reading one output, as one plain,
immutable, picklable object: ``encode`` turns records into prompt token
ids, ``read`` reads them on an engine passed in into ``ClassReads``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.special import logsumexp

from .batches import LabelScores, read_sequence_logprobs
from .label_trie import LabelTrie
from .pruned import read_sequence_logprobs_pruned
from .render import Encoded, PromptLayout
from .stored import read_through

if TYPE_CHECKING:
    from ..store.handle import StoreRef

__all__ = ["ClassReads", "PromptEncoding", "ReadingPlan", "concat_reads"]


@dataclass(frozen=True)
class ClassReads:
    """One output's reads of ``n`` texts: ``class_logprobs`` (n, n_classes),
    the full-vocabulary log P(class's label | prompt); ``scores`` (n, n_classes),
    what the softmax runs over (the class logprobs, or length-normalised ones);
    ``top_token`` (n,), the token the model itself ranks first;
    ``first_logmass`` (n,), from a label trie's read, the log of the
    full-vocabulary probability of the labels' distinct first tokens (None for
    reads that have no such first read, e.g. a joint read's option letters)."""

    class_logprobs: np.ndarray
    scores: np.ndarray
    top_token: np.ndarray
    first_logmass: np.ndarray | None = None

    def log_proba(self) -> np.ndarray:
        """Log-probabilities over the classes: the log-softmax of ``scores``."""
        if self.scores.shape[0] == 0:
            return self.scores
        return self.scores - logsumexp(self.scores, axis=1, keepdims=True)

    def label_mass(self) -> np.ndarray:
        """Per text, how much the model wants to answer with a label: the
        full-vocabulary probability of the labels' distinct first tokens
        (aliases included), read right after the prompt, so a low mass means
        the answer starts with no label at all; reads without a first read
        (``first_logmass`` None) give the labels' total probability."""
        if self.first_logmass is not None:
            return np.exp(self.first_logmass)
        return np.exp(logsumexp(self.class_logprobs, axis=1)) if self.class_logprobs.shape[0] else np.zeros(0)


def concat_reads(parts: Sequence[ClassReads], n_classes: int) -> ClassReads:
    """Chunks' reads of one output, stacked in order."""
    if not parts:
        empty = np.zeros((0, n_classes))
        return ClassReads(empty, empty, np.zeros(0, dtype=np.int64))
    if len(parts) == 1:
        return parts[0]
    firsts = [p.first_logmass for p in parts]
    return ClassReads(
        np.concatenate([p.class_logprobs for p in parts]),
        np.concatenate([p.scores for p in parts]),
        np.concatenate([p.top_token for p in parts]),
        None if any(f is None for f in firsts) else np.concatenate(firsts),
    )


class PromptEncoding:
    """What every plan does with its ``layout`` before reading: prompts cut
    to leave room for the ``reserved_tokens`` its reads add after them."""

    layout: PromptLayout
    reserved_tokens: int

    def prompt_limit(self, max_model_len: int) -> int:
        """The most prompt tokens that leave room for what the reads add."""
        return max_model_len - self.reserved_tokens

    def encode(
        self, records: Sequence[Mapping[str, str]], tokenizer: Any, max_model_len: int, *, offset: int = 0
    ) -> Encoded:
        """Records -> prompt token ids (see ``PromptLayout.encode``)."""
        return self.layout.encode(records, tokenizer, self.prompt_limit(max_model_len), offset=offset)


@dataclass(frozen=True)
class ReadingPlan(PromptEncoding):
    """One output's reading: ``layout`` renders the prompt; ``trie`` holds the
    token sequences scored after it (each class's first tokens in first-token
    mode, its whole labels otherwise) and the reads that score them;
    ``owner[s]`` is the class of sequence ``s``; ``lengths[s]`` its length
    divisor under ``length_norm`` (None: no normalisation); ``prune_margin``
    the pruned read's margin in nats (None: every prefix is read, exactly);
    ``store`` the persistent read store its reads go through (None: none),
    which changes where reads come from, never their numbers."""

    layout: PromptLayout
    trie: LabelTrie
    owner: tuple[int, ...]
    n_classes: int
    lengths: tuple[float, ...] | None = None
    prune_margin: float | None = None
    store: StoreRef | None = field(default=None, compare=False, repr=False)

    @property
    def output_sizes(self) -> list[int]:
        """Classes per output, in output order."""
        return [self.n_classes]

    @property
    def reserved_tokens(self) -> int:
        """Tokens the reads add after a prompt: the deepest read's label prefix
        and the token it reads."""
        return 1 + self.trie.max_prefix_len

    async def read(self, engine: Any, prompts: Sequence[Sequence[int]], *, offset: int = 0) -> list[ClassReads]:
        """Reads ``prompts`` (token ids) on ``engine``: one ``ClassReads`` (this
        plan answers one output). ``offset`` is the index of ``prompts[0]`` in
        the caller's input, so errors name the caller's items."""
        return [self.finish(await self.read_sequences(engine, prompts, offset=offset))]

    async def read_sequences(self, engine: Any, prompts: Sequence[Sequence[int]], *, offset: int = 0) -> LabelScores:
        """The reading part of ``read``: every label sequence's logprob after
        each prompt, and the model's own first token (from the store where
        it holds them)."""
        return (await self.read_counted(engine, prompts, offset=offset))[0]

    async def read_counted(
        self, engine: Any, prompts: Sequence[Sequence[int]], *, offset: int = 0
    ) -> tuple[LabelScores, int]:
        """``read_sequences``, and how many prompts the engine read: all of
        them without a store, else the distinct ones it did not hold."""
        if self.store is None:
            return await self.read_engine(engine, prompts, offset=offset), len(prompts)
        return await read_through(self.store, self, engine, prompts, offset=offset)

    async def read_engine(self, engine: Any, prompts: Sequence[Sequence[int]], *, offset: int = 0) -> LabelScores:
        """``read_sequences`` on the engine alone."""
        if self.prune_margin is None:
            return await read_sequence_logprobs(engine, prompts, self.trie, offset=offset)
        pruned = await read_sequence_logprobs_pruned(
            engine, prompts, self.trie, self.prune_margin, lengths=self.lengths, offset=offset
        )
        return pruned.scores

    def finish(self, scores: LabelScores) -> ClassReads:
        """The arithmetic part of ``read``: sequence logprobs -> class logprobs
        (aliases summed) and the scores the softmax runs over (length-normalised
        under ``length_norm``)."""
        class_lp = self.class_logprobs(scores.logprobs)
        scored = class_lp
        if self.lengths is not None and class_lp.shape[0]:
            scored = self.class_logprobs(scores.logprobs / np.array(self.lengths)[None, :])
        return ClassReads(class_lp, scored, scores.top_token, scores.first_logmass)

    @property
    def sequences_key(self) -> tuple[Any, ...]:
        """What decides ``read_sequences``' answer for a given prompt: the label
        sequences read, and for a pruned read its margin and length divisors.
        Plans that differ only in how they finish (aliases, ``length_norm``)
        share it, so one read of a prompt serves them all."""
        if self.prune_margin is None:
            return (self.trie.sequences, *self.trie.mode_key)
        return (self.trie.sequences, self.prune_margin, self.lengths, *self.trie.mode_key)

    def class_logprobs(self, sequence_lp: np.ndarray) -> np.ndarray:
        """Per class, the log of the summed probability of its sequences."""
        owner = np.array(self.owner)
        out = np.empty((sequence_lp.shape[0], self.n_classes))
        for k in range(self.n_classes):
            out[:, k] = logsumexp(sequence_lp[:, owner == k], axis=1)
        return out

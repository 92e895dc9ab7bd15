"""The chunk driver: runs reading plans over records, ``batch_size`` records at
a time, so memory stays bounded however long ``X`` is. Each chunk is encoded
by every plan and read on the engine; a progress bar follows the chunks; one
warning at the end names every truncated text.

Sync and async share one driver, written as a generator that yields each
chunk's read (a coroutine) and is sent its result: ``read_plans`` submits
through the sync bridge, ``aread_plans`` awaits it on the library loop while
the caller's loop stays free. Only that submit step differs."""

from __future__ import annotations

from collections.abc import Coroutine, Generator, Mapping, Sequence
from typing import Any, Protocol

from ..engines.handle import Engine
from ..engines.loop import run_on_loop, run_sync
from .plan import ClassReads, concat_reads
from .render import Encoded, warn_truncated

__all__ = ["Plan", "aread_plans", "read_plans"]

ChunkReads = list[list[ClassReads]]


class Plan(Protocol):
    """What the driver needs of a plan (``ReadingPlan``, ``JointPlan``)."""

    @property
    def output_sizes(self) -> list[int]: ...

    def prompt_limit(self, max_model_len: int) -> int: ...

    def encode(
        self, records: Sequence[Mapping[str, str]], tokenizer: Any, max_model_len: int, *, offset: int = 0
    ) -> Encoded: ...

    async def read(self, engine: Engine, prompts: Sequence[Sequence[int]], *, offset: int = 0) -> list[ClassReads]: ...


def _progress_bar(total: int) -> Any:
    """A tqdm bar (notebook widget where available), imported only when shown."""
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="text")


async def _read_chunk(
    plans: Sequence[Plan], engine: Engine, prompts: list[list[list[int]]], offset: int
) -> ChunkReads:
    """Every plan's reads of one chunk, plan after plan (a later plan finds the
    texts' shared prefix in the cache)."""
    return [await plan.read(engine, ids, offset=offset) for plan, ids in zip(plans, prompts, strict=True)]


def _chunks(
    plans: Sequence[Plan], records: Sequence[Mapping[str, str]], engine: Engine, batch_size: int, progress: bool
) -> Generator[Coroutine[Any, Any, ChunkReads], ChunkReads, list[ClassReads]]:
    """Yields each chunk's read and is sent its result; returns every output's
    reads (plans' outputs in order), stacked over the chunks."""
    bounds = [(start, min(start + batch_size, len(records))) for start in range(0, len(records), batch_size)]
    bar = _progress_bar(len(records)) if progress and len(bounds) > 1 else None
    truncated: list[list[int]] = [[] for _ in plans]
    parts: list[ChunkReads] = []
    try:
        for start, stop in bounds:
            prompts = []
            for p, plan in enumerate(plans):
                encoded = plan.encode(records[start:stop], engine.tokenizer, engine.max_model_len, offset=start)
                truncated[p].extend(encoded.truncated)
                prompts.append(encoded.ids)
            parts.append((yield _read_chunk(plans, engine, prompts, start)))
            if bar is not None:
                bar.update(stop - start)
    finally:
        if bar is not None:
            bar.close()
    for plan, cut in zip(plans, truncated, strict=True):
        warn_truncated(cut, plan.prompt_limit(engine.max_model_len), stacklevel=5)
    outputs = []
    for p, plan in enumerate(plans):
        for j, size in enumerate(plan.output_sizes):
            outputs.append(concat_reads([part[p][j] for part in parts], size))
    return outputs


def read_plans(
    plans: Sequence[Plan], records: Sequence[Mapping[str, str]], engine: Engine, *, batch_size: int, progress: bool
) -> list[ClassReads]:
    """Every output's reads of ``records`` (see ``_chunks``), from sync code."""
    steps = _chunks(plans, records, engine, batch_size, progress)
    try:
        chunk = next(steps)
        while True:
            chunk = steps.send(run_sync(chunk))
    except StopIteration as done:
        return done.value
    finally:
        steps.close()


async def aread_plans(
    plans: Sequence[Plan], records: Sequence[Mapping[str, str]], engine: Engine, *, batch_size: int, progress: bool
) -> list[ClassReads]:
    """``read_plans`` for callers inside an event loop: each chunk's reads run
    on the library loop while the caller's loop stays free."""
    steps = _chunks(plans, records, engine, batch_size, progress)
    try:
        chunk = next(steps)
        while True:
            chunk = steps.send(await run_on_loop(chunk))
    except StopIteration as done:
        return done.value
    finally:
        steps.close()

"""The chunk driver: runs reading plans over records a chunk at a time
(memory bounded however long ``X`` is), with the progress bar and one
truncation warning; sync (``read_plans``) and async (``aread_plans``) share
one generator and differ only in how a chunk's read is submitted."""

from __future__ import annotations

from collections.abc import Coroutine, Generator, Mapping, Sequence
from typing import Any, Protocol

from ..engines.handle import Engine
from ..engines.loop import run_on_loop, run_sync
from .cache import with_cache
from .plan import ClassReads, concat_reads
from .render import Encoded, warn_truncated

__all__ = [
    "CHUNK_READS",
    "MIN_CHUNK_TEXTS",
    "PROGRESS_MIN_READS",
    "Plan",
    "aread_plans",
    "chunk_size",
    "read_plans",
    "reads_per_text",
]

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


#: The reads a call must be expected to take before it shows a progress bar
#: (a few seconds on a CPU: docs/architecture.md).
PROGRESS_MIN_READS = 256
#: The reads a chunk aims at when the plans need several reads per text, so
#: the bar moves at least every ~``CHUNK_READS`` reads (seconds to tens of
#: seconds on a CPU) while one-read plans keep ``batch_size``-text batches.
CHUNK_READS = 512
#: The fewest texts a chunk holds (unless ``batch_size`` is smaller): enough to
#: batch a trie's first read, which is one read per text.
MIN_CHUNK_TEXTS = 8


def reads_per_text(plan: Plan) -> int:
    """The reads one text costs ``plan``: one per distinct label prefix of its
    trie (``ReadingPlan``; a pruned read takes at most that many), else one (a
    ``JointPlan`` answers every output in one read)."""
    trie = getattr(plan, "trie", None)
    return len(trie.reads) if trie is not None else 1


def chunk_size(reads: int, batch_size: int) -> int:
    """Texts per chunk for plans needing ``reads`` reads per text: about
    ``CHUNK_READS`` reads, at least ``MIN_CHUNK_TEXTS`` texts, at most
    ``batch_size``. It depends on the plans only, never on ``progress``, so a
    bar never changes which texts share a batch."""
    return min(batch_size, max(MIN_CHUNK_TEXTS, -(-CHUNK_READS // max(reads, 1))))


def _progress_bar(total: int, reads: int, *, pruned: bool) -> Any:
    """A tqdm bar over ``total`` texts (notebook widget where available) that
    says the reads per text when there are several, imported only when shown."""
    from tqdm.auto import tqdm

    postfix = None if reads <= 1 else f"{'up to ' if pruned else ''}{reads} reads/text"
    return tqdm(total=total, unit="text", postfix=postfix)


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
    reads (plans' outputs in order), stacked over the chunks in input order.
    A chunk's ``offset`` is the index of its first record in ``records``. The
    bar is shown when ``progress`` and the expected reads (texts x reads per
    text, summed over the plans) exceed ``PROGRESS_MIN_READS``. Inside an
    active ``ReadCache`` the reading plans read through it."""
    plans = with_cache(plans)
    reads = sum(reads_per_text(plan) for plan in plans)
    step = chunk_size(reads, batch_size)
    bounds = [(start, min(start + step, len(records))) for start in range(0, len(records), step)]
    pruned = any(getattr(plan, "prune_margin", None) is not None for plan in plans)
    show = progress and len(records) * reads > PROGRESS_MIN_READS
    bar = _progress_bar(len(records), reads, pruned=pruned) if show else None
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
    limits = [plan.prompt_limit(engine.max_model_len) for plan in plans]
    cutting = [(cut, limit) for cut, limit in zip(truncated, limits, strict=True) if cut]
    if cutting:  # one warning for the call, however many plans cut a text
        warn_truncated(sorted({i for cut, _ in cutting for i in cut}), min(limit for _, limit in cutting))
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

"""The read budget of ``LLMLabelClassifierCV``: which readers to leave out so
that ``fit`` reads the training texts at most ``max_passes`` times as often
as one zero-shot read with the estimator's own prompt would. Plain
arithmetic on counts; nothing here reads."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from ..exceptions import warn_user
from ..fitting.calibration import CONTENT_FREE_INPUTS
from ..reading.driver import reads_per_text
from .candidates import Candidate

__all__ = ["check_max_passes", "passes", "readers_within", "within_budget", "without_readers", "zero_shot_passes"]


def check_max_passes(max_passes: Any, owner: str) -> None:
    """Raises ValueError unless ``max_passes`` is None or a real number of at least 1."""
    if max_passes is None:
        return
    if isinstance(max_passes, bool) or not isinstance(max_passes, numbers.Real) or not max_passes >= 1:
        raise ValueError(
            f"{owner}: max_passes must be None (read every reader) or a number of at least 1 "
            f"(zero-shot passes over the training texts); got max_passes={max_passes!r}"
        )


def zero_shot_passes(reads: float, n_texts: int, first_reads_per_text: int) -> float:
    """``reads`` in zero-shot passes: over the reads of one pass of the first
    reader (the estimator's own prompt) over ``n_texts`` texts. The one
    definition ``fit_cost_`` reports and the budget bounds."""
    return reads / max(n_texts * first_reads_per_text, 1)


def passes(reads_per_text: Sequence[int], n_texts: int, extra_inputs: int) -> float:
    """The zero-shot passes that reading every reader's texts and its
    ``extra_inputs`` (the content-free inputs) costs."""
    return zero_shot_passes(sum(reads_per_text) * (n_texts + extra_inputs), n_texts, reads_per_text[0])


def readers_within(
    reads_per_text: Sequence[int],
    few_shots: Sequence[int],
    n_texts: int,
    extra_inputs: int,
    max_passes: float | None,
) -> list[int]:
    """The indices (in order) of the readers kept within ``max_passes``: the
    costliest left out first (few-shot before zero-shot at the same cost,
    later before earlier), never the first. All of them when None."""
    kept = list(range(len(reads_per_text)))
    if max_passes is None:
        return kept
    order = sorted(kept[1:], key=lambda r: (reads_per_text[r], few_shots[r] > 0, r), reverse=True)
    for r in order:
        if passes([reads_per_text[k] for k in kept], n_texts, extra_inputs) <= max_passes:
            break
        kept.remove(r)
    return kept


def without_readers(
    readers: list[dict[str, Any]], found: list[Candidate], kept: Sequence[int]
) -> tuple[list[dict[str, Any]], list[Candidate]]:
    """``readers`` and ``found`` with only the ``kept`` readers' candidates
    (and the stacked ones, now over the kept readers), reader indices renumbered."""
    index = {old: new for new, old in enumerate(kept)}
    return [readers[r] for r in kept], [
        Candidate(None if c.reader is None else index[c.reader], c.params)
        for c in found
        if c.reader is None or c.reader in index
    ]


def within_budget(
    readers: list[dict[str, Any]], found: list[Candidate], fitted: list[Any], n_texts: int, max_passes: float | None
) -> tuple[list[dict[str, Any]], list[Candidate], list[Any], list[dict[str, Any]]]:
    """The readers, candidates and fitted readers (their ``plans_`` give the
    costs) kept within ``max_passes`` (``readers_within``), and the readers
    left out, named in one warning."""
    costs = [reads_per_text(reader.plans_[0]) for reader in fitted]
    few_shots = [int(params.get("few_shot") or 0) for params in readers]
    kept = readers_within(costs, few_shots, n_texts, len(CONTENT_FREE_INPUTS), max_passes)
    skipped = [r for r in range(len(readers)) if r not in kept]
    if skipped:
        named = "; ".join(f"{readers[r]} ({costs[r]} reads per text)" for r in skipped)
        warn_user(
            f"LLMLabelClassifierCV: reading every candidate prompt would exceed max_passes={max_passes} "
            f"zero-shot passes over the training texts (the first reads {costs[0]} per text); left out: "
            f"{named}. Pass max_passes=None to read them all.",
            UserWarning,
        )
    kept_readers, kept_found = without_readers(readers, found, kept)
    return kept_readers, kept_found, [fitted[r] for r in kept], [readers[r] for r in skipped]

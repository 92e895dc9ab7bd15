"""How ``LLMLabelClassifierCV`` reads its training texts: every text once
per reader, under the prompt the refit will use, or, for a text that prompt
shows as a few-shot example, under that prompt with the text swapped out
(``reading.unshown``: the reads the refit calibrates on)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..classifier import LLMLabelClassifier
from ..engines import engine_for
from ..fitting.fit import content_free_log_proba
from ..reading.unshown import read_unshown
from .scores import ReaderReads

__all__ = ["read_reader"]


def read_reader(
    reader: LLMLabelClassifier,
    records: Sequence[Mapping[str, str]],
    y_index: np.ndarray,
    owner: str,
) -> ReaderReads:
    """``reader``'s (fitted without calibration on every text: a plan, no
    reads) reads of every training text (``read_unshown``) and of the
    content-free inputs."""
    plan = reader.plans_[0]
    engine = engine_for(reader.model, reader.base_url, reader.engine_options, owner=owner)
    reads = read_unshown(plan, reader.verbalizers_, records, y_index, np.arange(len(records)), reader.few_shot_rows_,
                         engine, few_shot=int(reader.few_shot), random_state=reader.random_state,
                         batch_size=reader.batch_size, progress=reader.progress, owner=owner)
    return ReaderReads(reads, content_free_log_proba(plan, engine))

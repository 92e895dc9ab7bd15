"""One output as ``fit`` left it, as plain picklable data: its classes, its
calibration, and ``log_proba(reads)`` (as ``_CalibratedClassifier`` is to
``CalibratedClassifierCV``); also the label-mass check."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..exceptions import LowLabelMassWarning, warn_user
from ..reading.plan import ClassReads
from .calibration import Calibration

__all__ = ["FittedOutput", "applies_log_proba", "check_label_mass", "read_of"]


@dataclass(frozen=True)
class FittedOutput:
    """One output's ``classes`` (the column order of its probabilities), its
    ``calibration``, and whether its reads carry a label mass worth checking
    (a joint read's options always sum to 1 under the answer format)."""

    classes: np.ndarray
    calibration: Calibration
    checks_mass: bool = True
    #: One label of a multi-label choice read: its column of the read's
    #: softmax over the labels, as the two classes (does not apply, applies).
    column: int | None = None

    def log_proba(self, reads: ClassReads) -> np.ndarray:
        """Log-probabilities over ``classes``: the softmax of the reads'
        scores (a choice read's label: ``applies_log_proba`` of its
        column), then the calibration."""
        found = reads.log_proba()
        return self.calibration.apply(found if self.column is None else applies_log_proba(found[:, self.column]))


def applies_log_proba(log_p: np.ndarray) -> np.ndarray:
    """(n, 2) log-probabilities [does not apply, applies] of a label whose
    log-probability is ``log_p`` (n,)."""
    log_p = np.minimum(log_p, -1e-12)
    return np.stack([np.log(-np.expm1(log_p)), log_p], axis=1)


def read_of(outputs: Sequence[FittedOutput], reads: Sequence[ClassReads]) -> list[ClassReads]:
    """Per output, the reads it predicts from: its own plan's, or for the
    labels of a multi-label choice read (one plan) the one read they share."""
    if len(reads) == len(outputs):
        return list(reads)
    if len(reads) == 1 and all(o.column is not None for o in outputs):
        return [reads[0]] * len(outputs)
    raise ValueError(f"{len(reads)} reads for {len(outputs)} outputs")


def check_label_mass(
    outputs: Sequence[FittedOutput], reads: Sequence[ClassReads], action: str, threshold: float
) -> None:
    """Warns once (``action="warn"``) or raises ValueError (``"raise"``) when
    some texts put less than ``threshold`` of probability on every label of
    some output, naming the first such text; ``"ignore"`` checks nothing."""
    if action == "ignore":
        return
    low: set[int] = set()
    first: tuple[int, float, int] | None = None
    n = 0
    for j, read in enumerate(reads):  # a choice read's labels share one read: checked once
        output = outputs[j] if len(reads) == len(outputs) else outputs[0]
        if not output.checks_mass or read.class_logprobs.shape[0] == 0:
            continue
        mass = read.label_mass()
        n = mass.size
        below = np.flatnonzero(mass < threshold)
        low.update(below.tolist())
        if below.size and (first is None or below[0] < first[0]):
            first = (int(below[0]), float(mass[below[0]]), j)
    if first is None:
        return
    item, mass_there, output_index = first
    where = f" of output {output_index}" if len(outputs) > 1 else ""
    message = (
        f"{len(low)} of {n} texts have label mass below {threshold} "
        f"(item {item}{where}: {mass_there:.2g}): the model mostly wants to answer something "
        "other than the labels there. Name the labels in the prompt (its {labels} field, as the "
        "default prompt does) and end it with an answer cue such as 'Label:', or write the labels "
        "as words the model would answer; or set low_mass='ignore' (the probabilities stay the "
        "softmax over the labels)"
    )
    if action == "raise":
        raise ValueError(message)
    warn_user(message, LowLabelMassWarning)

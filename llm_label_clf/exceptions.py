"""Exceptions raised by llm_label_clf."""

from __future__ import annotations

from collections.abc import Sequence

from sklearn.exceptions import NotFittedError

__all__ = ["GenerationError", "LowLabelMassWarning", "NotFittedError", "TruncationWarning"]


class GenerationError(RuntimeError):
    """A label read failed in the engine. ``items`` holds the indices (in the
    caller's input order) of the reads that failed, so that nothing is lost
    silently: retry exactly those, or inspect them."""

    def __init__(self, message: str, items: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.items: tuple[int, ...] = tuple(items)


class LowLabelMassWarning(UserWarning):
    """The model put little probability on any label for some texts: its
    answer is probably not among the labels (reword the prompt or labels)."""


class TruncationWarning(UserWarning):
    """Some texts were cut at their end to fit the model's context length."""

"""Exceptions raised by llm_label_clf."""

from __future__ import annotations

from collections.abc import Sequence

from sklearn.exceptions import NotFittedError

__all__ = [
    "GenerationError",
    "LabelWordsWarning",
    "LowLabelMassWarning",
    "ModelNotFoundError",
    "ModelUnavailableError",
    "NotFittedError",
    "TruncationWarning",
]


class GenerationError(RuntimeError):
    """A label read failed in the engine. ``items`` holds the indices (in the
    caller's input order) of the reads that failed, so that nothing is lost
    silently: retry exactly those, or inspect them."""

    def __init__(self, message: str, items: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.items: tuple[int, ...] = tuple(items)


class LabelWordsWarning(UserWarning):
    """The classes are numbers or booleans and no ``labels`` give them words:
    the model is asked to write " 0" and " 1", which say nothing about what
    the classes mean. Map them to words (``labels={0: "negative", 1:
    "positive"}``), or set ``label_words="as_is"`` to keep them."""


class LowLabelMassWarning(UserWarning):
    """The model put little probability on any label for some texts: its
    answer is probably not among the labels (reword the prompt or labels)."""


class ModelNotFoundError(ValueError, FileNotFoundError):
    """``model`` names a local path (a folder, a ``.gguf`` or ``.safetensors``
    file) that does not exist. A ValueError, as for any bad parameter, and a
    FileNotFoundError."""


class ModelUnavailableError(OSError):
    """``model`` is a Hugging Face hub id whose files are not in the local
    cache and cannot be downloaded: the hub is unreachable, or offline mode
    (``HF_HUB_OFFLINE``) forbids it."""


class TruncationWarning(UserWarning):
    """Some texts were cut at their end to fit the model's context length."""

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
    """A label read failed in the engine.

    Raised by prediction methods when an engine process dies mid-read, a
    remote server cannot serve a read after its retries, or a read comes back
    without the label logprobs. Nothing is lost silently: ``items`` lists the
    failed inputs, so a caller can retry exactly those.

    Parameters
    ----------
    message : str
        What failed, naming the first failed item.
    items : sequence of int, default=()
        Indices, in the caller's input order, of the reads that failed.

    Attributes
    ----------
    items : tuple of int
        The failed inputs' indices.

    Examples
    --------
    >>> from llm_label_clf import GenerationError
    >>> error = GenerationError("Generation failed for 2 item(s) [3, 7]", items=[3, 7])
    >>> error.items
    (3, 7)
    >>> isinstance(error, RuntimeError)
    True
    """

    def __init__(self, message: str, items: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.items: tuple[int, ...] = tuple(items)


class LabelWordsWarning(UserWarning):
    """The classes are numbers or booleans and no ``labels`` give them words.

    Warned by ``fit``: the model is asked to write " 0" and " 1", which say
    nothing about what the classes mean. Map them to words (``labels={0:
    "negative", 1: "positive"}``), or set ``label_words="as_is"`` to keep them
    and silence the warning.
    """


class LowLabelMassWarning(UserWarning):
    """The model put little probability on any label for some texts.

    Warned by prediction methods when the labels' total full-vocabulary
    probability for a text is below ``low_mass_threshold``: the model's answer
    is probably not among the labels. Reword the prompt, add
    ``instructions``, or give aliases; ``diagnose(X)`` shows the model's own
    first choice. ``low_mass="raise"`` makes it a ``ValueError`` and
    ``low_mass="ignore"`` silences it.
    """


class ModelNotFoundError(ValueError, FileNotFoundError):
    """``model`` names a local path that does not exist.

    Raised by ``fit`` and ``get_engine`` before vLLM is imported, when
    ``model`` looks like a path (a folder, a ``.gguf`` or ``.safetensors``
    file) and nothing is there. A ``ValueError``, as for any bad parameter,
    and a ``FileNotFoundError``.

    Examples
    --------
    >>> from llm_label_clf import ModelNotFoundError
    >>> issubclass(ModelNotFoundError, ValueError) and issubclass(ModelNotFoundError, FileNotFoundError)
    True
    """


class ModelUnavailableError(OSError):
    """``model`` is a hub id whose files cannot be had.

    Raised by ``fit`` and ``get_engine`` before vLLM is imported, when
    ``model`` is a Hugging Face hub id with no copy in the local cache and the
    hub is unreachable (checked for 2 s), or offline mode (``HF_HUB_OFFLINE``)
    forbids downloading it.
    """


class TruncationWarning(UserWarning):
    """Some texts were cut at their end to fit the model's context length.

    Warned by prediction methods with ``too_long="truncate"`` (the default),
    naming the items; the instructions and the answer cue are never cut.
    ``too_long="raise"`` refuses such texts instead, naming the item; a
    larger ``engine_options={"max_model_len": ...}`` reads more of them.
    """

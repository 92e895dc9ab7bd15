"""Exceptions and warnings raised by llm_label_clf (``__all__``: every one is
public), and ``warn_user``, the one way the package warns: at the user's own
line (``each_warning_once`` says a repeated warning once)."""

from __future__ import annotations

import contextlib
import inspect
import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import joblib
from sklearn.exceptions import NotFittedError

__all__ = [
    "GenerationError",
    "InvalidInputError",
    "LabelWordsWarning",
    "LowLabelMassWarning",
    "ModelNotFoundError",
    "ModelUnavailableError",
    "NotFittedError",
    "ReadStoreError",
    "ReadStoreWarning",
    "RemoteServerError",
    "TiedPredictionWarning",
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


class InvalidInputError(ValueError):
    """An input text cannot be read: missing, not a string, or too long to fit
    the model's context with ``too_long="raise"``.

    A ``ValueError``, as scikit-learn raises for bad input. The message names
    the first offending item and says what to do; ``items`` holds every
    offending item's index in ``X`` as data, so a caller (a Ray or Dask batch,
    a retry loop) can name or drop exactly those rows without reading the
    message.

    Parameters
    ----------
    message : str
        What is wrong, naming the first offending item.
    items : sequence of int, default=()
        Indices, in ``X``'s order, of the offending inputs; kept as the
        tuple ``items``.

    Examples
    --------
    >>> from llm_label_clf import InvalidInputError
    >>> error = InvalidInputError("X item 2 is missing (None): every input must be a string", items=[2])
    >>> error.items, isinstance(error, ValueError)
    ((2,), True)
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

    Warned once per prediction call when, for some texts, the label mass (the
    full-vocabulary probability of the labels' distinct first tokens after the
    prompt) is below ``low_mass_threshold``: the model's answer is probably not
    among the labels. Reword the prompt, add ``instructions``, or give
    aliases; ``diagnose(X)`` shows the model's own first choice.
    ``low_mass="raise"`` makes it a ``ValueError``, ``"ignore"`` silences it.
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


class ReadStoreError(OSError):
    """The read store (``read_store``) cannot be used.

    Raised by ``fit`` (which opens the store before any read) and by the
    prediction methods when the file is not a read store of this library (a
    foreign SQLite database, a text file), is damaged (truncated, a row that
    fails its checksum), was written by a newer version, or cannot be created
    or opened for writing (a read-only folder). The message names the file
    and says what to do: delete it (``llm-label-clf store clear PATH``), or
    give ``read_store`` another path. An ``OSError``. A store that fills the
    disk mid-run does not raise: see ``ReadStoreWarning``.
    """


class ReadStoreWarning(UserWarning):
    """The read store stopped storing reads.

    Warned once per store and process when a write fails mid-run (the disk
    or the file-size limit is full, the file became read-only): the call,
    and the process's later calls, go on reading from the engine with the
    same numbers, storing nothing more; reads already stored are kept and
    still answer. Free space (or give ``read_store`` another path) and start
    a new process to store again.
    """


class RemoteServerError(ConnectionError):
    """No vLLM server could answer.

    Raised by ``get_remote_engine`` and by ``fit`` with ``base_url`` when
    nothing listens at a URL or a server does not report what a vLLM server
    reports; during prediction, a read that used up its retries on every
    server surfaces as a ``GenerationError`` naming the item, with this error
    as its cause. A ``ConnectionError``: check the URL, that the server runs,
    and ``engine_options={"timeout_s": ...}``.
    """


class TiedPredictionWarning(UserWarning):
    """Two or more classes had exactly the same top probability for some texts.

    Warned once per ``predict`` call that meets ties, with their count. A tie
    goes to the tied class with the largest class prior from fit (the class
    frequencies of ``y``; uniform with ``calibration_prior="uniform"``), then
    to the first in ``classes_``. Exact ties come from low-precision reads: in
    bf16 two labels' logprobs can round to the same value, where float32
    tells them apart. Read in float32 (``engine_options={"dtype":
    "float32"}`` or ``LLM_LABEL_CLF_DTYPE=float32``).
    """


class TruncationWarning(UserWarning):
    """Some texts were cut at their end to fit the model's context length.

    Warned by prediction methods with ``too_long="truncate"`` (the default),
    naming the items; the instructions and the answer cue are never cut.
    ``too_long="raise"`` refuses such texts instead, naming the item; a
    larger ``engine_options={"max_model_len": ...}`` reads more of them.
    """


#: Folders whose frames are not the user's: this package, and the libraries
#: that call an estimator on the user's behalf (calibration, search, joblib).
_NOT_USER = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep
    for path in (__file__, inspect.getfile(NotFittedError), joblib.__file__)
)


def warn_user(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` pointed at the first frame outside this package and
    scikit-learn: the user's line, however deep the call (a calibration's or a
    search's fit included). Counted from the live stack, so Python 3.12's
    inlined comprehensions and the caller's depth cannot shift it."""
    frame = inspect.currentframe()
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_NOT_USER):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


@contextlib.contextmanager
def each_warning_once() -> Iterator[None]:
    """Collects the warnings of a block and says each once at its end, where
    it was first said (a meta-estimator's inner fits would each warn the
    same): a ``LabelWordsWarning`` once whatever its message, any other
    warning once per message."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            said: set[Any] = set()
            told = []
            for w in caught:
                key = w.category if issubclass(w.category, LabelWordsWarning) else (w.category, str(w.message))
                if key not in said:
                    said.add(key)
                    told.append(w)
    for w in told:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

"""What a class is written as when ``labels`` gives it no text: the class
itself, with identifiers (``card_arrival``, ``CardArrival``, ``card-arrival``)
written as the words a model writes (``card arrival``) under
``label_words="words"``; and, for classes that are numbers or booleans, the
``LabelWordsWarning`` that says what the model is asked to write and how to
give the classes words."""

from __future__ import annotations

import numbers
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..exceptions import LabelWordsWarning, warn_user

__all__ = [
    "AUTO_LABEL_WORDS",
    "LABEL_WORDS",
    "default_label_texts",
    "is_number_like",
    "label_mapping",
    "label_words_message",
    "warn_label_words",
    "words_of",
]

#: The values of the ``label_words`` parameter.
LABEL_WORDS = ("auto", "words", "as_is")
#: What ``label_words="auto"`` does: "words" (identifiers written as words)
#: or "as_is". The one switch for the default, pending the Banking77
#: measurement of words against identifiers.
AUTO_LABEL_WORDS = "words"

#: Underscores between letters or digits, hyphens between letters: word breaks.
_SEPARATOR = re.compile(r"(?<=[^\W_])_+(?=[^\W_])|(?<=[^\W\d_])-(?=[^\W\d_])")
#: Case changes inside a word: "cardArrival", "ATMSupport", "Top10Items".
_CASE_BREAK = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[0-9])(?=[A-Z][a-z])")
#: A one-letter lowercase start ("iPhone", "eBay", "iOS") is a brand, not mixedCase.
_BRAND = re.compile(r"[a-z][A-Z][A-Za-z0-9]*")
_TITLE_WORD = re.compile(r"[A-Z][a-z]+")


def _split_case(part: str) -> str:
    """One separator-free piece with its case changes as spaces; capitalised
    words that case changes split lowercased, acronyms kept."""
    if _BRAND.fullmatch(part):
        return part
    pieces = _CASE_BREAK.split(part)
    if len(pieces) == 1:
        return part
    return " ".join(p.lower() if _TITLE_WORD.fullmatch(p) else p for p in pieces)


def words_of(identifier: str) -> str:
    """The words of an identifier: snake_case and kebab-case split at their
    separators (the pieces' case kept), CamelCase and mixedCase split at case
    changes (capitalised words lowercased, acronyms kept): ``card_arrival``,
    ``card-arrival``, ``CardArrival`` and ``cardArrival`` give ``card
    arrival``, ``ATMSupport`` gives ``ATM support``. Text with whitespace,
    ordinary words (``positive``, ``Sports``, ``Sci/Tech``), numbers
    (``-1``, ``covid-19``) and one-letter brand starts (``iPhone``) come back
    unchanged; other CamelCase names are split too (``YouTube``: ``you
    tube``), so give such classes ``labels``."""
    if not identifier or any(c.isspace() for c in identifier):
        return identifier
    core = identifier.strip("_") or identifier
    return " ".join(_split_case(part) for part in _SEPARATOR.split(core))


def is_number_like(value: Any) -> bool:
    """Whether a class value is a number or a boolean (Python's or numpy's),
    which a model writes as its digits or ``True``/``False``."""
    return isinstance(value, (numbers.Number, np.bool_)) and not isinstance(value, str)


def default_label_texts(classes: Sequence[Any], label_words: str) -> list[str]:
    """Each class's text when ``labels`` gives none: ``str(class)``, or, under
    ``label_words`` "words" (or "auto" while ``AUTO_LABEL_WORDS`` is "words"),
    ``words_of`` of each string class. A class whose words equal another
    class's text keeps its own spelling, so no two classes read the same."""
    as_is = [str(c) for c in classes]
    if (AUTO_LABEL_WORDS if label_words == "auto" else label_words) != "words":
        return as_is
    words = [words_of(c) if isinstance(c, str) else text for c, text in zip(classes, as_is, strict=True)]
    changed = [(a, w) for a, w in zip(as_is, words, strict=True) if w != a]
    taken = Counter(words) + Counter(a for a, _ in changed)
    return [a if w != a and taken[w] > 1 else w for a, w in zip(as_is, words, strict=True)]


def label_mapping(classes: Sequence[Any], label_words: str) -> dict[Any, str]:
    """``labels`` that give ``classes`` the texts ``fit`` gives them when
    ``labels`` is None (``default_label_texts``): for callers that must name
    the classes before any ``y`` (the command line's zero-shot runs), so that
    they read what the Python API reads."""
    return dict(zip(classes, default_label_texts(classes, label_words), strict=True))


def _example(classes: Sequence[Any]) -> tuple[str, str]:
    """A ``labels`` mapping and list that give ``classes`` words, for the
    warning: "no"/"yes" for booleans (what False/True mean), otherwise
    placeholders (nothing says what a number means)."""
    if len(classes) == 2 and all(isinstance(c, (bool, np.bool_)) for c in classes):
        words = ["no", "yes"]
    else:
        words = [f"<word for {c}>" for c in classes[:2]]
    more = ", ..." if len(classes) > 2 else ""
    pairs = ", ".join(f"{c!r}: {w!r}" for c, w in zip(classes, words, strict=False))
    return f"{{{pairs}{more}}}", f"[{', '.join(repr(w) for w in words)}{more}]"


def label_words_message(owner: str, classes: Sequence[Any], written: Sequence[str], *, options: bool) -> str:
    """The ``LabelWordsWarning`` text: which classes are numbers or booleans,
    what the model is asked to write for them (``written``: verbalizers; with
    ``options``, the texts listed as options), and the ``labels`` that give
    them words."""
    kind = "booleans" if all(isinstance(c, (bool, np.bool_)) for c in classes) else "numbers"
    quoted = [repr(w) for w in written]
    if len(quoted) > 4:
        shown = ", ".join(quoted[:4]) + ", ..."
    else:
        shown = " and ".join([", ".join(quoted[:-1]), quoted[-1]]) if len(quoted) > 1 else "".join(quoted)
    asked = f"the prompt lists them as the options {shown}" if options else f"the model is asked to write {shown}"
    listed = list(classes)
    mapping, names = _example(listed)
    return (
        f"{owner}: the classes {listed[:6]!r}{'...' if len(listed) > 6 else ''} are {kind} and labels gives "
        f"them no words, so {asked}: nothing says what they mean. Map the classes to words with "
        f"labels={mapping} or labels={names} (in classes_ order), or set label_words='as_is' to keep "
        "them (and silence this warning)"
    )


def warn_label_words(
    owner: str, classes: Sequence[Any], written: Sequence[str], label_words: str, *, options: bool = False
) -> None:
    """Warns (``LabelWordsWarning``) when ``classes`` written with their
    default texts are numbers or booleans, unless ``label_words`` is "as_is"."""
    if label_words == "as_is" or not classes or not all(is_number_like(c) for c in classes):
        return
    message = label_words_message(owner, classes, written, options=options)
    warn_user(message, LabelWordsWarning)

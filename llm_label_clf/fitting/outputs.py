"""Per-output settings: each output's classes and the label strings each
class is written as (checked before any engine is asked for), and, for
several outputs per text, which prompt and labels each output (a column of
``y``, or one label of a multi-label target) is read with. Each output is
then an ordinary single-output read; outputs whose prompts start alike share
that prefix in vLLM's cache."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..reading.prompts import DEFAULT_PROMPT, PromptTemplate
from .label_words import default_label_texts
from .targets import Target, as_classes, unique_classes

__all__ = [
    "LABEL_FIELD",
    "MULTILABEL_PROMPT",
    "YES_NO",
    "OutputClasses",
    "class_labels",
    "is_label_list",
    "multilabel_texts",
    "is_per_output_list",
    "one_class_error",
    "output_classes",
    "output_labels",
    "output_prompts",
]

#: The multi-label prompt field that receives one label's text.
LABEL_FIELD = "label"
#: The default yes/no question asked once per label of a multi-label target.
MULTILABEL_PROMPT = "Text: {text}\nQuestion: is this text about {label}?\nAnswer:"
#: What a multi-label read answers, per indicator value.
YES_NO = {0: "no", 1: "yes"}


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def fill_field(template: str, name: str, value: str) -> str:
    """``template`` with every ``{name}`` replaced by ``value`` verbatim (its
    braces escaped), the other fields left in place."""
    out = []
    for literal, field in PromptTemplate.parse(template).pieces:
        out.append(_escape(literal))
        if field is not None:
            out.append(_escape(value) if field == name else "{" + field + "}")
    return "".join(out)


def is_label_list(labels: Any) -> bool:
    """Whether ``labels`` is a list (or tuple), not a string or mapping."""
    return isinstance(labels, Sequence) and not isinstance(labels, str)


def is_per_output_list(labels: Any) -> bool:
    """Whether ``labels`` is a list of mappings (or None) only: one entry per
    output, whatever ``y`` is. A list with strings or lists of strings names
    one output's classes, or, for a 2-D ``y``, each output's."""
    return is_label_list(labels) and bool(labels) and all(v is None or isinstance(v, Mapping) for v in labels)


def _first(value: str | Sequence[str]) -> str:
    return value if isinstance(value, str) else value[0]


def _label_text(labels: Any, name: Any, j: int, label_words: str) -> str:
    if isinstance(labels, Mapping) and name in labels:
        return _first(labels[name])
    if is_label_list(labels) and not is_per_output_list(labels):
        return _first(labels[j])
    if labels is not None:
        raise ValueError(f"labels has no text for label {name!r} (output {j}) of the multi-label y")
    return default_label_texts([name], label_words)[0]


def multilabel_texts(labels: Any, target: Target, label_words: str = "auto") -> list[str]:
    """Each label's text in a multi-label read, in column order: from
    ``labels`` (a mapping, or a list in column order), else the label itself
    as ``label_words`` says; checked as ``output_prompts`` checks them."""
    k = len(target.columns)
    if target.names is None and labels is None:
        raise ValueError(
            "a multi-label indicator y without column names needs labels={column: text} "
            "or labels=[text, ...] (in column order) to name each label in the prompt (or pass y as a DataFrame)"
        )
    if is_label_list(labels) and not is_per_output_list(labels) and len(labels) != k:
        raise ValueError(f"labels is a list of {len(labels)} names but the multi-label y has {k} labels")
    names = target.names if target.names is not None else list(range(k))
    return [_label_text(labels, name, j, label_words) for j, name in enumerate(names)]


def output_prompts(
    prompt: str | Sequence[str] | None, labels: Any, target: Target, label_words: str = "auto"
) -> list[str]:
    """One template per output. A list gives each output its own; one string
    serves every output; None is "Text: {text}\\n<column name>:" for a
    DataFrame ``y``, else the default prompt. Multi-label: the template's
    ``{label}`` is filled with each label's text (from ``labels``, a mapping
    or a list in column order, else the label itself as ``label_words`` says)."""
    k = len(target.columns)
    if target.kind == "multilabel":
        if prompt is not None and not isinstance(prompt, str):
            raise ValueError("a multi-label y takes one prompt with a {label} field, not a list")
        template = MULTILABEL_PROMPT if prompt is None else prompt
        if LABEL_FIELD not in PromptTemplate.parse(template).fields:
            raise ValueError(
                f"prompt={template!r} has no {{{LABEL_FIELD}}} field: multilabel_read='yes_no' asks one "
                "yes/no question per label, e.g. 'Text: {text}\\nIs this about {label}?\\nAnswer:' "
                "(or leave multilabel_read='auto': a prompt without {label} reads every label at once)"
            )
        return [fill_field(template, LABEL_FIELD, text) for text in multilabel_texts(labels, target, label_words)]
    if prompt is None:
        if target.names is not None:
            return [f"Text: {{text}}\n{_escape(str(name))}:" for name in target.names]
        return [DEFAULT_PROMPT] * k
    if isinstance(prompt, str):
        return [prompt] * k
    if len(prompt) != k:
        raise ValueError(f"prompt is a list of {len(prompt)} templates but y has {k} outputs: give one per output")
    return list(prompt)


def output_labels(labels: Any, target: Target, j: int) -> Mapping[Any, Any] | Sequence[Any] | None:
    """The ``labels`` of output ``j``: from a list with one entry per output
    (a mapping, a list of names in that output's ``classes_`` order, or
    None), the part of one shared mapping that covers this output's classes,
    or the yes/no answers of a multi-label read."""
    if target.kind == "multilabel":
        return YES_NO
    if labels is None:
        return None
    if isinstance(labels, Mapping):
        present = set(target.columns[j].tolist())
        return {c: v for c, v in labels.items() if c in present} or None
    k = len(target.columns)
    if any(isinstance(v, str) for v in labels):
        raise ValueError(
            f"labels is a list of {len(labels)} names but y has {k} outputs: give one entry per output "
            "(a mapping class -> label, or a list of names in that output's classes_ order)"
        )
    if len(labels) != k:
        raise ValueError(
            f"labels is a list of {len(labels)} entries (mappings or lists of names) but y has {k} outputs: "
            "give one per output"
        )
    return labels[j]


def class_labels(
    labels: Mapping[Any, Any] | Sequence[Any] | None, classes: list[Any], owner: str, label_words: str = "auto"
) -> list[list[str]]:
    """Each class's labels (its aliases), in ``classes`` order: from ``labels``
    (a mapping class -> label or aliases, or a list of them in ``classes``
    order), else the class itself as ``label_words`` says (identifiers as
    words). Refuses a mapping that names a class not in ``classes`` or leaves
    one out, and a list of another length; ``owner`` starts the error message."""
    if labels is None:
        return [[text] for text in default_label_texts(classes, label_words)]
    if not isinstance(labels, Mapping):
        if len(labels) != len(classes):
            raise ValueError(
                f"{owner}: labels is a list of {len(labels)} names but y has {len(classes)} classes "
                f"{classes!r}: give one name per class, in classes_ order (sorted)"
            )
        return [[entry] if isinstance(entry, str) else list(entry) for entry in labels]
    known = set(classes)
    unknown = [c for c in labels if c not in known]
    if unknown:
        raise ValueError(f"{owner}: labels has classes {unknown!r} that are not in y (classes in y: {classes!r})")
    missing = [c for c in classes if c not in labels]
    if missing:
        raise ValueError(f"{owner}: labels has no label for classes {missing!r} of y")
    return [[labels[c]] if isinstance(labels[c], str) else list(labels[c]) for c in classes]


@dataclass(frozen=True)
class OutputClasses:
    """One output's classes (``classes_``), each training text's index into
    them (None without ``y``), each class's labels (aliases), and the
    ``labels`` they came from (None: the classes' own texts, as
    ``label_words`` writes them)."""

    classes: np.ndarray
    y_index: np.ndarray | None
    labels: list[list[str]]
    given: Mapping[Any, Any] | Sequence[Any] | None


def one_class_error(owner: str, cls: Any) -> ValueError:
    """scikit-learn's refusal of a ``y`` with one class (``LogisticRegression``'s words)."""
    return ValueError(
        f"{owner} needs samples of at least 2 classes in the data, but the data contains only one class: {cls!r}"
    )


def _zero_shot_classes(labels: Any, owner: str) -> np.ndarray:
    """Without ``y``, the classes ``labels`` names: a mapping's keys, or a
    list's own items, sorted as ``np.unique`` sorts them."""
    names = list(labels)
    if is_label_list(labels):
        if not all(isinstance(v, str) for v in names):
            raise ValueError(
                f"{owner}: fit(X) without y takes the classes from labels: a list of class names (strings), "
                "or a mapping class -> label or aliases; a list of alias lists needs y to know the classes"
            )
        repeated = sorted({v for v in names if names.count(v) > 1})
        if repeated:
            raise ValueError(f"{owner}: labels names the classes {repeated!r} more than once")
    classes, _ = unique_classes(as_classes(names), "labels: ")
    if len(classes) < 2:
        raise ValueError(f"{owner} needs at least 2 classes, but labels names only one class: {names[0]!r}")
    return classes


def output_classes(est: Any, y: np.ndarray | None, *, classes: np.ndarray | None = None) -> OutputClasses:
    """One output's classes and labels, from ``y`` (or the given ``classes``,
    for a multi-label read's 0/1), else from ``est.labels``; checked without
    any engine: one prompt and one ``labels`` for one output, at least 2
    classes, a ``labels`` that covers them. Raises ValueError naming what is wrong."""
    owner = type(est).__name__
    if not (est.prompt is None or isinstance(est.prompt, str)):
        raise ValueError(
            f"{owner}: prompt is a list of {len(est.prompt)} templates but y has "
            "one output; give one template (a list is for a 2-D y, one per column)"
        )
    if is_per_output_list(est.labels):
        raise ValueError(
            f"{owner}: labels is a list of {len(est.labels)} mappings but y has one "
            "output; give one mapping class -> label (a list is for a 2-D y, one per column)"
        )
    given = est.labels
    if classes is not None:
        y_index = np.searchsorted(classes, y)
    elif y is not None:
        classes, y_index = unique_classes(y)
        if len(classes) < 2:
            raise one_class_error(owner, classes.tolist()[0])
    else:
        classes, y_index = _zero_shot_classes(est.labels, owner), None
        given = None if is_label_list(est.labels) else est.labels  # a list's items are the classes themselves
    labels = class_labels(given, classes.tolist(), owner, est.label_words)
    return OutputClasses(classes, y_index, labels, given)

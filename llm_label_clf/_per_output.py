"""Per-output settings: which label strings each class is written as, and,
for several outputs per text, which prompt and labels each output (a column
of ``y``, or one label of a multi-label target) is read with. Each output is
then an ordinary single-output read; outputs whose prompts start alike share
that prefix in vLLM's cache."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._targets import Target
from .reading.prompts import DEFAULT_PROMPT, PromptTemplate

__all__ = ["LABEL_FIELD", "MULTILABEL_PROMPT", "class_labels", "output_labels", "output_prompts"]

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


def _label_text(labels: Any, name: Any, j: int) -> str:
    if isinstance(labels, Mapping) and name in labels:
        value = labels[name]
        return value if isinstance(value, str) else value[0]
    if labels is not None:
        raise ValueError(f"labels has no text for label {name!r} (output {j}) of the multi-label y")
    return str(name)


def output_prompts(prompt: str | Sequence[str] | None, labels: Any, target: Target) -> list[str]:
    """One template per output. A list gives each output its own; one string
    serves every output; None is "Text: {text}\\n<column name>:" for a
    DataFrame ``y``, else the default prompt. Multi-label: the template's
    ``{label}`` is filled with each label's text."""
    k = len(target.columns)
    if target.kind == "multilabel":
        if prompt is not None and not isinstance(prompt, str):
            raise ValueError("a multi-label y takes one prompt with a {label} field, not a list")
        template = MULTILABEL_PROMPT if prompt is None else prompt
        if LABEL_FIELD not in PromptTemplate.parse(template).fields:
            raise ValueError(
                f"prompt={template!r} has no {{{LABEL_FIELD}}} field: a multi-label y asks one yes/no "
                "question per label, e.g. 'Text: {text}\\nIs this about {label}?\\nAnswer:'"
            )
        if target.names is None and labels is None:
            raise ValueError(
                "a multi-label indicator y without column names needs labels={column: text} "
                "to name each label in the prompt (or pass y as a DataFrame)"
            )
        names = target.names if target.names is not None else list(range(k))
        return [fill_field(template, LABEL_FIELD, _label_text(labels, name, j)) for j, name in enumerate(names)]
    if prompt is None:
        if target.names is not None:
            return [f"Text: {{text}}\n{_escape(str(name))}:" for name in target.names]
        return [DEFAULT_PROMPT] * k
    if isinstance(prompt, str):
        return [prompt] * k
    if len(prompt) != k:
        raise ValueError(f"prompt is a list of {len(prompt)} templates but y has {k} outputs: give one per output")
    return list(prompt)


def output_labels(labels: Any, target: Target, j: int) -> Mapping[Any, Any] | None:
    """The ``labels`` mapping of output ``j``: from a list of mappings, the
    part of one shared mapping that covers this output's classes, or the
    yes/no answers of a multi-label read."""
    if target.kind == "multilabel":
        return YES_NO
    if labels is None:
        return None
    if isinstance(labels, Mapping):
        present = set(target.columns[j].tolist())
        return {c: v for c, v in labels.items() if c in present} or None
    if len(labels) != len(target.columns):
        raise ValueError(
            f"labels is a list of {len(labels)} mappings but y has {len(target.columns)} outputs: give one per output"
        )
    return labels[j]


def class_labels(labels: Mapping[Any, Any] | None, classes: list[Any], owner: str) -> list[list[str]]:
    """Each class's labels (its aliases), in ``classes`` order: from ``labels``,
    else the class itself. Refuses a mapping that names a class not in ``classes``
    or leaves one out; ``owner`` starts the error message."""
    if labels is None:
        return [[str(c)] for c in classes]
    known = set(classes)
    unknown = [c for c in labels if c not in known]
    if unknown:
        raise ValueError(f"{owner}: labels has classes {unknown!r} that are not in y (classes in y: {classes!r})")
    missing = [c for c in classes if c not in labels]
    if missing:
        raise ValueError(f"{owner}: labels has no label for classes {missing!r} of y")
    return [[labels[c]] if isinstance(labels[c], str) else list(labels[c]) for c in classes]

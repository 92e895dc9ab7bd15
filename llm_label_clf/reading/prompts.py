"""Prompt templates: ``{field}`` placeholders filled by plain substitution, so
braces inside users' texts never break rendering and no format field can reach
an attribute or an index (``{text.__class__}``, ``{text[0]}`` are rejected).
Also what fills the two fields the package owns: ``{labels}`` (the labels
listed) and, in options mode, ``{options}`` (the classes as lettered options,
whose short codes the model answers with)."""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_PROMPT",
    "LABELS_FIELD",
    "OPTIONS_FIELD",
    "PromptTemplate",
    "join_labels",
    "option_codes",
    "options_block",
    "render_chat",
]

#: The default completion prompt: an instruction line naming the labels, the
#: text, then a plain answer cue (chosen: docs/architecture.md).
DEFAULT_PROMPT = "Classify the text as {labels}.\nText: {text}\nLabel:"
#: A field filled with the class verbalizers, e.g. "positive or negative".
LABELS_FIELD = "labels"
#: The prompt field that receives the options list (options mode); without it
#: the list goes before the whole prompt.
OPTIONS_FIELD = "options"


@dataclass(frozen=True)
class PromptTemplate:
    """A parsed template: literal pieces and the field names between them."""

    template: str
    pieces: tuple[tuple[str, str | None], ...]

    @classmethod
    def parse(cls, template: str) -> PromptTemplate:
        """Parses ``template``; raises ValueError for a malformed template or a
        field that is not a plain name (no attributes, indexes, conversions or
        format specs)."""
        if not isinstance(template, str):
            raise ValueError(f"prompt must be a str template, got {type(template).__name__}")
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise ValueError(
                f"prompt {template!r} is not a valid template ({exc}); write literal braces as {{{{ and }}}}"
            ) from None
        pieces = []
        for literal, field, spec, conversion in parsed:
            if field is not None and (not field.isidentifier() or spec or conversion):
                shown = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
                raise ValueError(
                    f"prompt field {shown} is not allowed: fields are plain names such as "
                    "{text} or a DataFrame column name, without attributes, indexes or formats"
                )
            if field == "":
                raise ValueError("prompt has an empty field {}: name it, e.g. {text}")
            pieces.append((literal, field))
        return cls(template, tuple(pieces))

    @property
    def fields(self) -> list[str]:
        """The field names in order of first appearance."""
        return list(dict.fromkeys(f for _, f in self.pieces if f is not None))

    @property
    def input_fields(self) -> list[str]:
        """The fields ``X`` fills: every field but the two the package fills
        (``{labels}``, ``{options}``)."""
        return [f for f in self.fields if f not in (LABELS_FIELD, OPTIONS_FIELD)]

    @property
    def suffix(self) -> str:
        """The literal text after the last field (the answer cue)."""
        tail = []
        for literal, field in reversed(self.pieces):
            if field is not None:
                break
            tail.append(literal)
        return "".join(reversed(tail))

    def render(self, values: Mapping[str, str]) -> str:
        """Substitutes each field's value verbatim."""
        return "".join(literal + ("" if field is None else values[field]) for literal, field in self.pieces)


def render_chat(tokenizer: Any, user_message: str, system: str | None) -> str:
    """The chat template's rendering of one user turn (after an optional system
    turn), ending with the generation prompt, where the reply's first token is read."""
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": user_message})
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def join_labels(labels: Sequence[str]) -> str:
    """'a or b', 'a, b or c': how the labels are listed in the prompt."""
    labels = list(labels)
    if len(labels) <= 2:
        return " or ".join(labels)
    return ", ".join(labels[:-1]) + " or " + labels[-1]


def option_codes(n: int) -> list[str]:
    """"A".."Z" for up to 26 classes, else "01".."n" zero-padded to one width:
    codes of equal length, so that no code is a prefix of another."""
    if n <= len(string.ascii_uppercase):
        return list(string.ascii_uppercase[:n])
    width = len(str(n))
    return [str(i).zfill(width) for i in range(1, n + 1)]


def options_block(codes: Sequence[str], labels: Sequence[str]) -> str:
    """One line per option: "A. World"."""
    return "\n".join(f"{code}. {label}" for code, label in zip(codes, labels, strict=True))

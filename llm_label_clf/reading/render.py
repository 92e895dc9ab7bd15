"""Records -> prompt token ids: a ``PromptLayout`` is everything fit decided
about how a text is laid out (template and the fields the package fills, a
block before the text such as the options list, the few-shot examples, a block
after it, instructions or the chat template), and turns records into token ids,
cutting too-long texts at their end or refusing them with an error naming the
item. Plain data: it holds no tokenizer; the engine's is passed in."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import InvalidInputError, TruncationWarning, warn_user
from .prompts import PromptTemplate, render_chat

__all__ = ["Encoded", "PromptLayout", "check_fields", "warn_truncated"]


@dataclass(frozen=True)
class Encoded:
    """Prompt token ids of some records, and which of them (as indices into
    the caller's ``X``) were cut to fit."""

    ids: list[list[int]]
    truncated: list[int]


@dataclass(frozen=True)
class PromptLayout:
    """How one text becomes a prompt: ``head + few_shot_prefix + body + tail``,
    where ``body`` is ``template`` filled from the record and ``fields`` (what
    the package fills: ``{labels}``, ``{options}``); then after ``instructions``,
    or as the user turn of the chat template (``chat``) after a system turn."""

    template: PromptTemplate
    chat: bool
    instructions: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    head: str = ""
    few_shot_prefix: str = ""
    tail: str = ""
    too_long: str = "truncate"

    @property
    def add_special_tokens(self) -> bool:
        """The chat template writes its own special tokens."""
        return not self.chat

    def body(self, record: Mapping[str, str]) -> str:
        """One text in the template's format, up to its answer cue (also how
        few-shot examples are written)."""
        return self.template.render({**self.fields, **record})

    def text(self, record: Mapping[str, str], tokenizer: Any) -> str:
        """The whole prompt of ``record`` as text."""
        body = self.head + self.few_shot_prefix + self.body(record) + self.tail
        if self.chat:
            return render_chat(tokenizer, body, self.instructions)
        return f"{self.instructions}\n{body}" if self.instructions else body

    def encode(
        self, records: Sequence[Mapping[str, str]], tokenizer: Any, limit: int, *, offset: int = 0
    ) -> Encoded:
        """Each record's prompt as token ids, at most ``limit`` of them: longer
        ones cut (``too_long="truncate"``) or refused. ``offset`` is the index
        of ``records[0]`` in the caller's ``X``, so errors name ``X``'s items."""
        if records:  # a template field that neither ``X`` nor the package fills raises, naming it
            check_fields(self.template, records[0], self.fields)
        texts = [self.text(r, tokenizer) for r in records]
        ids = tokenizer(texts, add_special_tokens=self.add_special_tokens)["input_ids"] if texts else []
        cut = []
        for i, row in enumerate(ids):
            if len(row) <= limit:
                continue
            if self.too_long == "raise":
                raise InvalidInputError(
                    f"X item {offset + i} is {len(row)} tokens with the prompt; the model reads at most "
                    f"{limit}: shorten the text, raise engine_options['max_model_len'], or set "
                    "too_long='truncate'",
                    [offset + i],
                )
            ids[i] = self._truncate(offset + i, records[i], tokenizer, limit)
            cut.append(offset + i)
        return Encoded(ids, cut)

    def _truncate(self, i: int, record: Mapping[str, str], tokenizer: Any, limit: int) -> list[int]:
        """Cuts the end of the record's longest field until the prompt fits
        ``limit`` tokens; the instructions and the answer cue are never cut."""
        fields = [f for f in self.template.fields if f in record]
        name = max(fields, key=lambda f: len(record[f]))
        value = record[name]
        for _ in range(8):  # re-tokenizing at the cut can add a token or two; converge
            row = tokenizer.encode(self.text({**record, name: value}, tokenizer),
                                   add_special_tokens=self.add_special_tokens)
            if len(row) <= limit:
                return row
            value_ids = tokenizer.encode(value, add_special_tokens=False)
            if not value_ids:
                break
            value = tokenizer.decode(value_ids[: max(0, len(value_ids) - (len(row) - limit) - 2)])
        raise InvalidInputError(
            f"X item {i} cannot be truncated to fit: the prompt around field {{{name}}} is already "
            f"too long for the model's {limit} tokens; shorten the instructions or the other fields",
            [i],
        )


def check_fields(
    template: PromptTemplate, record: Mapping[str, str], filled: Collection[str] = (), *, owner: str = ""
) -> None:
    """Raises ValueError naming the fields of ``template`` that neither
    ``record`` (one row of ``X``) nor the package (``filled``) fills, or
    naming ``{text}`` when no field is filled from ``X`` (every text would
    get the same prompt, hence the same probabilities); ``owner`` starts the
    message."""
    prefix = f"{owner}: " if owner else ""
    missing = [f for f in template.fields if f not in filled and f not in record]
    if missing:
        raise ValueError(
            f"{prefix}prompt field(s) {missing} have no input: X provides {sorted(record)} "
            "(a list of texts fills {text}; a DataFrame fills its column names)"
        )
    if all(f in filled for f in template.fields):
        raise ValueError(
            f"{prefix}prompt {template.template!r} has no {{text}} field (nor any other filled from X): "
            "every text would get the same prompt and the same probabilities. Put {text} where the text "
            "goes, e.g. 'Text: {text}\\nSentiment:'"
        )


def warn_truncated(truncated: Sequence[int], limit: int) -> None:
    """One warning naming every cut item of a call (the first ten), at the
    user's line (``warn_user``)."""
    if not truncated:
        return
    shown = list(truncated) if len(truncated) <= 10 else [*truncated[:10], "..."]
    warn_user(
        f"{len(truncated)} text(s) were longer than the model reads ({limit} tokens "
        f"with the prompt) and were cut at the end: items {shown}. Set too_long='raise' to refuse them",
        TruncationWarning,
    )

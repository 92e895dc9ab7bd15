"""Prompt rendering for ``LLMLabelClassifier``: each text's full prompt (the
options list, the few-shot examples, the text in the template's format, the
instructions or chat template around it), tokenized, with too-long texts cut
at their end or refused. Kept apart from the estimator so that the data path
prompt -> token ids reads in one place."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from .engine import Engine
from .exceptions import TruncationWarning
from .options import OPTIONS_FIELD, options_block, with_options
from .prompts import LABELS_FIELD, PromptTemplate, join_labels, render_chat

__all__ = ["PromptingMixin"]


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


class PromptingMixin:
    """Rendering methods of ``LLMLabelClassifier``; they read its parameters
    (``labels``, ``instructions``, ``too_long``, ...) and fitted state."""

    labels: Any
    label_mode: str
    chat: Any
    instructions: str | None
    too_long: str

    def _class_labels(self) -> list[list[str]]:
        return class_labels(self.labels, self.classes_.tolist(), type(self).__name__)

    def _uses_chat(self, engine: Engine) -> bool:
        """Whether prompts go through the chat template: ``chat``, where "auto"
        means whenever the model has one."""
        return bool(engine.tokenizer.chat_template) if self.chat == "auto" else bool(self.chat)

    def _check_fields(self, template: PromptTemplate, record: Mapping[str, str]) -> None:
        if OPTIONS_FIELD in template.fields and self.label_mode != "options" and OPTIONS_FIELD not in record:
            raise ValueError(
                f"{type(self).__name__}: prompt field {{{OPTIONS_FIELD}}} is filled only with "
                f"label_mode='options' (label_mode={self.label_mode!r}); use {{{LABELS_FIELD}}} to list the labels"
            )
        missing = [f for f in template.fields if f not in (LABELS_FIELD, OPTIONS_FIELD) and f not in record]
        if missing:
            raise ValueError(
                f"{type(self).__name__}: prompt field(s) {missing} have no input: X provides "
                f"{sorted(record)} (a list of texts fills {{text}}; a DataFrame fills its column names)"
            )

    def _label_fields(self) -> dict[str, str]:
        """What ``{labels}`` renders to (each class's first label, listed) and, in
        options mode, ``{options}`` (one line per option)."""
        texts = [aliases[0].strip() for aliases in self._class_labels()]
        fields = {LABELS_FIELD: join_labels(texts)}
        if self.options_ is not None:
            fields[OPTIONS_FIELD] = options_block(self.options_, texts)
        return fields

    def _render_body(self, template: PromptTemplate, record: Mapping[str, str], label_fields: Mapping[str, str]) -> str:
        """One text in the prompt's format, up to its answer cue."""
        return template.render({**label_fields, **record})

    def _render(
        self, template: PromptTemplate, record: Mapping[str, str], engine: Engine, label_fields: Mapping[str, str]
    ) -> str:
        """The whole prompt: options (unless placed by ``{options}``), few-shot
        examples, the text; after the instructions or inside the chat template."""
        body = self.__dict__.get("few_shot_prefix_", "") + self._render_body(template, record, label_fields)
        if OPTIONS_FIELD in label_fields and OPTIONS_FIELD not in template.fields:
            body = with_options(body, label_fields[OPTIONS_FIELD])
        if self.chat_:
            return render_chat(engine.tokenizer, body, self.instructions)
        return f"{self.instructions}\n{body}" if self.instructions else body

    def _prompt_token_ids(
        self,
        records: Sequence[Mapping[str, str]],
        engine: Engine,
        *,
        offset: int = 0,
        truncated: list[int] | None = None,
    ) -> list[list[int]]:
        """Each record's whole prompt as token ids, too-long texts cut or refused.
        ``offset`` is the index of ``records[0]`` in the caller's ``X`` (errors
        name ``X``'s items). The cut items' indices are added to ``truncated``
        when given (the caller warns once, ``_warn_truncated``); else warned here."""
        template = PromptTemplate.parse(self.prompt_)
        if records:
            self._check_fields(template, records[0])
        label_fields = self._label_fields()
        texts = [self._render(template, r, engine, label_fields) for r in records]
        ids = engine.tokenizer(texts, add_special_tokens=not self.chat_)["input_ids"] if texts else []
        limit = self._prompt_limit(engine)
        cut = []
        for i, row in enumerate(ids):
            if len(row) <= limit:
                continue
            if self.too_long == "raise":
                raise ValueError(
                    f"X item {offset + i} is {len(row)} tokens with the prompt; the model reads at most "
                    f"{limit}: shorten the text, raise engine_options['max_model_len'], or set "
                    "too_long='truncate'"
                )
            ids[i] = self._truncate(offset + i, template, records[i], engine, label_fields, limit)
            cut.append(offset + i)
        if truncated is None:
            self._warn_truncated(cut, engine)
        else:
            truncated.extend(cut)
        return ids

    def _prompt_limit(self, engine: Engine) -> int:
        """The most prompt tokens that leave room for what the reads add."""
        return engine.max_model_len - self._reserved_tokens()  # type: ignore[attr-defined]

    def _warn_truncated(self, truncated: Sequence[int], engine: Engine) -> None:
        if not truncated:
            return
        shown = list(truncated) if len(truncated) <= 10 else [*truncated[:10], "..."]
        warnings.warn(
            f"{len(truncated)} text(s) were longer than the model reads ({self._prompt_limit(engine)} tokens "
            f"with the prompt) and were cut at the end: items {shown}. Set too_long='raise' to refuse them",
            TruncationWarning,
            stacklevel=5,
        )

    def _truncate(
        self,
        i: int,
        template: PromptTemplate,
        record: Mapping[str, str],
        engine: Engine,
        label_fields: Mapping[str, str],
        limit: int,
    ) -> list[int]:
        """Cuts the end of the record's longest field until the rendered prompt fits
        ``limit`` tokens; the instructions and the answer cue are never cut."""
        tokenizer = engine.tokenizer
        fields = [f for f in template.fields if f in record]
        field = max(fields, key=lambda f: len(record[f]))
        value = record[field]
        for _ in range(8):  # re-tokenizing at the cut can add a token or two; converge
            rendered = self._render(template, {**record, field: value}, engine, label_fields)
            row = tokenizer.encode(rendered, add_special_tokens=not self.chat_)
            if len(row) <= limit:
                return row
            value_ids = tokenizer.encode(value, add_special_tokens=False)
            if not value_ids:
                break
            value = tokenizer.decode(value_ids[: max(0, len(value_ids) - (len(row) - limit) - 2)])
        raise ValueError(
            f"X item {i} cannot be truncated to fit: the prompt around field {{{field}}} is already "
            f"too long for the model's {limit} tokens; shorten the instructions or the other fields"
        )


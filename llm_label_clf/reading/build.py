"""Building one output's ``ReadingPlan`` at fit: the prompt layout (template,
chat or instructions, the options list, the few-shot block), each class's
label tokens found after the rendered prompt, the label mode, the trie of
reads and the length norms. Everything here needs only the engine's tokenizer
and context length; nothing is read from the model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sklearn.utils import check_random_state

from .constrained import check_constrained_labels
from .label_tokens import distinct_first_tokens, in_context_verbalizer, label_token_sequences
from .label_trie import LabelTrie
from .plan import ReadingPlan
from .prompts import LABELS_FIELD, OPTIONS_FIELD, PromptTemplate, join_labels, option_codes, options_block
from .render import PromptLayout, check_fields

__all__ = [
    "LABEL_CHECK_ROWS",
    "MIN_QUERY_TOKENS",
    "FewShotTooLongError",
    "OutputReading",
    "ReadingSettings",
    "build_reading",
    "plan_showing",
]

#: How many training rows are rendered to check that labels tokenize the same after each.
LABEL_CHECK_ROWS = 4
#: Tokens a few-shot block must leave free for the text and the answer cue.
MIN_QUERY_TOKENS = 64
#: Between two few-shot examples, and between the last example and the text.
EXAMPLE_SEPARATOR = "\n\n"


class FewShotTooLongError(ValueError):
    """A few-shot block that leaves fewer than ``MIN_QUERY_TOKENS`` of the
    model's context for the text: a ``ValueError`` naming ``few_shot``, the
    block's tokens and the context, kept as ``few_shot``, ``n_tokens`` and
    ``max_model_len``; it pickles (a joblib worker's error comes back)."""

    def __init__(self, owner: str, few_shot: int, n_tokens: int, max_model_len: int) -> None:
        super().__init__(
            f"{owner}: few_shot={few_shot} examples per class take {n_tokens} tokens, "
            f"leaving less than {MIN_QUERY_TOKENS} of the model's {max_model_len} for the text; "
            "lower few_shot or raise engine_options['max_model_len']"
        )
        self.owner, self.few_shot, self.n_tokens, self.max_model_len = owner, few_shot, n_tokens, max_model_len

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.owner, self.few_shot, self.n_tokens, self.max_model_len)


@dataclass(frozen=True)
class ReadingSettings:
    """The estimator parameters that shape one output's reading."""

    template: str
    chat: bool
    instructions: str | None
    label_mode: str
    length_norm: str | None
    few_shot: int
    random_state: Any
    too_long: str
    owner: str = "LLMLabelClassifier"
    prune_margin: float | None = None


@dataclass(frozen=True)
class OutputReading:
    """What fit decided for one output: the plan, and the fitted attributes
    the estimator exposes about it."""

    plan: ReadingPlan
    verbalizers: list[list[str]]
    label_sequences: list[list[tuple[int, ...]]]
    label_token_ids: list[list[int]]
    label_mode: str
    options: list[str] | None
    few_shot_rows: list[int]
    few_shot_prefix: str


def _check_template(settings: ReadingSettings, template: PromptTemplate, record: Mapping[str, str]) -> None:
    if OPTIONS_FIELD in template.fields and settings.label_mode != "options" and OPTIONS_FIELD not in record:
        raise ValueError(
            f"{settings.owner}: prompt field {{{OPTIONS_FIELD}}} is filled only with "
            f"label_mode='options' (label_mode={settings.label_mode!r}); use {{{LABELS_FIELD}}} to list the labels"
        )
    check_fields(template, record, (LABELS_FIELD, OPTIONS_FIELD), owner=settings.owner)
    if not settings.chat and not template.suffix.strip():
        raise ValueError(
            f"{settings.owner}: prompt={template.template!r} ends with a field; add an "
            "answer cue after it (e.g. '\\nAnswer:') so the label is read in a fixed context"
        )


def _select_examples(y_index: np.ndarray, n_classes: int, k: int, rng: np.random.RandomState) -> list[int]:
    """Row indices of up to ``k`` examples per class (all of a class's rows when
    it has fewer), interleaved class after class in a seeded random order so
    that no class sits always last (small models echo the last answer)."""
    per_class = [rng.permutation(np.flatnonzero(y_index == c))[:k].tolist() for c in range(n_classes)]
    order: list[int] = []
    for rank in range(k):
        round_ = [rows[rank] for rows in per_class if rank < len(rows)]
        order.extend(rng.permutation(round_).tolist())
    return order


def _few_shot(
    settings: ReadingSettings, layout: PromptLayout, records: Sequence[Mapping[str, str]], y_index: np.ndarray | None,
    verbalizers: list[list[str]], tokenizer: Any, max_model_len: int,
) -> tuple[list[int], str]:
    """The few-shot rows (stratified, seeded) and their rendered block; raises
    ``FewShotTooLongError`` when the block leaves too little of the context
    for the text."""
    if not settings.few_shot:
        return [], ""
    if y_index is None:
        raise ValueError(f"{settings.owner}: few_shot={settings.few_shot} draws labelled examples: fit needs y")
    rng = check_random_state(settings.random_state)
    rows = _select_examples(y_index, len(verbalizers), int(settings.few_shot), rng)
    return rows, _example_block(layout, records, y_index, rows, verbalizers, tokenizer, max_model_len,
                                settings.few_shot, settings.owner)


def _example_block(
    layout: PromptLayout, records: Sequence[Mapping[str, str]], y_index: np.ndarray, rows: Sequence[int],
    verbalizers: Sequence[Sequence[str]], tokenizer: Any, max_model_len: int, few_shot: int, owner: str,
) -> str:
    """The rendered few-shot block of ``rows``; raises ``FewShotTooLongError``
    when it leaves too little of the context for the text."""
    # each example: its rendered prompt, then its class's verbalizer as the model would write it
    prefix = "".join(layout.body(records[row]) + verbalizers[y_index[row]][0] + EXAMPLE_SEPARATOR for row in rows)
    query = layout.body(dict.fromkeys(records[rows[0]], "")) if len(rows) else ""  # the prompt around the text
    n_tokens = len(tokenizer.encode(prefix + query, add_special_tokens=False))
    if n_tokens > max_model_len - MIN_QUERY_TOKENS:
        raise FewShotTooLongError(owner, int(few_shot), n_tokens, max_model_len)
    return prefix


def plan_showing(
    plan: ReadingPlan,
    verbalizers: Sequence[Sequence[str]],
    records: Sequence[Mapping[str, str]],
    y_index: np.ndarray,
    rows: Sequence[int],
    *,
    few_shot: int,
    tokenizer: Any,
    max_model_len: int,
    owner: str = "LLMLabelClassifier",
) -> ReadingPlan:
    """A fitted few-shot ``plan`` with ``rows`` of ``records`` (in that
    order) as its examples instead of the ones ``fit`` drew. Cross-validation
    reads an example text under the fitted prompt with that text swapped for
    another, so no text is read under a prompt that shows it. Raises
    ``FewShotTooLongError`` when the block leaves too little of the context
    for the text."""
    prefix = _example_block(plan.layout, records, y_index, list(rows), verbalizers, tokenizer, max_model_len,
                            few_shot, owner)
    return replace(plan, layout=replace(plan.layout, few_shot_prefix=prefix))


def build_reading(
    settings: ReadingSettings,
    class_names: Sequence[Any],
    class_labels: Sequence[Sequence[str]],
    records: Sequence[Mapping[str, str]],
    y_index: np.ndarray | None,
    tokenizer: Any,
    max_model_len: int,
) -> OutputReading:
    """One output's reading, from its classes (``class_names``, each with its
    label strings ``class_labels``), training ``records`` (and their class
    indices ``y_index``, for few-shot; None when fit has no ``y``)."""
    template = PromptTemplate.parse(settings.template)
    _check_template(settings, template, records[0])
    prompt_end = "" if settings.chat else template.suffix
    texts = [aliases[0].strip() for aliases in class_labels]
    fields = {LABELS_FIELD: join_labels(texts)}
    head = ""
    if settings.label_mode == "options":
        options: list[str] | None = option_codes(len(class_names))
        spoken: Sequence[Sequence[str]] = [[code] for code in options]
        fields[OPTIONS_FIELD] = options_block(options, texts)
        if OPTIONS_FIELD not in template.fields:
            head = f"Options:\n{fields[OPTIONS_FIELD]}\n"  # the same for every text: cached
    else:
        options, spoken = None, class_labels
    verbalizers = [[in_context_verbalizer(a, prompt_end, chat=settings.chat) for a in aliases] for aliases in spoken]
    layout = PromptLayout(template, settings.chat, settings.instructions, fields, head, too_long=settings.too_long)
    rows, prefix = _few_shot(settings, layout, records, y_index, verbalizers, tokenizer, max_model_len)
    layout = replace(layout, few_shot_prefix=prefix)
    samples = [layout.text(r, tokenizer) for r in records[:LABEL_CHECK_ROWS]]
    names = list(class_names)
    sequences = label_token_sequences(
        tokenizer, samples, verbalizers, names, add_special_tokens=layout.add_special_tokens
    )
    single = all(len(seq) == 1 for seqs in sequences for seq in seqs)
    mode = ("first_token" if single else "full_sequence") if settings.label_mode == "auto" else settings.label_mode
    if mode == "first_token":
        token_ids = distinct_first_tokens(tokenizer, sequences, verbalizers, names)
        per_class = [[(t,) for t in ids] for ids in token_ids]
    else:
        token_ids = [list(dict.fromkeys(seq[0] for seq in seqs)) for seqs in sequences]
        per_class = [[tuple(seq) for seq in seqs] for seqs in sequences]
    scored = [seq for group in per_class for seq in group]
    owner = tuple(k for k, group in enumerate(per_class) for _ in group)
    lengths = _length_divisors(settings.length_norm, scored, tokenizer)
    if mode == "constrained":
        check_constrained_labels(per_class, verbalizers, names)
    trie = LabelTrie.build(scored, constrained=mode == "constrained")
    margin = None if settings.prune_margin is None or len(trie.reads) == 1 else float(settings.prune_margin)
    plan = ReadingPlan(layout, trie, owner, len(names), lengths, margin)
    return OutputReading(plan, verbalizers, sequences, token_ids, mode, options, rows, prefix)


def _length_divisors(
    length_norm: str | None, sequences: Sequence[tuple[int, ...]], tokenizer: Any
) -> tuple[float, ...] | None:
    """Each scored sequence's length for ``length_norm``: tokens, or the
    characters of its decoded text (at least 1); decoded once, at fit."""
    if length_norm is None:
        return None
    if length_norm == "token":
        return tuple(float(len(seq)) for seq in sequences)
    return tuple(float(max(1, len(tokenizer.decode(list(seq)).strip()))) for seq in sequences)

"""Label verbalizers -> token ids, found in context: the tokens a label adds
after the rendered prompt (leading space included), never the label tokenized
alone, because a label's tokens depend on what precedes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["distinct_first_tokens", "in_context_verbalizer", "label_token_sequences"]

#: A label's tokens after the prompt.
TokenSeq = tuple[int, ...]


def in_context_verbalizer(label: str, prompt_end: str, *, chat: bool) -> str:
    """The string the model would write for ``label`` after the prompt: after a
    completion prompt that ends without whitespace, a word starts with a space;
    a chat reply starts with the word itself."""
    if chat or not prompt_end or prompt_end[-1].isspace() or label[:1].isspace():
        return label
    return " " + label


def _pieces(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    return [tokenizer.decode([t]) for t in ids]


def label_token_sequences(
    tokenizer: Any,
    prompts: Sequence[str],
    verbalizers: Sequence[Sequence[str]],
    class_names: Sequence[Any],
    *,
    add_special_tokens: bool = True,
) -> list[list[TokenSeq]]:
    """Per class, per verbalizer, the tokens it adds after each of ``prompts``
    (rendered examples). Raises ValueError naming the class and the label when a
    label merges with the prompt's end, tokenizes differently depending on the
    text before it, or is the same token sequence as another label."""
    result: list[list[TokenSeq]] = []
    owner: dict[TokenSeq, tuple[Any, str]] = {}
    encoded_prompts = [tokenizer.encode(p, add_special_tokens=add_special_tokens) for p in prompts]
    for class_name, aliases in zip(class_names, verbalizers, strict=True):
        sequences: list[TokenSeq] = []
        for alias in aliases:
            tokens: TokenSeq | None = None
            for prompt, prompt_ids in zip(prompts, encoded_prompts, strict=True):
                full = tokenizer.encode(prompt + alias, add_special_tokens=add_special_tokens)
                if full[: len(prompt_ids)] != prompt_ids:
                    raise ValueError(
                        f"label {alias!r} of class {class_name!r} merges with the end of the prompt "
                        f"(...{prompt[-20:]!r}) into other tokens; end the prompt with a separator "
                        "such as ':' or start the label with a space"
                    )
                added = tuple(full[len(prompt_ids) :])
                if tokens is not None and added != tokens:
                    raise ValueError(
                        f"label {alias!r} of class {class_name!r} becomes different tokens depending "
                        "on the text before it: put a fixed answer cue (e.g. '\\nAnswer:') after "
                        "the last field of the prompt"
                    )
                tokens = added
            if not tokens:
                raise ValueError(f"label {alias!r} of class {class_name!r} adds no token after the prompt")
            if tokens in owner:
                other_class, other_alias = owner[tokens]
                raise ValueError(
                    f"label {other_alias!r} of class {other_class!r} and label {alias!r} of class "
                    f"{class_name!r} are the same tokens {_pieces(tokenizer, tokens)} after this "
                    "prompt; give each class distinct wording, and each alias once, with "
                    "labels={class: [...]}"
                )
            owner[tokens] = (class_name, alias)
            sequences.append(tokens)
        result.append(sequences)
    return result


def distinct_first_tokens(
    tokenizer: Any, sequences: Sequence[Sequence[TokenSeq]], verbalizers: Sequence[Sequence[str]],
    class_names: Sequence[Any],
) -> list[list[int]]:
    """Per class, its labels' first tokens (each once). Raises ValueError naming
    both labels when two classes start with the same token: then only the whole
    sequences tell them apart (``label_mode="full_sequence"``)."""
    owner: dict[int, tuple[Any, str]] = {}
    result: list[list[int]] = []
    for class_name, seqs, aliases in zip(class_names, sequences, verbalizers, strict=True):
        ids: list[int] = []
        for seq, alias in zip(seqs, aliases, strict=True):
            token = seq[0]
            if token in owner and owner[token][0] != class_name:
                other_class, other_alias = owner[token]
                raise ValueError(
                    f"label {other_alias!r} of class {other_class!r} and label {alias!r} of class "
                    f"{class_name!r} start with the same token {_pieces(tokenizer, [token])[0]!r} "
                    "after this prompt; use label_mode='full_sequence' (or 'auto') to score whole "
                    "labels, or give each class a distinct first word with labels={class: [...]}"
                )
            owner[token] = (class_name, alias)
            if token not in ids:
                ids.append(token)
        result.append(ids)
    return result

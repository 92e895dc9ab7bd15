"""Label verbalizers -> token ids, found in context: the token a label adds
after the rendered prompt (leading space included), never the label tokenized
alone, because a label's token depends on what precedes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["in_context_verbalizer", "label_token_ids"]


def in_context_verbalizer(label: str, prompt_end: str, *, chat: bool) -> str:
    """The string the model would write for ``label`` after the prompt: after a
    completion prompt that ends without whitespace, a word starts with a space;
    a chat reply starts with the word itself."""
    if chat or not prompt_end or prompt_end[-1].isspace() or label[:1].isspace():
        return label
    return " " + label


def _pieces(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    return [tokenizer.decode([t]) for t in ids]


def label_token_ids(
    tokenizer: Any,
    prompts: Sequence[str],
    verbalizers: Sequence[Sequence[str]],
    class_names: Sequence[Any],
    *,
    add_special_tokens: bool = True,
) -> list[list[int]]:
    """Token ids of each class's verbalizers, checked after every prompt in
    ``prompts`` (rendered examples). Raises ValueError naming the class and the
    label when a label is not exactly one token there, merges with the prompt's
    end, depends on the text before it, or shares its token with another class."""
    result: list[list[int]] = []
    owner: dict[int, tuple[Any, str]] = {}
    encoded_prompts = [tokenizer.encode(p, add_special_tokens=add_special_tokens) for p in prompts]
    for class_name, aliases in zip(class_names, verbalizers, strict=True):
        ids: list[int] = []
        for alias in aliases:
            token = None
            for prompt, prompt_ids in zip(prompts, encoded_prompts, strict=True):
                full = tokenizer.encode(prompt + alias, add_special_tokens=add_special_tokens)
                if full[: len(prompt_ids)] != prompt_ids:
                    raise ValueError(
                        f"label {alias!r} of class {class_name!r} merges with the end of the prompt "
                        f"(...{prompt[-20:]!r}) into other tokens; end the prompt with a separator "
                        "such as ':' or start the label with a space"
                    )
                added = full[len(prompt_ids) :]
                if len(added) != 1:
                    raise ValueError(
                        f"label {alias!r} of class {class_name!r} is not one token after this prompt "
                        f"but {len(added)}: {_pieces(tokenizer, added)}. Give the class a one-token "
                        f"alias or other wording with labels={{{class_name!r}: [...]}}"
                    )
                if token is not None and added[0] != token:
                    raise ValueError(
                        f"label {alias!r} of class {class_name!r} becomes a different token depending "
                        "on the text before it: put a fixed answer cue (e.g. '\\nAnswer:') after "
                        "the last field of the prompt"
                    )
                token = added[0]
            assert token is not None
            if token in owner:
                other_class, other_alias = owner[token]
                raise ValueError(
                    f"label {other_alias!r} of class {other_class!r} and label {alias!r} of class "
                    f"{class_name!r} are the same token {_pieces(tokenizer, [token])[0]!r} after this "
                    "prompt; give each class distinct wording, and each alias once, with "
                    "labels={class: [...]}"
                )
            owner[token] = (class_name, alias)
            ids.append(token)
        result.append(ids)
    return result

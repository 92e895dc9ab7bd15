"""What the constrained reading (``label_mode="constrained"``) asks of the
labels before its trie is built: no label may be the start of another. The
constrained reading scores what a model made to answer with one of the labels
would write (vLLM's guided choice); where one label ends and another goes on,
the model's next token would have to say "stop here", and no label token does,
so that choice has no read. The trie itself (``LabelTrie.build(...,
constrained=True)``) does the reading."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["check_constrained_labels"]


def check_constrained_labels(
    sequences: Sequence[Sequence[tuple[int, ...]]], verbalizers: Sequence[Sequence[str]], class_names: Sequence[Any]
) -> None:
    """Raises ValueError naming both labels and their classes when one label's
    tokens (``sequences[class][alias]``, after the prompt) are the start of
    another's."""
    flat = [
        (seq, alias, name)
        for seqs, aliases, name in zip(sequences, verbalizers, class_names, strict=True)
        for seq, alias in zip(seqs, aliases, strict=True)
    ]
    starts = {seq[:d] for seq, _, _ in flat for d in range(1, len(seq))}
    for seq, alias, name in flat:
        if seq not in starts:
            continue
        longer, longer_alias, longer_name = next(
            other for other in flat if len(other[0]) > len(seq) and other[0][: len(seq)] == seq
        )
        raise ValueError(
            f"label {alias!r} of class {name!r} is the start of label {longer_alias!r} of class "
            f"{longer_name!r} after this prompt: label_mode='constrained' cannot read where the shorter "
            "one ends; use label_mode='full_sequence', or reword one of them with labels={class: ...}"
        )

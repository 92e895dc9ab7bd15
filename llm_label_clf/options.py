"""Options mode: the classes listed in the prompt as lettered (or numbered)
options, so that the model answers with a short code whatever the label
strings are. Codes have equal length, so no code is a prefix of another."""

from __future__ import annotations

import string
from collections.abc import Sequence

__all__ = ["OPTIONS_FIELD", "option_codes", "options_block", "with_options"]

#: The prompt field that receives the options list; without it the list goes
#: before the whole prompt.
OPTIONS_FIELD = "options"


def option_codes(n: int) -> list[str]:
    """"A".."Z" for up to 26 classes, else "01".."n" zero-padded to one width."""
    if n <= len(string.ascii_uppercase):
        return list(string.ascii_uppercase[:n])
    width = len(str(n))
    return [str(i).zfill(width) for i in range(1, n + 1)]


def options_block(codes: Sequence[str], labels: Sequence[str]) -> str:
    """One line per option: "A. World"."""
    return "\n".join(f"{code}. {label}" for code, label in zip(codes, labels, strict=True))


def with_options(body: str, block: str) -> str:
    """The options list as a block before the prompt ``body`` (used when the
    template has no ``{options}`` field): the same text for every input, so
    vLLM's prefix cache computes it once."""
    return f"Options:\n{block}\n{body}"

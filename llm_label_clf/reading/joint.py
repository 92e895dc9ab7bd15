"""Joint reads for several outputs (``multioutput_read="joint"``): one read per
text answers every output, as lettered options whose answer format vLLM's
structured outputs hold; the core's ``slots`` read each output's letters."""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engines.handle import Engine
from ..exceptions import GenerationError
from ..label_reads import next_token_label_reads
from .plan import ClassReads, PromptEncoding
from .prompts import PromptTemplate
from .render import PromptLayout

__all__ = [
    "JOINT_CODES",
    "JOINT_PROMPT",
    "JointPlan",
    "answer_regex",
    "code_token_ids",
    "joint_codes",
    "joint_layout",
    "read_joint",
]

#: The letters a joint read answers with, in order: single tokens in common
#: vocabularies, and never merged with the newline that separates them.
JOINT_CODES = string.ascii_uppercase + string.ascii_lowercase
#: The joint read's default question, after the options lists.
JOINT_PROMPT = "Text: {text}"
_SEPARATOR = "\n"


def joint_codes(n_classes: int, name: Any) -> list[str]:
    """The option letters of an output with ``n_classes`` classes."""
    if n_classes > len(JOINT_CODES):
        raise ValueError(
            f"output {name!r} has {n_classes} classes; a joint read letters at most {len(JOINT_CODES)} "
            "options per output: use multioutput_read='separate'"
        )
    return list(JOINT_CODES[:n_classes])


def answer_regex(codes_per_output: Sequence[Sequence[str]]) -> str:
    """The answer format: one letter of each output's options, one per line."""
    return "\\n".join("[" + "".join(codes) + "]" for codes in codes_per_output)


def code_token_ids(tokenizer: Any, codes_per_output: Sequence[Sequence[str]]) -> list[list[int]]:
    """Each letter's token id after a newline. Raises ValueError where the
    format cannot fix token positions: a letter that is not one token, or a
    vocabulary token spanning a letter and a newline (structured outputs could
    then write two answer characters as one token)."""
    newline = tokenizer.encode(_SEPARATOR, add_special_tokens=False)
    out = []
    for codes in codes_per_output:
        ids = []
        for code in codes:
            encoded = tokenizer.encode(_SEPARATOR + code, add_special_tokens=False)
            if encoded[: len(newline)] != newline or len(encoded) != len(newline) + 1:
                raise ValueError(
                    f"option letter {code!r} is not one token of this model's vocabulary after a newline; "
                    "use multioutput_read='separate'"
                )
            ids.append(encoded[-1])
        out.append(ids)
    alphabet = {c for codes in codes_per_output for c in codes}
    for token_id in range(len(tokenizer)):
        text = tokenizer.decode([token_id])
        if (
            len(text) >= 2
            and _SEPARATOR in text
            and _SEPARATOR * 2 not in text
            and set(text) <= alphabet | {_SEPARATOR}
        ):
            raise ValueError(
                f"token {token_id} ({text!r}) spans an option letter and a newline, so the joint answer's "
                "token positions are not fixed: use multioutput_read='separate'"
            )
    return out


async def read_joint(
    engine: Engine,
    prompts: Sequence[Sequence[int]],
    token_ids: Sequence[Sequence[int]],
    regex: str,
    *,
    offset: int = 0,
) -> list[np.ndarray]:
    """One structured read per prompt; per output, the logprobs of its option
    tokens at its slot, shape (n_prompts, n_options). ``offset`` is the index of
    ``prompts[0]`` in the caller's input, so errors name the caller's items."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import StructuredOutputsParams

    union = list(dict.fromkeys(t for ids in token_ids for t in ids))
    params = SamplingParams(
        max_tokens=2 * len(token_ids) - 1,
        temperature=0.0,
        logprob_token_ids=union,
        detokenize=False,
        structured_outputs=StructuredOutputsParams(regex=regex),
    )
    slots = [(2 * j, list(ids)) for j, ids in enumerate(token_ids)]
    n = len(prompts)
    inputs = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
    try:
        reads = await next_token_label_reads(
            engine.client, inputs, [params] * n, engine.next_request_id(), slots=[slots] * n
        )
    except GenerationError as exc:
        items = [offset + i for i in exc.items]
        raise GenerationError(f"joint reads failed for input item(s) {items[:20]}: {exc}", items) from exc
    for i, read in enumerate(reads):
        answer = read.top_token_ids
        if any(answer[2 * j] not in ids for j, ids in enumerate(token_ids) if 2 * j < len(answer)):
            raise GenerationError(
                f"joint read for item {offset + i} left the answer format (tokens {answer}); "
                "use multioutput_read='separate'",
                [offset + i],
            )
    flat = np.array([r.logprobs for r in reads], dtype=np.float64).reshape(n, -1)
    bounds = np.cumsum([len(ids) for ids in token_ids])[:-1]
    return np.split(flat, bounds, axis=1)


@dataclass(frozen=True)
class JointPlan(PromptEncoding):
    """The reading plan of a joint read: ``layout`` renders the prompt (every
    output's options before the text, the answer instruction after it);
    ``token_ids[j]`` are output ``j``'s option-letter tokens, read at answer
    position ``2 * j`` under the answer format ``regex``. Same two jobs as
    ``ReadingPlan``; ``read`` returns one ``ClassReads`` per output, whose
    scores are the option logprobs under the format."""

    layout: PromptLayout
    token_ids: tuple[tuple[int, ...], ...]
    regex: str

    @property
    def output_sizes(self) -> list[int]:
        return [len(ids) for ids in self.token_ids]

    @property
    def reserved_tokens(self) -> int:
        """The answer: one letter per output, newlines between them."""
        return 2 * len(self.token_ids) - 1

    async def read(self, engine: Engine, prompts: Sequence[Sequence[int]], *, offset: int = 0) -> list[ClassReads]:
        slot_lp = await read_joint(engine, prompts, self.token_ids, self.regex, offset=offset)
        top = np.zeros(len(prompts), dtype=np.int64)
        return [ClassReads(lp, lp, top) for lp in slot_lp]


def joint_layout(
    template: PromptTemplate, names: Sequence[str], options: Sequence[Mapping[str, str]], *, chat: bool,
    instructions: str | None, too_long: str,
) -> PromptLayout:
    """Every output's options (the same for every text, so cached), the text,
    and the answer instruction; the reply starts on a new line."""
    blocks = [
        f"{name} options:\n" + "\n".join(f"{code}. {text}" for code, text in opts.items())
        for name, opts in zip(names, options, strict=True)
    ]
    order = ", then ".join(names)
    tail = f"\nAnswer with one option letter per line: {order}."
    return PromptLayout(
        template,
        chat,
        instructions,
        head="\n\n".join(blocks) + "\n\n",
        tail=tail if chat else tail + "\nAnswer:\n",
        too_long=too_long,
    )

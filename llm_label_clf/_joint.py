"""Joint reads for several outputs (``multioutput_read="joint"``): one read
per text answers every output. The prompt lists each output's classes as
lettered options and asks for one letter per line; vLLM's structured outputs
hold the answer to that format (a regex), so output ``j``'s letter is always
generated token ``2 * j``, and the core's ``slots`` read each output's option
tokens there.

Two things differ from separate reads, and the README's comparison on TREC
weighs them: a later output is read after the model's own greedy answer to
the earlier ones (P(fine | text, coarse answer), not P(fine | text)), and
vLLM applies the format's token mask before taking logprobs, so a slot's
logprobs are normalised over the letters the format allows there rather than
over the full vocabulary (the softmax over them is the same; the label mass is
always 1 and cannot flag a prompt the model does not follow)."""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ._outputs import output_labels
from ._prompting import class_labels
from ._targets import Target, unique_classes
from .engine import Engine
from .exceptions import GenerationError
from .label_reads import next_token_label_reads
from .prompts import LABELS_FIELD, PromptTemplate

__all__ = ["JOINT_CODES", "JointReadMixin", "answer_regex", "code_token_ids", "joint_codes", "read_joint"]

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


class JointReadMixin:
    """The joint-read path of ``LLMLabelClassifier``: fit and per-output
    log-probabilities from one read per text."""

    labels: Any
    prompt: Any
    few_shot: int
    calibration: str | None
    label_mode: str
    length_norm: str | None
    base_url: Any
    chat: Any

    def _joint_fitted(self) -> bool:
        return "joint_token_ids_" in self.__dict__

    def _is_joint(self) -> bool:
        """Whether the fitted estimator reads its outputs jointly (raises
        NotFittedError before ``fit``)."""
        check_is_fitted(self, ["classes_"])
        return self._joint_fitted()

    def _label_fields(self) -> dict[str, str]:
        return {} if self._joint_fitted() else super()._label_fields()  # type: ignore[misc]

    def _render_body(self, template: PromptTemplate, record: Mapping[str, str], label_fields: Mapping[str, str]) -> str:
        if self._joint_fitted():
            return self._joint_body(template, record)
        return super()._render_body(template, record, label_fields)  # type: ignore[misc]

    def _fit_joint(self, records: list[dict[str, str]], target: Target, engine: Engine) -> Any:
        """Classes, option letters and their tokens per output; checks that the
        other parameters apply to a joint read."""
        name = type(self).__name__
        if target.kind != "multioutput":
            raise ValueError(
                f"{name}: multioutput_read='joint' reads several outputs (a 2-D y of classes); "
                f"this y is {target.kind}: use multioutput_read='separate'"
            )
        unsupported = {
            "base_url": self.base_url is not None,
            "few_shot": self.few_shot != 0,
            "calibration": self.calibration is not None,
            "length_norm": self.length_norm is not None,
            "label_mode": self.label_mode not in ("auto", "options"),
        }
        for param, used in unsupported.items():
            if used:
                raise ValueError(
                    f"{name}: {param}={getattr(self, param)!r} applies to separate reads only; a joint read "
                    "letters the options of every output on the embedded engine. Use "
                    "multioutput_read='separate' or leave it unset"
                )
        if not (self.prompt is None or isinstance(self.prompt, str)):
            raise ValueError(f"{name}: a joint read asks every output in one prompt: give one template, not a list")
        template = PromptTemplate.parse(JOINT_PROMPT if self.prompt is None else self.prompt)
        if LABELS_FIELD in template.fields or "options" in template.fields:
            raise ValueError(
                f"{name}: a joint read lists each output's options itself; "
                "remove {labels}/{options} from the prompt"
            )
        self._check_fields(template, records[0])  # type: ignore[attr-defined]
        names = target.names if target.names is not None else [f"output {j + 1}" for j in range(len(target.columns))]
        classes, texts = [], []
        for j, column in enumerate(target.columns):
            values, _ = unique_classes(column, f"output {names[j]!r}: ")
            classes.append(values)
            labels = output_labels(self.labels, target, j)
            aliases = class_labels(labels, values.tolist(), f"{name}: output {names[j]!r}")
            texts.append([a[0].strip() for a in aliases])
        codes = [joint_codes(len(c), names[j]) for j, c in enumerate(classes)]
        self.chat_ = self._uses_chat(engine)  # type: ignore[attr-defined]
        self.classes_ = classes
        self.n_outputs_ = len(classes)
        self.output_kind_ = "multioutput"
        self.prompt_ = template.template
        self.joint_names_ = [str(n) for n in names]
        self.joint_options_ = [dict(zip(c, t, strict=True)) for c, t in zip(codes, texts, strict=True)]
        self.joint_regex_ = answer_regex(codes)
        self.joint_token_ids_ = code_token_ids(engine.tokenizer, codes)
        return self

    def _joint_body(self, template: PromptTemplate, record: Mapping[str, str]) -> str:
        """Every output's options (the same for every text, so cached), the
        text, and the answer instruction; the reply starts on a new line."""
        blocks = [
            f"{name} options:\n" + "\n".join(f"{code}. {text}" for code, text in options.items())
            for name, options in zip(self.joint_names_, self.joint_options_, strict=True)
        ]
        order = ", then ".join(self.joint_names_)
        body = "\n\n".join(blocks) + "\n\n" + template.render(record)
        body += f"\nAnswer with one option letter per line: {order}."
        return body if self.chat_ else body + "\nAnswer:\n"


"""The candidates ``LLMLabelClassifierCV`` chooses among, as parameter sets of
``LLMLabelClassifier``, grouped by what they read."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_PROMPTS", "READER_PARAMS", "Candidate", "candidates", "prompt_settings"]

#: The prompts tried when ``prompts`` is None: the estimator's default
#: template (it names the labels in an instruction line); that one as a chat
#: turn (the model's chat template, reply read at its first token); and the
#: text with a bare answer cue (the default before 2026-12-06).
DEFAULT_PROMPTS: tuple[dict[str, Any], ...] = (
    {"prompt": None, "instructions": None, "chat": False},
    {"prompt": "Text: {text}\nLabel:", "instructions": None, "chat": False},
    {"prompt": "Classify the text as {labels}.\nText: {text}\nLabel:", "instructions": None, "chat": True},
)
#: The estimator parameters a reader sets.
READER_PARAMS = ("prompt", "instructions", "chat", "few_shot", "label_mode", "length_norm", "labels")
_PROMPT_KEYS = ("prompt", "instructions", "chat")


@dataclass(frozen=True)
class Candidate:
    """One candidate: ``reader`` indexes the reader whose reads it uses (None:
    the stacked candidate, over every reader), ``params`` the estimator
    parameters it sets (what ``best_params_`` reports)."""

    reader: int | None
    params: dict[str, Any]


def prompt_settings(entry: Any, where: str) -> dict[str, Any]:
    """One ``prompts`` entry (a template, None for the default template, or a
    mapping with ``prompt`` / ``instructions`` / ``chat``) as those three
    parameters; entries a mapping leaves out keep the estimator's values."""
    if entry is None or isinstance(entry, str):
        return {"prompt": entry}
    if isinstance(entry, Mapping):
        unknown = sorted(set(entry) - set(_PROMPT_KEYS))
        if unknown:
            raise ValueError(f"{where} has key(s) {unknown}; a prompt candidate takes {list(_PROMPT_KEYS)}")
        return dict(entry)
    raise ValueError(
        f"{where} is a {type(entry).__name__}; give a template string, None (the default template) "
        "or a dict with 'prompt', 'instructions' and 'chat'"
    )


def _listed(value: Any, name: str) -> list[Any]:
    if isinstance(value, str) or not isinstance(value, Sequence) or len(value) == 0:
        raise ValueError(f"{name} must be a non-empty list of candidates; got {value!r}")
    return list(value)


def candidates(
    base: Mapping[str, Any],
    *,
    prompts: Sequence[Any] | None,
    few_shots: Sequence[int],
    label_modes: Sequence[str] | None,
    length_norms: Sequence[str | None] | None,
    label_sets: Sequence[Any] | None,
    calibrations: Sequence[str | None],
    calibration_priors: Sequence[str],
    class_weights: Sequence[Any],
    stack: bool,
) -> tuple[list[dict[str, Any]], list[Candidate]]:
    """Every reader (as estimator parameters) and every candidate, in a fixed
    order: readers by prompt, few-shot count, label mode, length norm and
    labels; each reader's candidates by calibration (then prior or class
    weights); the stacked candidates last. ``base`` holds the estimator's own
    values for lists left as None. Raises ValueError naming a bad list."""
    prompt_list = [
        prompt_settings(p, f"prompts[{i}]")
        for i, p in enumerate(DEFAULT_PROMPTS if prompts is None else _listed(prompts, "prompts"))
    ]
    def axis(name: str, values: Sequence[Any] | None, listed_as: str) -> list[dict[str, Any]]:
        return [{name: v} for v in ([base[name]] if values is None else _listed(values, listed_as))]

    axes = [
        prompt_list,
        [{"few_shot": k} for k in _listed(few_shots, "few_shots")],
        axis("label_mode", label_modes, "label_modes"),
        axis("length_norm", length_norms, "length_norms"),
        axis("labels", label_sets, "label_sets"),
    ]
    readers = [dict(kv for part in combo for kv in part.items()) for combo in itertools.product(*axes)]
    found: list[Candidate] = []
    for r, reader in enumerate(readers):
        for calibration in _listed(calibrations, "calibrations"):
            if calibration in ("auto", "contextual", "batch"):
                for prior in _listed(calibration_priors, "calibration_priors"):
                    found.append(Candidate(r, {**reader, "calibration": calibration, "calibration_prior": prior}))
            elif calibration == "learned":
                for weights in _listed(class_weights, "class_weights"):
                    found.append(Candidate(r, {**reader, "calibration": calibration, "class_weight": weights}))
            else:
                found.append(Candidate(r, {**reader, "calibration": calibration}))
    if stack:
        for weights in _listed(class_weights, "class_weights"):
            found.append(Candidate(None, {"stack": True, "class_weight": weights}))
    return readers, found

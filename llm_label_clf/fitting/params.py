"""The estimator's parameter table: for each parameter, a check that returns
None when the value is valid, else what it must be. ``check_params`` runs it
at fit (scikit-learn validates in ``fit``, never in ``__init__``) and names the
estimator, the parameter and the value in the error."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sklearn.utils import check_random_state

from ..reading.prompts import DEFAULT_PROMPT, PromptTemplate
from ..store.handle import check_read_store
from .calibration import CALIBRATION_PRIORS, CALIBRATIONS
from .label_words import LABEL_WORDS

__all__ = ["LABEL_MODES", "LENGTH_NORMS", "LOW_MASS", "PARAMETERS", "TOO_LONG", "check_params"]

LABEL_MODES = ("auto", "first_token", "full_sequence", "constrained", "options")
LENGTH_NORMS = (None, "token", "char")
LOW_MASS = ("warn", "raise", "ignore")
TOO_LONG = ("truncate", "raise")
Check = Callable[[Any], "str | None"]


def one_of(*choices: Any, why: str | None = None) -> Check:
    """The value is one of ``choices`` (compared with ==)."""
    message = why or f"must be one of {sorted(choices)}"
    return lambda value: None if any(isinstance(value, type(c)) and value == c for c in choices) else message


def number(ok: Callable[[Any], bool], why: str, *, integral: bool = False, optional: bool = False) -> Check:
    """A number (an int where ``integral``; never a bool) for which ``ok`` holds, or None where ``optional``."""
    kind = numbers.Integral if integral else numbers.Real

    def check(v: Any) -> str | None:
        valid = (optional and v is None) or (isinstance(v, kind) and not isinstance(v, bool) and ok(v))
        return None if valid else why

    return check


def _model(value: Any) -> str | None:
    ok = isinstance(value, str) and bool(value)
    return None if ok else "must be a built-in model name, a local folder or a hub id (str)"


def _base_url(value: Any) -> str | None:
    urls = [value] if isinstance(value, str) else value
    if urls is None or (
        isinstance(urls, Sequence) and urls and all(isinstance(u, str) and u for u in urls)
    ):
        return None
    return "must be None, a server URL such as 'http://127.0.0.1:8000/v1', or a list of them"


def _engine_options(value: Any) -> str | None:
    if value is None or (isinstance(value, Mapping) and all(isinstance(k, str) for k in value)):
        return None
    return "must be None or a dict of vLLM engine arguments"


_LABELS_FORMS = (
    "must be None, a mapping class -> label (or list of aliases), a list of labels in classes_ order, "
    "or (several outputs) a list of such mappings or lists"
)


def _label_entry(label: Any) -> bool:
    """A class's label: a non-blank string, or a non-empty list of them (aliases)."""
    aliases = [label] if isinstance(label, str) else label
    return (
        isinstance(aliases, Sequence)
        and bool(aliases)
        and all(isinstance(a, str) and bool(a.strip()) for a in aliases)
    )


def _one_output_labels(value: Any) -> str | None:
    """None when ``value`` gives one output's classes their labels: a non-empty
    mapping class -> label, or a non-empty list of labels in classes_ order."""
    if isinstance(value, Mapping) and value:
        for cls, label in value.items():
            if not _label_entry(label):
                return f"maps class {cls!r} to {label!r}; give a non-empty string or list of them"
        return None
    if isinstance(value, Sequence) and not isinstance(value, str) and value:
        for i, label in enumerate(value):
            if not _label_entry(label):
                return f"has {label!r} at position {i}; give a non-empty string or list of them per class"
        return None
    return _LABELS_FORMS


def _labels(value: Any) -> str | None:
    if value is None or isinstance(value, Mapping):
        return None if value is None else _one_output_labels(value)
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        return _LABELS_FORMS
    if any(isinstance(v, str) for v in value) or all(_label_entry(v) for v in value):
        return _one_output_labels(value)  # one output's labels (each a string or aliases)
    for entry in value:  # one entry per output
        why = None if entry is None else _one_output_labels(entry)
        if why is not None:
            return why
    return None


def _prompt(value: Any) -> str | None:
    prompts = [value] if value is None or isinstance(value, str) else value
    if not isinstance(prompts, Sequence) or not all(p is None or isinstance(p, str) for p in prompts):
        return "must be None, a template string with {text}, or (several outputs) a list of them"
    return None


def _optional_str(value: Any) -> str | None:
    return None if value is None or isinstance(value, str) else "must be None or a string"


def _random_state(value: Any) -> str | None:
    try:
        check_random_state(value)
    except ValueError:
        return "must be None, an int or a numpy RandomState"
    return None


def _class_weight(value: Any) -> str | None:
    if value is None or value == "balanced":
        return None
    if isinstance(value, Mapping) and all(
        isinstance(w, int | float) and not isinstance(w, bool) and w > 0 for w in value.values()
    ):
        return None
    return "must be None, 'balanced' or a mapping class -> positive weight"


def _threshold(value: Any) -> str | None:
    if value == "auto" or number(lambda v: 0 < v < 1, "")(value) is None:
        return None
    return "must be 'auto' or a number in (0, 1)"


PARAMETERS: dict[str, Check] = {
    "model": _model,
    "base_url": _base_url,
    "engine_options": _engine_options,
    "labels": _labels,
    "label_words": one_of(*LABEL_WORDS),
    "label_mode": one_of(*LABEL_MODES),
    "length_norm": one_of(*LENGTH_NORMS, why="must be None, 'token' or 'char'"),
    "prune_margin": number(
        lambda v: 0 <= v < float("inf"),
        "must be None (read every label prefix) or a finite number of nats >= 0",
        optional=True,
    ),
    "prompt": _prompt,
    "instructions": _optional_str,
    "chat": one_of(True, False, "auto", why="must be True, False or 'auto'"),
    "batch_size": number(lambda v: v >= 1, "must be a positive integer", integral=True),
    "progress": one_of(True, False, why="must be True or False"),
    "low_mass": one_of(*LOW_MASS),
    "low_mass_threshold": number(lambda v: 0 <= v < 1, "must be a number in [0, 1)"),
    "few_shot": number(lambda v: v >= 0, "must be a non-negative integer (examples per class)", integral=True),
    "calibration": one_of(*CALIBRATIONS, why="must be None, 'auto', 'contextual', 'batch' or 'learned'"),
    "calibration_prior": one_of(*CALIBRATION_PRIORS),
    "class_weight": _class_weight,
    "threshold": _threshold,
    "multioutput_read": one_of("separate", "joint"),
    "multilabel_read": one_of("auto", "choice", "yes_no"),
    "too_long": one_of(*TOO_LONG),
    "random_state": _random_state,
    "read_store": check_read_store,
}


def check_params(estimator: Any) -> None:
    """Raises ValueError naming the first invalid parameter of ``estimator``,
    then any prompt template that does not parse."""
    owner = type(estimator).__name__
    for name, check in PARAMETERS.items():
        value = getattr(estimator, name)
        why = check(value)
        if why is not None:
            raise ValueError(f"{owner}: {name}={value!r} {why}")
    prompt = estimator.prompt
    for template in [prompt] if prompt is None or isinstance(prompt, str) else prompt:
        try:
            PromptTemplate.parse(DEFAULT_PROMPT if template is None else template)
        except ValueError as exc:
            raise ValueError(f"{owner}: {exc}") from None

"""The estimator's and vLLM's errors and warnings in the command line's terms:
options for parameters, input rows for ``X`` items (docs/architecture.md:
``cli/hints.py``)."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence

__all__ = ["OPTION_OF", "cli_hint", "engine_hint"]

#: Estimator parameters the command line sets, and the option that sets each.
OPTION_OF = {
    name: "--" + name.replace("_", "-")
    for name in ("model", "labels", "label_mode", "label_words", "length_norm", "prompt", "instructions", "chat",
                 "random_state", "batch_size", "low_mass", "low_mass_threshold", "too_long", "few_shot", "calibration")
} | {"engine_options": "--engine-option"}


_QUOTED = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_SETTING = re.compile(
    r"\b(" + "|".join(OPTION_OF) + r")=(" + _QUOTED + r"|\{[^}]*\}+|-?\d+(?:\.\d+)?(?:e-?\d+)?|True|False|None)"
)
_GIVE = re.compile(r"(?<![\w'-])(" + "|".join(OPTION_OF) + r")=(?=\s|$)")
_BARE = re.compile(r"(?<![\w'-])(" + "|".join(n for n in OPTION_OF if "_" in n) + r")\b(?![=\[])")


def _setting(match: re.Match[str]) -> str:
    name, value = match.group(1), match.group(2)
    option = OPTION_OF[name]
    if name == "engine_options" and value.startswith("{"):  # {'dtype': 'float32'} -> --engine-option dtype=float32
        try:
            given = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return option
        return " ".join(f"{option} {k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in given.items())
    if name == "labels" or value.startswith("{"):
        return option
    if value[0] in "'\"":
        inner = value[1:-1]
        value = inner if re.fullmatch(r"[\w./-]+", inner) else value
    elif value in ("True", "False", "None"):
        value = value.lower()
    return f"{option} {value}"


def cli_hint(message: str, *, where: str | None = None, rows: Sequence[int] | None = None) -> str:
    """``message`` from the estimator as the command line's user should read
    it: ``name=value`` settings as the options that set them
    (``low_mass='ignore'`` -> ``--low-mass ignore``,
    ``engine_options['max_model_len']`` -> ``--engine-option max_model_len=...``),
    and "X item k" (or "items [..]", "input item(s) [..]") as the row of the
    input file ``where`` it came from, ``rows[k]`` (counting data rows from 0)."""
    text = re.sub(r"^LLMLabelClassifier: ", "", message)
    text = re.sub(r"engine_options\['(\w+)'\]", r"--engine-option \1=...", text)
    text = _SETTING.sub(_setting, text)
    text = re.sub(r"(--[a-z][\w-]* [\w.-]+)( \(?or )'([\w-]+)'", r"\1\2\3", text)
    text = _BARE.sub(lambda m: OPTION_OF[m.group(1)], text)
    text = _GIVE.sub(lambda m: OPTION_OF[m.group(1)], text)  # "give model= a local folder"
    text = text.replace("pass more labelled texts to fit", "pass more labelled rows in --train")
    text = text.replace("fit needs y", "pass labelled rows with --train FILE")

    def row(k: str) -> str:
        return str(rows[int(k)]) if rows is not None and int(k) < len(rows) else k

    # "X item k" (an error's) and "(item k" (a warning's: low mass, ties) name X item k: the input row
    source = f"{where} " if where else ""
    text = re.sub(r"\bX item (\d+)|(?<=\()item (\d+)\b", lambda m: f"{source}row {row(m.group(1) or m.group(2))}", text)

    def listed(match: re.Match[str]) -> str:
        shown = [row(k.strip()) if k.strip().isdigit() else k.strip(" '") for k in match.group(1).split(",")]
        return f"rows [{', '.join(shown)}]" + (f" of {where}" if where else "")

    # "items [..]" (a warning's X items) and "input item(s) [..]" (a failed read's);
    # a bare "item(s) [..]" inside a read's own error counts within its engine batch
    return re.sub(r"\b(?:items|input item\(s\)) \[([^\]]*)\]", listed, text)


def engine_hint(message: str, ours: Sequence[str] = ()) -> str:
    """A failed engine start's ``message`` for the command line: vLLM's
    ``--flag value`` (not one of ``ours``) and `` `engine_arg` `` spelled as
    ``--engine-option engine_arg=value``; when it names any, a closing note
    says how engine arguments are set."""

    def flag(match: re.Match[str]) -> str:
        if f"--{match.group(1)}" in ours:
            return match.group(0)
        value = match.group(2) or match.group(3) or "..."
        return f"--engine-option {match.group(1).replace('-', '_')}={value}"

    text = re.sub(r"--([a-z]+(?:-[a-z]+)+)(?:=([\w.]+)| (\d[\w.]*))?", flag, message)
    text = re.sub(r"`([a-z]+(?:_[a-z]+)+)`", r"`--engine-option \1=...`", text)
    text = re.sub(
        r"unexpected keyword argument '(\w+)'",
        r"unexpected keyword argument '\1' (\1 is not a vLLM engine argument: "
        r"check --engine-option and --engine-options)",
        text,
    )
    if text != message:
        text += " (vLLM engine arguments are set with --engine-option KEY=VALUE or --engine-options FILE)"
    return text

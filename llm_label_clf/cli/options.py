"""The options of ``classify`` and ``evaluate``: their parser (defaults and
choices taken from the estimator and ``_params``, not repeated), the values
that need parsing (``--engine-option KEY=VALUE``, ``--engine-options FILE``,
``--sep``), and the estimator's keyword arguments from the parsed options.
``_cli_hints`` speaks of the same options when it rewrites the estimator's hints."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from .tables import KNOWN_FORMATS, UsageError

__all__ = [
    "BAD_ROWS",
    "LENGTH_NORMS",
    "LOW_MASS",
    "TOO_LONG",
    "add_table_options",
    "engine_options",
    "estimator_params",
    "needs_labels",
    "parse_engine_option",
    "read_engine_options",
    "unescape",
]

# Parameters whose values ``_params`` checks inline (no constant to import);
# tests/test_cli.py checks them against ``_params.PARAMETERS`` and the
# estimator's docstring, so a new value there fails a test here.
LENGTH_NORMS = (None, "token", "char")
LOW_MASS = ("warn", "raise", "ignore")
TOO_LONG = ("truncate", "raise")
#: What ``--bad-rows`` does with a row whose text (or, evaluating, label) is missing or blank.
BAD_ROWS = ("error", "skip", "keep")

# ------------------------------------------------------------ values


def unescape(value: str) -> str:
    r"""Lets ``--prompt 'Review: {text}\nSentiment:'`` mean a line break, as
    shells pass backslash-n through as two characters: ``\n`` is a newline,
    ``\t`` a tab and ``\\`` one backslash; any other backslash stays."""
    return re.sub(r"\\([nt\\])", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], value)


def _chat(value: str) -> bool | str:
    choices = {"false": False, "no": False, "true": True, "yes": True, "auto": "auto"}
    if value.lower() not in choices:
        raise argparse.ArgumentTypeError(f"{value!r}: use true, false or auto")
    return choices[value.lower()]


def _integer(minimum: int) -> Any:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = minimum - 1
        if number < minimum:
            what = "a positive integer" if minimum == 1 else "a non-negative integer"
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return number

    return parse


def _real_below(high: float, what: str) -> Any:
    """A parser of numbers in [0, ``high``); ``what`` describes them in the error."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not 0 <= number < high:
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return number

    return parse


_probability = _real_below(1.0, "a number in [0, 1)")
_nats = _real_below(float("inf"), "a finite number of nats >= 0")


def _separator(value: str) -> str:
    sep = "\t" if value.lower() == "tab" else unescape(value)
    if len(sep) != 1 or sep in '"\r\n':
        raise argparse.ArgumentTypeError(f"{value!r}: give one character, such as ';' or '\\t' (or tab) for a tab")
    return sep


def _none(value: str) -> str | None:
    return None if value == "none" else value


def parse_engine_option(item: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--engine-option``: VALUE as JSON when it parses
    (``2048``, ``true``, ``null``, ``{"level": 0}``), else as the string
    itself (``float32``). A hyphen in KEY is an underscore (vLLM's flag
    spelling, ``max-model-len``, works). Raises UsageError naming ``item``."""
    key, equals, raw = item.partition("=")
    key = key.strip().replace("-", "_")
    if not equals or not re.fullmatch(r"[A-Za-z_]\w*", key):
        raise UsageError(
            f"--engine-option {item!r}: expected KEY=VALUE with KEY a vLLM engine argument, e.g. max_model_len=2048"
        )
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key, value


def read_engine_options(path: str) -> dict[str, Any]:
    """The mapping of vLLM engine arguments in a JSON or TOML file (``.toml``
    is TOML, ``.json`` JSON, any other name whichever parses). Raises
    UsageError naming the file when it cannot be read, does not parse or is
    not a mapping."""
    import tomllib

    where = f"--engine-options {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{where}: it is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: cannot read it: {type(exc).__name__}: {exc}") from None
    suffix = Path(path).suffix.lower()
    parsers = {".json": ["JSON"], ".toml": ["TOML"]}.get(suffix, ["JSON", "TOML"])
    errors = []
    for kind in parsers:
        try:
            data = json.loads(text) if kind == "JSON" else tomllib.loads(text)
            break
        except ValueError as exc:  # json.JSONDecodeError and tomllib.TOMLDecodeError both are
            errors.append(f"not valid {kind} ({exc})")
    else:
        raise UsageError(f"{where}: {'; '.join(errors)}")
    if not isinstance(data, dict):
        raise UsageError(
            f"{where}: holds a {type(data).__name__}, not a mapping of engine arguments "
            'such as {"max_model_len": 2048}'
        )
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def engine_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The engine options of ``--engine-options FILE`` then each
    ``--engine-option KEY=VALUE`` over them (the last of a repeated KEY wins);
    None when there are none."""
    options = read_engine_options(args.engine_options) if args.engine_options is not None else {}
    options.update(parse_engine_option(item) for item in args.engine_option)
    return options or None


def estimator_params(args: argparse.Namespace, options: dict[str, Any] | None) -> dict[str, Any]:
    """``LLMLabelClassifier``'s keyword arguments from the options (all but ``labels``)."""
    return {
        "model": args.model,
        "engine_options": options,
        "prompt": args.prompt,
        "instructions": args.instructions,
        "chat": args.chat,
        "label_mode": args.label_mode,
        "length_norm": _none(args.length_norm),
        "prune_margin": args.prune_margin,
        "few_shot": args.few_shot,
        "calibration": _none(args.calibration),
        "random_state": args.random_state,
        "batch_size": args.batch_size,
        "progress": not args.no_progress,
        "low_mass": args.low_mass,
        "low_mass_threshold": args.low_mass_threshold,
        "too_long": args.too_long,
    }


def needs_labels(args: argparse.Namespace) -> list[str]:
    """The options given that learn from labelled rows (``--few-shot`` above
    0, ``--calibration learned``), as typed."""
    needs = []
    if args.few_shot:
        needs.append(f"--few-shot {args.few_shot}")
    if args.calibration == "learned":
        needs.append("--calibration learned")
    return needs


# ------------------------------------------------------------ parser


def add_table_options(command: argparse.ArgumentParser, *, evaluate: bool) -> None:
    """The options of ``classify`` and ``evaluate``, in groups; defaults and
    choices come from ``LLMLabelClassifier`` and the constants of ``_params``."""
    from ..classifier import LLMLabelClassifier
    from ..fitting.calibration import CALIBRATIONS
    from ..fitting.params import LABEL_MODES
    from ..reading.prompts import DEFAULT_PROMPT

    default = LLMLabelClassifier().get_params()
    calibrations = [_label(c) for c in CALIBRATIONS]

    data = command.add_argument_group("input and output")
    data.add_argument(
        "input", metavar="IN", help=f"the table to classify ({KNOWN_FORMATS}; '-': CSV, or --sep text, on stdin)"
    )
    data.add_argument("--text-column", default="text", help="the column with the texts (default: text)")
    data.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="OUT",
        help=f"where to write the rows with probabilities ({KNOWN_FORMATS}; format by extension)",
    )
    data.add_argument(
        "--sep",
        type=_separator,
        default=None,
        metavar="SEP",
        help="the field separator of every delimited-text file read or written (IN, --train, OUT, the "
        "skipped rows' list, stdin, stdout), e.g. ';' or '\\t'; with it, a file of any other extension "
        "is delimited text (default: ',' for .csv and '-', a tab for .tsv)",
    )
    data.add_argument(
        "--bad-rows",
        choices=BAD_ROWS,
        default="error",
        help="a row whose text (or a prompt field"
        + (", or the label" if evaluate else "")
        + ") is missing or blank: error stops with the rows named; skip leaves them out of the output "
        "and lists them with the reason in a side file; keep leaves them in place with empty "
        "probabilities and the reason in an error column (default: error)",
    )
    data.add_argument(
        "--skipped",
        default=None,
        metavar="FILE",
        help="with --bad-rows skip: where to list the skipped rows (default: OUT's name + .skipped.csv, "
        "or IN's when writing to stdout)",
    )

    model = command.add_argument_group("model and engine")
    model.add_argument("--model", default=default["model"], help="built-in name, local folder or hub id")
    model.add_argument(
        "--engine-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a vLLM engine argument, repeatable: max_model_len=2048, enforce_eager=true, dtype=float32 "
        "(VALUE as JSON when it parses, else text); overrides --engine-options",
    )
    model.add_argument(
        "--engine-options", default=None, metavar="FILE", help="vLLM engine arguments from a JSON or TOML mapping"
    )
    model.add_argument(
        "--batch-size",
        type=_integer(1),
        default=default["batch_size"],
        help=f"texts per engine call (default {default['batch_size']})",
    )
    model.add_argument("--no-progress", action="store_true", help="no progress bar")

    prompt = command.add_argument_group("prompt and reading")
    prompt.add_argument(
        "--prompt",
        default=None,
        type=unescape,
        help=f"template: {{text}} is the text column, {{labels}} the labels listed, any other "
        f"{{field}} the column of that name; \\n is a line break (default: {DEFAULT_PROMPT!r})",
    )
    prompt.add_argument("--instructions", default=None, type=unescape, help="a line put before the prompt")
    prompt.add_argument(
        "--chat", type=_chat, default=default["chat"], help="true, false or auto: use the chat template"
    )
    prompt.add_argument(
        "--label-mode",
        choices=LABEL_MODES,
        default=default["label_mode"],
        help="how a class is scored: its label's first token, its whole label, or lettered options listed "
        f"in the prompt; auto picks first_token when every label is one token (default: {default['label_mode']})",
    )
    prompt.add_argument(
        "--length-norm",
        choices=[_label(n) for n in LENGTH_NORMS],
        default=_label(default["length_norm"]),
        help="divide each label's logprob by its length in tokens or characters "
        f"(default: {_label(default['length_norm'])})",
    )
    prompt.add_argument(
        "--prune-margin",
        type=_nats,
        default=default["prune_margin"],
        metavar="NATS",
        help="many multi-token labels: read only the label prefixes within NATS of the best label "
        "(predictions exact, small probabilities approximate); default: read every prefix",
    )
    prompt.add_argument(
        "--too-long",
        choices=TOO_LONG,
        default=default["too_long"],
        help="a prompt longer than the model reads: cut the text's end with a warning, or stop with "
        f"an error naming the row (default: {default['too_long']})",
    )

    learning = command.add_argument_group("labelled data: few-shot and calibration")
    learning.add_argument(
        "--train",
        default=None,
        metavar="FILE",
        help="labelled rows to fit on (same text, prompt-field and --label-column columns as IN; its rows "
        "must all be good): needed by --few-shot and --calibration learned"
        + ("; IN's labels are only scored, never learned from" if evaluate else ""),
    )
    learning.add_argument(
        "--few-shot",
        type=_integer(0),
        default=default["few_shot"],
        metavar="N",
        help=f"labelled examples per class from --train, written before every text (default: {default['few_shot']})",
    )
    learning.add_argument(
        "--calibration",
        choices=calibrations,
        default=_label(default["calibration"]),
        help="remove the model's label bias: contextual (content-free inputs), batch (the texts' mean), "
        f"learned (a logistic regression on --train) (default: {_label(default['calibration'])})",
    )
    learning.add_argument(
        "--random-state",
        type=_integer(0),
        default=default["random_state"],
        metavar="N",
        help="seed for drawing few-shot examples and calibration folds (default: a fresh draw each run)",
    )

    checks = command.add_argument_group("checks")
    checks.add_argument(
        "--low-mass",
        choices=LOW_MASS,
        default=default["low_mass"],
        help="when the labels' total probability for a text is below --low-mass-threshold "
        f"(default: {default['low_mass']})",
    )
    checks.add_argument(
        "--low-mass-threshold",
        type=_probability,
        default=default["low_mass_threshold"],
        metavar="P",
        help=f"see --low-mass (default: {default['low_mass_threshold']:g})",
    )


def _label(value: str | None) -> str:
    return "none" if value is None else value

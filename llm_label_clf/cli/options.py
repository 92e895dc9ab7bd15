"""The options of ``classify`` and ``evaluate``: their parser (defaults and
choices taken from the estimator and ``fitting.params``, not repeated), the values
that need parsing (``--engine-option KEY=VALUE``, ``--engine-options FILE``,
``--sep``), and the estimator's keyword arguments from the parsed options.
``hints`` speaks of the same options when it rewrites the estimator's hints."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
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

# Parameters whose values ``fitting.params`` checks inline (no constant to import);
# tests/test_cli.py checks them against ``PARAMETERS`` and the
# estimator's docstring, so a new value there fails a test here.
LENGTH_NORMS = (None, "token", "char")
LOW_MASS = ("warn", "raise", "ignore")
TOO_LONG = ("truncate", "raise")
#: What ``--bad-rows`` does with a row whose text (or, evaluating, label) is missing or blank.
BAD_ROWS = ("error", "skip", "keep")
#: The estimator parameters whose options are passed on as parsed.
_AS_PARSED = (
    "model", "prompt", "instructions", "chat", "label_mode", "label_words", "prune_margin", "few_shot", "random_state",
    "batch_size", "low_mass", "low_mass_threshold", "too_long", "read_store",
)  # fmt: skip

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


def _number(kind: type, ok: Callable[[Any], bool], what: str) -> Any:
    """A parser of ``kind`` numbers that pass ``ok``; ``what`` describes them in the error."""

    def parse(value: str) -> Any:
        try:
            number = kind(value)
        except ValueError:
            number = None
        if number is None or not ok(number):
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return number

    return parse


_positive = _number(int, lambda n: n >= 1, "a positive integer")
_count = _number(int, lambda n: n >= 0, "a non-negative integer")
_probability = _number(float, lambda p: 0 <= p < 1, "a number in [0, 1)")
_nats = _number(float, lambda x: 0 <= x < float("inf"), "a finite number of nats >= 0")


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
    params = {name: getattr(args, name) for name in _AS_PARSED}
    return {
        **params,
        "engine_options": options,
        "length_norm": _none(args.length_norm),
        "calibration": _none(args.calibration),
        "progress": not args.no_progress,
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
    choices come from ``LLMLabelClassifier`` and the constants of ``fitting.params``."""
    from ..classifier import LLMLabelClassifier
    from ..fitting.calibration import CALIBRATIONS
    from ..fitting.label_words import LABEL_WORDS
    from ..fitting.params import LABEL_MODES
    from ..reading.prompts import DEFAULT_PROMPT

    default = LLMLabelClassifier().get_params()

    def option(group: Any, flag: str, help: str, shown: str | None = None, **kwargs: Any) -> None:
        """An option defaulting to the estimator's value (None typed as 'none'), said after ``help``
        (or ``shown``, what it means)."""
        value = default[flag[2:].replace("-", "_")]
        value = _label(value) if "choices" in kwargs else value
        if shown is None:
            shown = f"{value:g}" if isinstance(value, float) else value
        group.add_argument(flag, default=value, help=f"{help} (default: {shown})", **kwargs)

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
    data.add_argument(
        "--resume",
        action="store_true",
        help="continue OUT where a stopped run left it (checked against IN and the options, by OUT's "
        ".progress.json); a run that is not there yet starts",
    )
    data.add_argument("--overwrite", action="store_true", help="replace OUT (and the skipped rows' list) if there")
    data.add_argument(
        "--chunk-rows",
        type=_positive,
        default=None,
        metavar="N",
        help="rows read, classified and written at a time: what a kill can lose (default: 1000; "
        "resuming: the stopped run's)",
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
        "--read-store",
        default=None,
        metavar="PATH",
        help="a persistent store of label reads (SQLite file, created on first use): rows read before with the "
        "same model and settings are not read again (default: $LLM_LABEL_CLF_READ_STORE, else none); "
        "see: llm-label-clf store info PATH",
    )
    option(model, "--batch-size", "texts per engine call", type=_positive)
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
    chat = "true, false or auto: use the chat template"
    option(prompt, "--chat", chat, shown=str(default["chat"]).lower(), type=_chat)
    option(
        prompt,
        "--label-mode",
        "how a class is scored: its label's first token, its whole label, its label as the model would "
        "choose it among the labels (constrained: reads only where labels branch), or lettered options "
        "listed in the prompt; auto picks first_token when every label is one token",
        choices=LABEL_MODES,
    )
    option(
        prompt,
        "--label-words",
        "how labels are written for the model: words writes identifiers as words (card_arrival as "
        "'card arrival'), as Python's label_words does; as_is keeps them as typed; auto is words",
        choices=LABEL_WORDS,
    )
    option(
        prompt,
        "--length-norm",
        "divide each label's logprob by its length in tokens or characters",
        choices=[_label(n) for n in LENGTH_NORMS],
    )
    option(
        prompt,
        "--prune-margin",
        "many multi-token labels: read only the label prefixes within NATS of the best label "
        "(predictions exact, small probabilities approximate)",
        shown="read every prefix",
        type=_nats,
        metavar="NATS",
    )
    option(
        prompt,
        "--too-long",
        "a prompt longer than the model reads: cut the text's end with a warning, or stop with an error "
        "naming the row",
        choices=TOO_LONG,
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
    few_shot = "labelled examples per class from --train, written before every text"
    option(learning, "--few-shot", few_shot, type=_count, metavar="N")
    option(
        learning,
        "--calibration",
        "remove the model's label bias: auto (tempered, aimed at the class prior; fitted on --train, "
        "else on 256 rows drawn from the input), none (the engine's exact reads), contextual "
        "(content-free inputs), batch (each chunk's mean), learned (a logistic regression on --train)",
        choices=[_label(c) for c in CALIBRATIONS],
    )
    seed = "seed for drawing few-shot examples and calibration folds"
    option(learning, "--random-state", seed, shown="a fresh draw each run", type=_count, metavar="N")

    checks = command.add_argument_group("checks")
    low_mass = "when the labels' total probability for a text is below --low-mass-threshold"
    option(checks, "--low-mass", low_mass, choices=LOW_MASS)
    option(checks, "--low-mass-threshold", "see --low-mass", type=_probability, metavar="P")


def _label(value: str | None) -> str:
    return "none" if value is None else value

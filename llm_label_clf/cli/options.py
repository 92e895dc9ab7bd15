"""The options of ``classify`` and ``evaluate``, declared once (``_declared``:
defaults and choices come from the estimator and ``fitting``), the values
that need parsing, and the estimator's keyword arguments from them."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..fitting.params import LENGTH_NORMS, LOW_MASS, TOO_LONG
from .tables import KNOWN_FORMATS, UsageError

__all__ = [
    "BAD_ROWS", "LENGTH_NORMS", "LOW_MASS", "TOO_LONG", "add_table_options", "engine_options", "estimator_params",
    "needs_labels", "parse_engine_option", "read_engine_options", "unescape",
]  # fmt: skip

#: What ``--bad-rows`` does with a row whose text (or, evaluating, label) is missing or blank.
BAD_ROWS = ("error", "skip", "keep")
#: The estimator parameters whose options are passed on as parsed.
_AS_PARSED = (
    "model", "prompt", "instructions", "chat", "label_mode", "label_words", "prune_margin", "few_shot", "random_state",
    "batch_size", "low_mass", "low_mass_threshold", "too_long", "read_store",
)  # fmt: skip
#: An option's default that is the estimator's (None typed as 'none'), said in its help.
_ESTIMATOR = object()
#: The parameters whose None is typed 'none' among their choices.
_TYPED_NONE = ("length_norm", "calibration")


def unescape(value: str) -> str:
    r"""Lets ``--prompt 'Review: {text}\nSentiment:'`` mean a line break, as
    shells pass backslash-n through as two characters: ``\n`` is a newline,
    ``\t`` a tab and ``\\`` one backslash; any other backslash stays."""
    return re.sub(r"\\([nt\\])", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], value)


def _value(parse: Callable[[str], Any], ok: Callable[[Any], bool], what: str) -> Callable[[str], Any]:
    """An argparse type: ``parse(value)`` when it passes ``ok``, else an error saying the value is not ``what``."""

    def checked(value: str) -> Any:
        try:
            parsed = parse(value)
        except (ValueError, KeyError):
            parsed = None
        if parsed is None or not ok(parsed):
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return parsed

    return checked


_positive = _value(int, lambda n: n >= 1, "a positive integer")
_count = _value(int, lambda n: n >= 0, "a non-negative integer")
_probability = _value(float, lambda p: 0 <= p < 1, "a number in [0, 1)")
_nats = _value(float, lambda x: 0 <= x < float("inf"), "a finite number of nats >= 0")
_CHAT = {"false": False, "no": False, "true": True, "yes": True, "auto": "auto"}
_chat = _value(lambda v: _CHAT[v.lower()], lambda _: True, "true, false or auto")
_separator = _value(
    lambda v: "\t" if v.lower() == "tab" else unescape(v), lambda s: len(s) == 1 and s not in '"\r\n',
    "one character, such as ';' or '\\t' (or tab) for a tab",
)  # fmt: skip


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
        return key, json.loads(raw)
    except ValueError:
        return key, raw


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
    parsers = {"JSON": json.loads, "TOML": tomllib.loads}
    kinds = {".json": ["JSON"], ".toml": ["TOML"]}.get(Path(path).suffix.lower(), ["JSON", "TOML"])
    errors = []
    for kind in kinds:
        try:
            data = parsers[kind](text)
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
    typed = {name: None if getattr(args, name) == "none" else getattr(args, name) for name in _TYPED_NONE}
    return {**params, **typed, "engine_options": options, "progress": not args.no_progress}


def _typed(value: str | None) -> str:
    """A choice as typed: None is 'none'."""
    return "none" if value is None else value


def needs_labels(args: argparse.Namespace) -> list[str]:
    """The options given that learn from labelled rows (``--few-shot`` above
    0, ``--calibration learned``), as typed."""
    needs = [f"--few-shot {args.few_shot}"] if args.few_shot else []
    return needs + (["--calibration learned"] if args.calibration == "learned" else [])


def _declared(evaluate: bool) -> list[tuple[str, str, str, dict[str, Any]]]:
    """Every option of ``classify`` (or ``evaluate``) as (group, flags, help,
    argparse keywords), in help order; a default of ``_ESTIMATOR`` is the estimator's."""
    from ..fitting.calibration import CALIBRATIONS
    from ..fitting.label_words import LABEL_WORDS
    from ..fitting.params import LABEL_MODES
    from ..reading.prompts import DEFAULT_PROMPT

    est, io, model, prompt = _ESTIMATOR, "input and output", "model and engine", "prompt and reading"
    learn = "labelled data: few-shot and calibration"
    none = {"length_norm": [_typed(v) for v in LENGTH_NORMS], "calibration": [_typed(v) for v in CALIBRATIONS]}
    return [
        (io, "input", f"the table to classify ({KNOWN_FORMATS}; '-': CSV, or --sep text, on stdin)", {"metavar": "IN"}),
        (io, "--text-column", "the column with the texts (default: text)", {"default": "text"}),
        (io, "-o --output", f"where to write the rows with probabilities ({KNOWN_FORMATS}; format by extension)",
         {"metavar": "OUT"}),
        (io, "--sep", "the field separator of every delimited-text file read or written (IN, --train, OUT, the "
         "skipped rows' list, stdin, stdout), e.g. ';' or '\\t'; with it, a file of any other extension is delimited "
         "text (default: ',' for .csv and '-', a tab for .tsv)", {"type": _separator, "metavar": "SEP"}),
        (io, "--bad-rows", f"a row whose text (or a prompt field{', or the label' if evaluate else ''}) is missing or "
         "blank: error stops with the rows named; skip leaves them out of the output and lists them with the reason "
         "in a side file; keep leaves them in place with empty probabilities and the reason in an error column "
         "(default: error)", {"choices": BAD_ROWS, "default": "error"}),
        (io, "--skipped", "with --bad-rows skip: where to list the skipped rows (default: OUT's name + .skipped.csv, "
         "or IN's when writing to stdout)", {"metavar": "FILE"}),
        (io, "--resume", "continue OUT where a stopped run left it (checked against IN and the options, by OUT's "
         ".progress.json); a run that is not there yet starts", {"action": "store_true"}),
        (io, "--overwrite", "replace OUT (and the skipped rows' list) if there", {"action": "store_true"}),
        (io, "--chunk-rows", "rows read, classified and written at a time: what a kill can lose (default: 1000; "
         "resuming: the stopped run's)", {"type": _positive, "metavar": "N"}),
        (model, "--model", "built-in name, local folder or hub id", {"default": est}),
        (model, "--engine-option", "a vLLM engine argument, repeatable: max_model_len=2048, enforce_eager=true, "
         "dtype=float32 (VALUE as JSON when it parses, else text); overrides --engine-options",
         {"action": "append", "default": [], "metavar": "KEY=VALUE"}),
        (model, "--engine-options", "vLLM engine arguments from a JSON or TOML mapping", {"metavar": "FILE"}),
        (model, "--read-store", "a persistent store of label reads (SQLite file, created on first use): rows read "
         "before with the same model and settings are not read again (default: $LLM_LABEL_CLF_READ_STORE, else "
         "none); see: llm-label-clf store info PATH", {"metavar": "PATH"}),
        (model, "--batch-size", "texts per engine call", {"default": est, "type": _positive}),
        (model, "--no-progress", "no progress bar", {"action": "store_true"}),
        (prompt, "--prompt", f"template: {{text}} is the text column, {{labels}} the labels listed, any other "
         f"{{field}} the column of that name; \\n is a line break (default: {DEFAULT_PROMPT!r})", {"type": unescape}),
        (prompt, "--instructions", "a line put before the prompt", {"type": unescape}),
        (prompt, "--chat", "true, false or auto: use the chat template", {"default": est, "type": _chat}),
        (prompt, "--label-mode", "how a class is scored: its label's first token, its whole label, its label as the "
         "model would choose it among the labels (constrained: reads only where labels branch), or lettered options "
         "listed in the prompt; auto picks first_token when every label is one token",
         {"default": est, "choices": LABEL_MODES}),
        (prompt, "--label-words", "how labels are written for the model: words writes identifiers as words "
         "(card_arrival as 'card arrival'), as Python's label_words does; as_is keeps them as typed; auto is words",
         {"default": est, "choices": LABEL_WORDS}),
        (prompt, "--length-norm", "divide each label's logprob by its length in tokens or characters",
         {"default": est, "choices": none["length_norm"]}),
        (prompt, "--prune-margin", "many multi-token labels: read only the label prefixes within NATS of the best "
         "label (predictions exact, small probabilities approximate) (default: read every prefix)",
         {"type": _nats, "metavar": "NATS"}),
        (prompt, "--too-long", "a prompt longer than the model reads: cut the text's end with a warning, or stop "
         "with an error naming the row", {"default": est, "choices": TOO_LONG}),
        (learn, "--train", "labelled rows to fit on (same text, prompt-field and --label-column columns as IN; its "
         "rows must all be good): needed by --few-shot and --calibration learned"
         + ("; IN's labels are only scored, never learned from" if evaluate else ""), {"metavar": "FILE"}),
        (learn, "--few-shot", "labelled examples per class from --train, written before every text",
         {"default": est, "type": _count, "metavar": "N"}),
        (learn, "--calibration", "remove the model's label bias: auto (tempered, aimed at the class prior; fitted on "
         "--train, else on 256 rows drawn from the input), none (the engine's exact reads), contextual (content-free "
         "inputs), batch (each chunk's mean), learned (a logistic regression on --train)",
         {"default": est, "choices": none["calibration"]}),
        (learn, "--random-state", "seed for drawing few-shot examples and calibration folds (default: a fresh draw "
         "each run)", {"type": _count, "metavar": "N"}),
        ("checks", "--low-mass", "when the labels' total probability for a text is below --low-mass-threshold",
         {"default": est, "choices": LOW_MASS}),
        ("checks", "--low-mass-threshold", "see --low-mass", {"default": est, "type": _probability, "metavar": "P"}),
        ("classes", "--labels", "the classes, comma-separated"
         + (" (default: the label column's values, sorted, with --train's)" if evaluate else ": a,b,c (required "
            "without --train; with it, default: its label column's values, sorted)"), {}),
        ("classes", "--label-column", ("the column with the true labels, in IN and --train" if evaluate else
         "the column of --train with the true labels") + " (default: label)", {"default": "label"}),
    ]  # fmt: skip


def add_table_options(command: argparse.ArgumentParser, *, evaluate: bool) -> None:
    """The options of ``classify`` and ``evaluate``, in groups (see ``_declared``)."""
    from ..classifier import LLMLabelClassifier

    default, groups = LLMLabelClassifier().get_params(), {}
    for group, flags, help, kwargs in _declared(evaluate):
        if group not in groups:
            groups[group] = command.add_argument_group(group)
        if kwargs.get("default") is _ESTIMATOR:
            value = default[flags.split()[-1][2:].replace("-", "_")]
            value = _typed(value) if "choices" in kwargs else value
            shown = str(value).lower() if isinstance(value, bool) else value
            shown = f"{value:g}" if isinstance(value, float) else shown
            kwargs, help = {**kwargs, "default": value}, f"{help} (default: {shown})"
        groups[group].add_argument(*flags.split(), help=help, **kwargs)

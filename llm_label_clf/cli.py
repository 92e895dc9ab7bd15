"""The ``llm-label-clf`` command (also ``python -m llm_label_clf``).

Commands: ``classify`` (a table in, the same table plus each class's
probability and the predicted class out), ``evaluate`` (a labelled table in, a
classification report out) and ``demo`` (zero-shot SST-2 with the built-in model).

Exit codes: 0 success; 2 a usage or input error (a missing column, an
unreadable, empty or unknown-format file, bad labels or prompt); 1 the engine
failed (it could not start, or a read failed); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]

DEMO_INSTRUCTIONS = "Classify the sentiment of each movie review."
DEMO_PROMPT = "Review: {text}\nSentiment:"

EXIT_OK, EXIT_ENGINE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

#: File formats by extension (after an optional compression suffix for CSV and JSON).
_FORMATS = {
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
}
_COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst", ".zip")
_KNOWN = ".csv, .parquet, .jsonl (or .json); CSV and JSON may end in " + ", ".join(_COMPRESSIONS)


class UsageError(Exception):
    """Bad arguments or input: reported on stderr, exit status 2."""


class EngineFailure(Exception):
    """The engine could not start or a read failed: exit status 1."""


# ---------------------------------------------------------------- demo


def _demo(args: argparse.Namespace) -> int:
    import pandas as pd

    from .classifier import LLMLabelClassifier

    try:
        frame = pd.read_csv(args.data)
    except (OSError, ValueError) as exc:
        print(f"llm-label-clf demo: cannot read {args.data}: {exc}", file=sys.stderr)
        return 2
    if args.limit:
        frame = frame.iloc[: args.limit]
    texts, y = frame["text"].tolist(), frame["label"].to_numpy()
    clf = LLMLabelClassifier(model=args.model, prompt=args.prompt, instructions=args.instructions or None)
    print(f"Classifying {len(texts)} texts from {args.data} with {args.model} ...", flush=True)
    start = time.perf_counter()
    clf.fit(texts, y)
    started = time.perf_counter()
    proba = clf.predict_proba(texts)
    elapsed = time.perf_counter() - started
    _print_report(y, clf.classes_[proba.argmax(axis=1)], proba, clf.classes_)
    print(
        f"{len(texts) / elapsed:.1f} texts/s on predict_proba "
        f"(engine start and fit: {started - start:.1f} s)"
    )
    return 0


def _print_report(gold: Any, pred: Any, proba: Any, classes: Any, labels: Sequence[str] | None = None) -> None:
    """scikit-learn's classification report, then accuracy and log-loss.
    ``proba``'s columns are in ``classes`` order (sorted, as log_loss reads them)."""
    from sklearn.metrics import accuracy_score, classification_report, log_loss

    print(classification_report(gold, pred, labels=labels, digits=3, zero_division=0))
    print(f"accuracy {accuracy_score(gold, pred):.3f}  log-loss {log_loss(gold, proba, labels=classes):.3f}")


# ------------------------------------------------------------ tables


def _format_of(path: str, role: str) -> str:
    """The table format of ``path`` by its extension ("-" is CSV on stdin/stdout)."""
    if path == "-":
        return "csv"
    suffixes = [s.lower() for s in Path(path).suffixes]
    compressed = bool(suffixes) and suffixes[-1] in _COMPRESSIONS
    if compressed:
        suffixes = suffixes[:-1]
    fmt = _FORMATS.get(suffixes[-1]) if suffixes else None
    if fmt is None or (compressed and fmt == "parquet"):
        raise UsageError(f"{role} {path}: unknown format (by its extension); use {_KNOWN}")
    return fmt


def _need_pyarrow(path: str) -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise UsageError(f"{path}: Parquet needs pyarrow, which is not installed (pip install pyarrow)") from None


def _read_table(path: str, string_columns: Sequence[str]) -> Any:
    """Reads CSV, Parquet or JSON Lines by extension. CSV and JSON cells are
    kept as written: only an empty CSV field is missing (``NA`` or ``null`` in
    a review is text), and JSON strings are never converted to numbers or dates."""
    import pandas as pd

    fmt = _format_of(path, "input")
    source: Any = sys.stdin if path == "-" else path
    if path != "-":
        p = Path(path)
        if not p.exists():
            raise UsageError(f"cannot read {path}: no such file")
        if p.is_dir():
            raise UsageError(f"cannot read {path}: it is a directory, not a file")
    if fmt == "parquet":
        _need_pyarrow(path)
    try:
        if fmt == "csv":
            frame = pd.read_csv(
                source, dtype={c: str for c in string_columns}, keep_default_na=False, na_values=[""]
            )
        elif fmt == "parquet":
            frame = pd.read_parquet(source)
        elif fmt == "jsonl":
            frame = pd.read_json(source, lines=True, dtype=False, convert_dates=False)
        else:  # .json: JSON Lines, or else one array of records
            try:
                frame = pd.read_json(source, lines=True, dtype=False, convert_dates=False)
            except ValueError:
                frame = pd.read_json(source, dtype=False, convert_dates=False)
    except pd.errors.EmptyDataError:
        raise UsageError(f"{path} is empty: no header and no rows") from None
    except (OSError, ValueError, ImportError) as exc:  # parser, decoding and Arrow errors are ValueErrors
        kind = {"csv": "CSV", "parquet": "Parquet", "jsonl": "JSON Lines", "json": "JSON"}[fmt]
        raise UsageError(f"cannot read {path} as {kind}: {type(exc).__name__}: {exc}") from None
    if not isinstance(frame, pd.DataFrame):  # a JSON file holding one scalar or a list of scalars
        raise UsageError(f"cannot read {path} as a table of records")
    if len(frame) == 0:
        raise UsageError(f"{path} has no rows: nothing to classify")
    return frame.reset_index(drop=True)


def _check_output(path: str | None) -> str | None:
    """Checks before any work that the output can be written; returns its format."""
    if path is None:
        return None
    fmt = _format_of(path, "output")
    if path == "-":
        return fmt
    parent = Path(path).parent
    if not parent.is_dir():
        raise UsageError(f"cannot write {path}: folder {parent} does not exist")
    if Path(path).is_dir():
        raise UsageError(f"cannot write {path}: it is a directory")
    if fmt == "parquet":
        _need_pyarrow(path)
    return fmt


def _write_table(frame: Any, path: str | None) -> None:
    if path is None or path == "-":
        try:
            frame.to_csv(sys.stdout, index=False)
            sys.stdout.flush()
        except BrokenPipeError:  # e.g. piped into `head`: the reader has what it wanted
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    fmt = _format_of(path, "output")
    try:
        if fmt == "csv":
            frame.to_csv(path, index=False)
        elif fmt == "parquet":
            frame.to_parquet(path, index=False)
        elif fmt == "jsonl":
            frame.to_json(path, orient="records", lines=True, force_ascii=False)
        else:
            frame.to_json(path, orient="records", force_ascii=False, indent=1)
    except (OSError, ValueError, ImportError) as exc:
        raise UsageError(f"cannot write {path}: {type(exc).__name__}: {exc}") from None


def _require_column(frame: Any, column: str, path: str, option: str) -> None:
    if column not in frame.columns:
        have = ", ".join(repr(str(c)) for c in frame.columns)
        raise UsageError(f"{path} has no column {column!r} (its columns: {have}); name the right one with {option}")


def _as_strings(frame: Any, column: str, path: str, what: str) -> Any:
    """The column as strings; a missing cell is an error naming its row."""
    series = frame[column]
    missing = series.isna().to_numpy().nonzero()[0]
    if missing.size:
        shown = ", ".join(str(i) for i in missing[:5]) + (", ..." if missing.size > 5 else "")
        raise UsageError(
            f"{path}: {missing.size} row(s) have no {what} in column {column!r} "
            f"(rows {shown}, counting data rows from 0); fill or drop them"
        )
    return series.map(lambda v: v if isinstance(v, str) else str(v))


def _parse_labels(spec: str) -> list[str]:
    labels = [part.strip() for part in spec.split(",")]
    if any(not label for label in labels):
        raise UsageError(f"--labels {spec!r} has an empty label; give them as a,b,c")
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise UsageError(f"--labels {spec!r} repeats {', '.join(duplicates)}")
    if len(labels) < 2:
        raise UsageError(f"--labels {spec!r} has one label; a classifier needs at least two")
    return labels


# --------------------------------------------------------- classifying


def _prompt_inputs(frame: Any, args: argparse.Namespace) -> Any:
    """The estimator's X: a DataFrame with one column per prompt field. ``{text}``
    is filled from ``--text-column``; any other field from the column of that name."""
    import pandas as pd

    from .prompts import DEFAULT_PROMPT, LABELS_FIELD, PromptTemplate

    try:
        template = PromptTemplate.parse(DEFAULT_PROMPT if args.prompt is None else args.prompt)
    except ValueError as exc:
        raise UsageError(f"--prompt: {exc}") from None
    fields = [f for f in template.fields if f != LABELS_FIELD]
    columns = {}
    for field in fields:
        column = args.text_column if field == "text" else field
        if field != "text":
            _require_column(frame, column, args.input, f"the prompt's {{{field}}} field")
        columns[field] = _as_strings(frame, column, args.input, "text" if field == "text" else f"{{{field}}}")
    return pd.DataFrame(columns)


def _classify_frame(frame: Any, labels: list[str], args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """Fits a zero-shot classifier on ``labels`` and classifies every row.

    Zero-shot needs no labelled data, but ``fit`` still needs ``y`` (it sets
    ``classes_``) and rendered rows (it checks each label is one token after
    the prompt). So ``fit`` gets ``y = labels`` against the first
    ``len(labels)`` rows of X, cycling over them when there are fewer rows
    than labels. Nothing is learned from those rows' texts.

    Returns (proba with columns in ``labels`` order, predicted classes, classifier).
    """
    import numpy as np

    from .classifier import LLMLabelClassifier
    from .engine import get_engine
    from .exceptions import LowLabelMassWarning

    X = _prompt_inputs(frame, args)
    clf = LLMLabelClassifier(
        model=args.model,
        prompt=args.prompt,
        instructions=args.instructions,
        chat=args.chat,
        batch_size=args.batch_size,
        progress=not args.no_progress,
        low_mass=args.low_mass,
    )
    print(f"Classifying {len(X)} texts from {args.input} with {args.model} ...", file=sys.stderr, flush=True)
    try:
        get_engine(args.model)
    except Exception as exc:
        raise EngineFailure(f"cannot start the engine for model {args.model!r}: {type(exc).__name__}: {exc}") from exc
    fit_rows = [i % len(X) for i in range(len(labels))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            clf.fit(X.iloc[fit_rows].reset_index(drop=True), np.array(labels, dtype=object))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        try:
            proba = clf.predict_proba(X)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        except Exception as exc:
            raise EngineFailure(f"the engine failed: {type(exc).__name__}: {exc}") from exc
    for w in caught:  # ours said plainly on stderr; anything else goes back to the warning filters
        if issubclass(w.category, LowLabelMassWarning):
            print(f"llm-label-clf {args.command}: warning: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    classes = clf.classes_.tolist()
    predicted = clf.classes_[proba.argmax(axis=1)]
    order = [classes.index(label) for label in labels]
    return proba[:, order], predicted, clf


def _with_predictions(frame: Any, labels: list[str], proba: Any, predicted: Any, command: str) -> Any:
    out = frame.copy()
    new = [f"proba_{label}" for label in labels] + ["predicted"]
    clash = [c for c in new if c in out.columns]
    if clash:
        print(f"llm-label-clf {command}: note: replacing the input's column(s) {', '.join(clash)}", file=sys.stderr)
        out = out.drop(columns=clash)
    for k, column in enumerate(new[:-1]):
        out[column] = proba[:, k]
    out["predicted"] = predicted
    return out


def _classify(args: argparse.Namespace) -> int:
    labels = _parse_labels(args.labels)
    _check_output(args.output)
    frame = _read_table(args.input, [args.text_column])
    _require_column(frame, args.text_column, args.input, "--text-column")
    proba, predicted, _ = _classify_frame(frame, labels, args)
    _write_table(_with_predictions(frame, labels, proba, predicted, "classify"), args.output)
    if args.output not in (None, "-"):
        print(f"Wrote {len(frame)} rows to {args.output}", file=sys.stderr)
    return EXIT_OK


def _evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    labels = _parse_labels(args.labels) if args.labels is not None else None
    _check_output(args.output)
    frame = _read_table(args.input, [args.text_column, args.label_column])
    _require_column(frame, args.text_column, args.input, "--text-column")
    _require_column(frame, args.label_column, args.input, "--label-column")
    gold = _as_strings(frame, args.label_column, args.input, "label").to_numpy(dtype=object)
    if labels is None:
        labels = sorted(set(gold))
        if len(labels) < 2:
            raise UsageError(
                f"{args.input}: column {args.label_column!r} has one class ({labels[0]!r}); "
                "pass every class with --labels a,b,c"
            )
    else:
        unknown = sorted(set(gold) - set(labels))
        if unknown:
            raise UsageError(
                f"{args.input}: column {args.label_column!r} has label(s) {', '.join(map(repr, unknown))} "
                f"that are not in --labels {args.labels!r}"
            )
    proba, predicted, clf = _classify_frame(frame, labels, args)
    # log_loss reads y_pred's columns in sorted-label order, which clf.classes_ is
    sorted_proba = proba[:, [labels.index(c) for c in clf.classes_.tolist()]]
    _print_report(gold, np.asarray(predicted, dtype=object), sorted_proba, clf.classes_, labels)
    if args.output is not None:
        _write_table(_with_predictions(frame, labels, proba, predicted, "evaluate"), args.output)
        if args.output != "-":
            print(f"Wrote {len(frame)} rows to {args.output}", file=sys.stderr)
    return EXIT_OK


# ------------------------------------------------------------ parser


def _unescape(value: str) -> str:
    r"""Lets ``--prompt 'Review: {text}\nSentiment:'`` mean a line break, as
    shells pass backslash-n through as two characters: ``\n`` is a newline,
    ``\t`` a tab and ``\\`` one backslash; any other backslash stays."""
    import re

    return re.sub(r"\\([nt\\])", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], value)


def _chat(value: str) -> bool | str:
    choices = {"false": False, "no": False, "true": True, "yes": True, "auto": "auto"}
    if value.lower() not in choices:
        raise argparse.ArgumentTypeError(f"{value!r}: use true, false or auto")
    return choices[value.lower()]


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive integer")
    return number


def _add_model_options(command: argparse.ArgumentParser) -> None:
    from .prompts import DEFAULT_PROMPT

    command.add_argument("input", metavar="IN", help=f"the table to classify ({_KNOWN}; '-': CSV on stdin)")
    command.add_argument("--text-column", default="text", help="the column with the texts (default: text)")
    command.add_argument("--model", default="smollm2-135m-instruct", help="built-in name, local folder or hub id")
    command.add_argument(
        "--prompt",
        default=None,
        type=_unescape,
        help=f"template: {{text}} is the text column, {{labels}} the labels listed, any other "
        f"{{field}} the column of that name; \\n is a line break (default: {DEFAULT_PROMPT!r})",
    )
    command.add_argument("--instructions", default=None, type=_unescape, help="a line put before the prompt")
    command.add_argument("--chat", type=_chat, default=False, help="true, false or auto: use the chat template")
    command.add_argument("--batch-size", type=_positive_int, default=512, help="texts per engine call (default 512)")
    command.add_argument(
        "--low-mass",
        choices=("warn", "raise", "ignore"),
        default="warn",
        help="when the labels' total probability for a text is below 1e-4 (default: warn)",
    )
    command.add_argument("--no-progress", action="store_true", help="no progress bar")
    command.add_argument(
        "-o", "--output", default=None, metavar="OUT",
        help=f"where to write the rows with probabilities ({_KNOWN}; format by extension)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llm-label-clf",
        description="Any causal LLM served by vLLM as a zero-shot text classifier.",
        epilog="Exit status: 0 ok, 2 usage or input error, 1 engine failure.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    classify = commands.add_parser(
        "classify",
        help="add each class's probability and the predicted class to a table",
        description="Reads IN and writes its rows plus one proba_<label> column per label and a "
        "predicted column (to OUT, or as CSV on stdout).",
    )
    _add_model_options(classify)
    classify.add_argument("--labels", required=True, help="the classes, comma-separated: a,b,c")
    classify.set_defaults(handler=_classify)

    evaluate = commands.add_parser(
        "evaluate",
        help="classify a labelled table and print a classification report",
        description="Classifies IN and prints scikit-learn's classification report, accuracy and log-loss.",
    )
    _add_model_options(evaluate)
    evaluate.add_argument("--label-column", default="label", help="the column with the true labels (default: label)")
    evaluate.add_argument(
        "--labels", default=None, help="the classes, comma-separated (default: the label column's values, sorted)"
    )
    evaluate.set_defaults(handler=_evaluate)

    demo = commands.add_parser("demo", help="zero-shot SST-2 sentiment with the built-in model")
    demo.add_argument("--data", default="../shared/datasets/sst2_dev.csv", help="CSV with text,label columns")
    demo.add_argument("--model", default="smollm2-135m-instruct")
    demo.add_argument("--prompt", default=DEMO_PROMPT)
    demo.add_argument("--instructions", default=DEMO_INSTRUCTIONS)
    demo.add_argument("--limit", type=int, default=0, help="only the first N rows (0: all)")
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except UsageError as exc:
        print(f"llm-label-clf {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except EngineFailure as exc:
        print(f"llm-label-clf {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ENGINE
    except KeyboardInterrupt:
        print(f"llm-label-clf {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())

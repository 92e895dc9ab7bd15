"""The ``llm-label-clf`` command (also ``python -m llm_label_clf``).

Commands: ``classify`` (a table in, the same table plus each class's
probability and the predicted class out), ``evaluate`` (a labelled table in, a
classification report out) and ``demo`` (zero-shot SST-2 with the built-in model).

``classify`` and ``evaluate`` read and write CSV, TSV, Parquet and JSON Lines
by extension (``--sep``: any delimited text, stdin included). They are
zero-shot unless ``--train FILE`` gives labelled rows to fit on, which
``--few-shot N`` and ``--calibration learned`` need; ``--label-mode``,
``--length-norm``, ``--too-long`` and ``--low-mass`` set the estimator's
parameters of those names, and ``--engine-option KEY=VALUE`` (repeatable,
over ``--engine-options FILE``) its vLLM engine arguments. A row whose text
(evaluating: or label) is missing or blank stops the command
(``--bad-rows error``), is left out and listed in a side file (``skip``), or
stays in place unclassified with the reason in an ``error`` column (``keep``);
the output's rows are always in the input's order. The estimator's hints are
printed in option syntax (``--low-mass ignore``, not ``low_mass='ignore'``),
naming rows of the input (``_cli_hints``).

Exit codes: 0 success; 2 a usage or input error (a missing column, an
unreadable, empty or unknown-format file, bad labels, prompt or engine
options, a bad row under ``--bad-rows error``); 1 the engine failed (it could
not start, or a read failed); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .hints import OPTION_OF, cli_hint, engine_hint
from .options import add_table_options, engine_options, estimator_params, needs_labels
from .rows import announce_bad_rows, good_rows, skipped_target, with_predictions
from .tables import (
    UsageError,
    as_strings,
    check_cells,
    check_output,
    parse_labels,
    read_table,
    require_column,
    write_table,
)

__all__ = ["build_parser", "main"]

DEMO_INSTRUCTIONS = "Classify the sentiment of each movie review."
DEMO_PROMPT = "Review: {text}\nSentiment:"

EXIT_OK, EXIT_ENGINE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class EngineFailure(Exception):
    """The engine could not start or a read failed: exit status 1."""


# ---------------------------------------------------------------- demo


def _demo(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..classifier import LLMLabelClassifier

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
    print(f"{len(texts) / elapsed:.1f} texts/s on predict_proba (engine start and fit: {started - start:.1f} s)")
    return 0


def _print_report(gold: Any, pred: Any, proba: Any, classes: Any, labels: Sequence[str] | None = None) -> None:
    """scikit-learn's classification report, then accuracy and log-loss.
    ``proba``'s columns are in ``classes`` order (sorted, as log_loss reads them)."""
    from sklearn.metrics import accuracy_score, classification_report, log_loss

    print(classification_report(gold, pred, labels=labels, digits=3, zero_division=0))
    print(f"accuracy {accuracy_score(gold, pred):.3f}  log-loss {log_loss(gold, proba, labels=classes):.3f}")


# ------------------------------------------------------- what is read


def _fields(args: argparse.Namespace) -> dict[str, str]:
    """The prompt's fields that the input fills, each with its column:
    ``{text}`` from ``--text-column``, any other field from the column of its
    name (``{labels}`` and ``{options}`` are filled by the package)."""
    from ..reading.prompts import DEFAULT_PROMPT, PromptTemplate

    try:
        template = PromptTemplate.parse(DEFAULT_PROMPT if args.prompt is None else args.prompt)
    except ValueError as exc:
        raise UsageError(f"--prompt: {exc}") from None
    return {f: args.text_column if f == "text" else f for f in template.input_fields}


def _cells(frame: Any, fields: dict[str, str], path: str) -> list[tuple[str, str]]:
    """The columns whose cells every classified row needs, with what each
    holds ("text", "{title}"); raises UsageError for a column ``frame`` lacks."""
    cells = []
    for field, column in fields.items():
        if field != "text":
            require_column(frame, column, path, f"the prompt's {{{field}}} field")
        cells.append((column, "text" if field == "text" else f"{{{field}}}"))
    return cells


def _prompt_inputs(frame: Any, cells: list[tuple[str, str]], fields: dict[str, str], path: str) -> Any:
    """The estimator's X: a DataFrame with one column per prompt field, as strings."""
    import pandas as pd

    what = dict(cells)
    return pd.DataFrame({f: as_strings(frame, c, path, what[c]).tolist() for f, c in fields.items()})


@dataclass(frozen=True)
class _Train:
    """The labelled rows of ``--train``: the estimator's X and y."""

    X: Any
    y: Any
    path: str


def _read_train(args: argparse.Namespace, fields: dict[str, str]) -> _Train | None:
    """``--train FILE`` read with IN's columns and options; every row must be good."""
    if args.train is None:
        return None
    frame = read_table(args.train, [args.text_column, args.label_column], sep=args.sep).frame
    require_column(frame, args.text_column, args.train, "--text-column")
    require_column(frame, args.label_column, args.train, "--label-column")
    cells = [*_cells(frame, fields, args.train), (args.label_column, "label")]
    check_cells(frame, cells, args.train)
    X = _prompt_inputs(frame, cells, fields, args.train)
    y = as_strings(frame, args.label_column, args.train, "label").to_numpy(dtype=object)
    return _Train(X, y, args.train)


def _check_known(labels: list[str], gold: Any, path: str, args: argparse.Namespace) -> None:
    """Raises UsageError naming the labels of ``path``'s label column that are not ``labels``."""
    unknown = sorted(set(gold.tolist()) - set(labels))
    if unknown:
        raise UsageError(
            f"{path}: column {args.label_column!r} has label(s) {', '.join(map(repr, unknown))} "
            f"that are not in --labels {args.labels!r}"
        )


def _check_train_classes(labels: list[str], train: _Train, args: argparse.Namespace) -> None:
    """The classes come from ``--train``'s labels: they must be ``labels``, each one present."""
    _check_known(labels, train.y, train.path, args)
    present = set(train.y.tolist())
    missing = [label for label in labels if label not in present]
    if missing:
        raise UsageError(
            f"--train {train.path} has no rows of class(es) {', '.join(map(repr, missing))}: the classifier "
            "takes its classes from --train; add rows of every class, or leave these out of --labels"
        )


def _prepare(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str | None]:
    """The checks made before any table is read: the engine options, the
    options that need ``--train``, and the outputs. Returns the engine options
    and where skipped rows go."""
    options = engine_options(args)
    needs = needs_labels(args)
    if needs and args.train is None:
        also = "; evaluate scores IN's labels, it never learns from them" if args.command == "evaluate" else ""
        raise UsageError(
            f"{' and '.join(needs)} learn{'s' if len(needs) == 1 else ''} from labelled rows: pass --train FILE "
            f"with columns {args.text_column!r} and {args.label_column!r}{also}"
        )
    check_output(args.output, args.sep)
    return options, skipped_target(args)


# --------------------------------------------------------- classifying


def _step(call: Callable[[], Any], args: argparse.Namespace, where: str, rows: Sequence[int] | None) -> Any:
    """Runs one fit or predict call of the estimator: a ValueError is a usage
    error and any other failure the engine's, their messages and our warnings
    (low label mass, truncation; said on stderr) in option syntax naming rows
    of ``where`` (``rows[k]`` is the row of X item k). Other warnings go back
    to the warning filters."""
    from ..exceptions import LowLabelMassWarning, TruncationWarning

    error: Exception | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call()
        except ValueError as exc:
            error = UsageError(cli_hint(str(exc), where=where, rows=rows))
        except Exception as exc:
            message = cli_hint(str(exc), where=where, rows=rows)
            error = EngineFailure(f"the engine failed: {type(exc).__name__}: {message}")
            error.__cause__ = exc
    for w in caught:
        if issubclass(w.category, (LowLabelMassWarning, TruncationWarning)):
            print(
                f"llm-label-clf {args.command}: warning: {cli_hint(str(w.message), where=where, rows=rows)}",
                file=sys.stderr,
            )
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if error is not None:
        raise error
    return result


def _classify_rows(
    X: Any,
    labels: list[str],
    args: argparse.Namespace,
    options: dict[str, Any] | None,
    train: _Train | None,
    rows: Sequence[int],
) -> tuple[Any, Any, Any]:
    """Fits the classifier and classifies every row of ``X`` (input rows ``rows``).

    Without ``--train`` it is zero-shot: ``fit`` gets no ``y``, the classes
    come from ``labels`` (each class spoken as itself; ``classes_`` is them
    sorted), and the first ``len(labels)`` rows of X serve only as sample
    texts for the label-token check (and batch calibration's small-call
    fallback). With ``--train`` it fits on those labelled rows.

    Returns (proba with columns in ``labels`` order, predicted classes, ``classes_``).
    """
    from ..classifier import LLMLabelClassifier
    from ..engines import get_engine
    from ..exceptions import ModelNotFoundError

    clf = LLMLabelClassifier(**estimator_params(args, options), labels={label: label for label in labels})
    print(f"Classifying {len(X)} texts from {args.input} with {args.model} ...", file=sys.stderr, flush=True)
    try:
        get_engine(args.model, options)
    except ModelNotFoundError as exc:  # a path that is not there is the user's to fix: exit 2
        raise UsageError(f"--model: {exc}") from exc
    except Exception as exc:
        given = f" with engine options {options}" if options else ""
        message = f"cannot start the engine for model {args.model!r}{given}: {type(exc).__name__}: {exc}"
        raise EngineFailure(engine_hint(message, list(OPTION_OF.values()))) from exc
    source = "stdin" if args.input == "-" else args.input
    if train is None:
        _step(lambda: clf.fit(X.iloc[: len(labels)].reset_index(drop=True)), args, source, rows)
    else:
        _step(lambda: clf.fit(train.X, train.y), args, train.path, None)
    proba = _step(lambda: clf.predict_proba(X), args, source, rows)
    classes = clf.classes_.tolist()
    predicted = clf.classes_[proba.argmax(axis=1)]
    order = [classes.index(label) for label in labels]
    return proba[:, order], predicted, clf.classes_


def _write_output(out: Any, args: argparse.Namespace) -> None:
    write_table(out, args.output, sep=args.sep)
    if args.output not in (None, "-"):
        print(f"Wrote {len(out)} rows to {args.output}", file=sys.stderr)


def _classify(args: argparse.Namespace) -> int:
    given = parse_labels(args.labels) if args.labels is not None else None
    if given is None and args.train is None:
        raise UsageError("name the classes with --labels a,b,c (or give --train FILE, whose labels name them)")
    options, skipped = _prepare(args)
    table = read_table(args.input, [args.text_column], sep=args.sep)
    require_column(table.frame, args.text_column, args.input, "--text-column")
    fields = _fields(args)
    cells = _cells(table.frame, fields, args.input)
    train = _read_train(args, fields)
    labels = given if given is not None else sorted(set(train.y.tolist()))
    if train is not None:
        if len(labels) < 2:
            raise UsageError(
                f"{train.path}: column {args.label_column!r} has one class ({labels[0]!r}); a "
                "classifier needs at least two"
            )
        _check_train_classes(labels, train, args)
    rows = good_rows(table.frame, cells, args)
    X = _prompt_inputs(table.frame.iloc[rows.used], cells, fields, args.input)
    announce_bad_rows(table, rows, args, skipped)
    proba, predicted, _ = _classify_rows(X, labels, args, options, train, rows.used)
    _write_output(with_predictions(table.frame, labels, proba, predicted, rows, "classify"), args)
    return EXIT_OK


def _evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    given = parse_labels(args.labels) if args.labels is not None else None
    options, skipped = _prepare(args)
    table = read_table(args.input, [args.text_column, args.label_column], sep=args.sep)
    frame = table.frame
    require_column(frame, args.text_column, args.input, "--text-column")
    require_column(frame, args.label_column, args.input, "--label-column")
    fields = _fields(args)
    cells = [*_cells(frame, fields, args.input), (args.label_column, "label")]
    train = _read_train(args, fields)
    rows = good_rows(frame, cells, args)
    used = frame.iloc[rows.used]
    gold = as_strings(used, args.label_column, args.input, "label").to_numpy(dtype=object)
    if given is None:
        labels = sorted(set(gold.tolist()) | (set(train.y.tolist()) if train is not None else set()))
        if len(labels) < 2:
            raise UsageError(
                f"{args.input}: column {args.label_column!r} has one class ({labels[0]!r}); "
                "pass every class with --labels a,b,c"
            )
    else:
        labels = given
        _check_known(labels, gold, args.input, args)
    if train is not None:
        _check_train_classes(labels, train, args)
    X = _prompt_inputs(used, cells, fields, args.input)
    announce_bad_rows(table, rows, args, skipped)
    proba, predicted, classes = _classify_rows(X, labels, args, options, train, rows.used)
    if rows.bad:
        print(f"llm-label-clf evaluate: the report leaves out the {len(rows.bad)} bad row(s)", file=sys.stderr)
    # log_loss reads y_pred's columns in sorted-label order, which classes_ is
    sorted_proba = proba[:, [labels.index(c) for c in classes.tolist()]]
    _print_report(gold, np.asarray(predicted, dtype=object), sorted_proba, classes, labels)
    if args.output is not None:
        _write_output(with_predictions(frame, labels, proba, predicted, rows, "evaluate"), args)
    return EXIT_OK


# ------------------------------------------------------------ parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llm-label-clf",
        description="Any causal LLM served by vLLM as a text classifier: zero-shot, or few-shot and "
        "calibrated from labelled rows.",
        epilog="Exit status: 0 ok, 2 usage or input error, 1 engine failure.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    classify = commands.add_parser(
        "classify",
        help="add each class's probability and the predicted class to a table",
        description="Reads IN and writes its rows, in their order, plus one proba_<label> column per label "
        "and a predicted column (to OUT, or as CSV on stdout).",
    )
    add_table_options(classify, evaluate=False)
    classes = classify.add_argument_group("classes")
    classes.add_argument(
        "--labels",
        default=None,
        help="the classes, comma-separated: a,b,c (required without --train; with it, default: "
        "its label column's values, sorted)",
    )
    classes.add_argument(
        "--label-column", default="label", help="the column of --train with the true labels (default: label)"
    )
    classify.set_defaults(handler=_classify)

    evaluate = commands.add_parser(
        "evaluate",
        help="classify a labelled table and print a classification report",
        description="Classifies IN and prints scikit-learn's classification report, accuracy and log-loss.",
    )
    add_table_options(evaluate, evaluate=True)
    classes = evaluate.add_argument_group("classes")
    classes.add_argument(
        "--label-column", default="label", help="the column with the true labels, in IN and --train (default: label)"
    )
    classes.add_argument(
        "--labels",
        default=None,
        help="the classes, comma-separated (default: the label column's values, sorted, with --train's)",
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
    except (UsageError, EngineFailure) as exc:
        print(f"llm-label-clf {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, UsageError) else EXIT_ENGINE
    except KeyboardInterrupt:
        print(f"llm-label-clf {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


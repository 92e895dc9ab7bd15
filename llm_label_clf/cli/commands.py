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
naming rows of the input (``hints``). Both commands stream: the input is
read, classified and written ``--chunk-rows`` rows at a time (``stream``), an
existing OUT is replaced only with ``--overwrite``, and ``--resume``
continues a stopped run (``resume``).

Exit codes: 0 success; 2 a usage or input error (a missing column, an
unreadable, empty or unknown-format file, bad labels, prompt or engine
options, a bad row under ``--bad-rows error``); 1 the engine failed (it could
not start, or a read failed); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from .chunks import open_input, read_table
from .options import add_table_options, engine_options, needs_labels
from .resume import check_targets
from .rows import prompt_cells, prompt_fields, prompt_inputs, skipped_target, survey
from .store_command import add_store_command
from .stream import EngineFailure, Job, Train, print_report, random_state, resume_point, run
from .tables import UsageError, as_strings, check_cells, check_output, parse_labels, require_column

__all__ = ["build_parser", "main"]

DEMO_INSTRUCTIONS = "Classify the sentiment of each movie review."
DEMO_PROMPT = "Review: {text}\nSentiment:"

EXIT_OK, EXIT_ENGINE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


# ---------------------------------------------------------------- demo


def _demo(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..classifier import LLMLabelClassifier
    from ..fitting.shaping import predicted_from
    from ..fitting.ties import tie_priors

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
    predicted = predicted_from("single", proba, clf.classes_, log=False, priors=tie_priors(clf))  # predict's tie rule
    print_report(y, predicted, proba, clf.classes_)
    print(f"{len(texts) / elapsed:.1f} texts/s on predict_proba (engine start and fit: {started - start:.1f} s)")
    return 0


# ------------------------------------------------------- what is read


def _read_train(args: argparse.Namespace, fields: dict[str, str]) -> Train | None:
    """``--train FILE`` read with IN's columns and options; every row must be good."""
    if args.train is None:
        return None
    frame = read_table(args.train, [args.text_column, args.label_column], sep=args.sep)
    require_column(frame, args.text_column, args.train, "--text-column")
    require_column(frame, args.label_column, args.train, "--label-column")
    cells = [*prompt_cells(frame, fields, args.train), (args.label_column, "label")]
    check_cells(frame, cells, args.train)
    X = prompt_inputs(frame, cells, fields, args.train)
    y = as_strings(frame, args.label_column, args.train, "label").to_numpy(dtype=object)
    return Train(X, y, args.train)


def _check_known(labels: list[str], gold: set[str], path: str, args: argparse.Namespace) -> None:
    """Raises UsageError naming the labels of ``path``'s label column that are not ``labels``."""
    unknown = sorted(set(gold) - set(labels))
    if unknown:
        raise UsageError(
            f"{path}: column {args.label_column!r} has label(s) {', '.join(map(repr, unknown))} "
            f"that are not in --labels {args.labels!r}"
        )


def _check_train_classes(labels: list[str], train: Train, args: argparse.Namespace) -> None:
    """The classes come from ``--train``'s labels: they must be ``labels``, each one present."""
    _check_known(labels, set(train.y.tolist()), train.path, args)
    present = set(train.y.tolist())
    missing = [label for label in labels if label not in present]
    if missing:
        raise UsageError(
            f"--train {train.path} has no rows of class(es) {', '.join(map(repr, missing))}: the classifier "
            "takes its classes from --train; add rows of every class, or leave these out of --labels"
        )


def _prepare(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """The checks made before any table is read: the engine options, the
    options that need ``--train``, and the outputs (never one replaced
    without ``--overwrite``). Returns the engine options, where skipped rows
    go and the output's format."""
    options = engine_options(args)
    needs = needs_labels(args)
    if needs and args.train is None:
        also = "; evaluate scores IN's labels, it never learns from them" if args.command == "evaluate" else ""
        raise UsageError(
            f"{' and '.join(needs)} learn{'s' if len(needs) == 1 else ''} from labelled rows: pass --train FILE "
            f"with columns {args.text_column!r} and {args.label_column!r}{also}"
        )
    fmt = check_output(args.output, args.sep)
    skipped = skipped_target(args)
    check_targets(args.output, resume=args.resume, overwrite=args.overwrite, fmt=fmt)
    return options, skipped, fmt


def _run_table(args: argparse.Namespace, given: list[str] | None) -> int:
    """``classify`` or ``evaluate``: the checks, one survey of IN, then the run."""
    options, skipped, fmt = _prepare(args)
    resumed = resume_point(args)
    fields = prompt_fields(args)
    train = _read_train(args, fields)
    random_state(args, train)
    evaluate = args.command == "evaluate"
    with open_input(args.input, args.sep) as source:
        digest_rows = resumed.rows if resumed is not None else 0
        found = survey(source, args, fields, chunk_rows=args.chunk_rows, digest_rows=digest_rows, evaluate=evaluate)
        if given is not None:
            labels = given
        elif evaluate:
            labels = sorted(found.gold | (set(train.y.tolist()) if train is not None else set()))
            if len(labels) < 2:
                raise UsageError(
                    f"{args.input}: column {args.label_column!r} has one class ({labels[0]!r}); "
                    "pass every class with --labels a,b,c"
                )
        else:
            labels = sorted(set(train.y.tolist()))
            if len(labels) < 2:
                raise UsageError(
                    f"{train.path}: column {args.label_column!r} has one class ({labels[0]!r}); a "
                    "classifier needs at least two"
                )
        if evaluate and given is not None:
            _check_known(labels, found.gold, args.input, args)
        if train is not None:
            _check_train_classes(labels, train, args)
        run(Job(args, source, found, labels, fields, options, train, skipped, fmt, resumed))
    return EXIT_OK


def _classify(args: argparse.Namespace) -> int:
    given = parse_labels(args.labels) if args.labels is not None else None
    if given is None and args.train is None:
        raise UsageError("name the classes with --labels a,b,c (or give --train FILE, whose labels name them)")
    return _run_table(args, given)


def _evaluate(args: argparse.Namespace) -> int:
    return _run_table(args, parse_labels(args.labels) if args.labels is not None else None)


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

    add_store_command(commands)  # store info|clear PATH (store_command)
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


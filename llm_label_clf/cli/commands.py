"""The ``llm-label-clf`` command (also ``python -m llm_label_clf``): its
parser and the wiring of ``classify``, ``evaluate``, ``demo`` and ``store``
to the estimator (docs/cli.md says what each does). Exit codes: 0 success;
2 a usage or input error; 1 the engine failed; 130 interrupted."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from .chunks import open_input
from .options import add_table_options, engine_options, needs_labels
from .resume import check_targets
from .rows import prompt_fields, read_train, skipped_target, survey
from .store_command import add_store_command
from .stream import EngineFailure, Job, print_report, random_state, resume_point, run
from .tables import UsageError, check_output, parse_labels

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


# ------------------------------------------------------- classify, evaluate


def _check_labels(labels: list[str], gold: set[str], path: str, args: argparse.Namespace, *, every: bool) -> None:
    """Raises UsageError naming the labels of ``path``'s label column that are
    not ``labels`` and, with ``every`` (``--train``, where the classes come
    from), the labels it has no rows of."""
    unknown = sorted(gold - set(labels))
    if unknown:
        raise UsageError(
            f"{path}: column {args.label_column!r} has label(s) {', '.join(map(repr, unknown))} "
            f"that are not in --labels {args.labels!r}"
        )
    missing = [label for label in labels if label not in gold] if every else []
    if missing:
        raise UsageError(
            f"--train {path} has no rows of class(es) {', '.join(map(repr, missing))}: the classifier "
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
    if args.command == "classify" and args.labels is None and args.train is None:
        raise UsageError("name the classes with --labels a,b,c (or give --train FILE, whose labels name them)")
    fmt = check_output(args.output, args.sep)
    skipped = skipped_target(args)
    check_targets(args.output, resume=args.resume, overwrite=args.overwrite, fmt=fmt)
    return options, skipped, fmt


def _run_table(args: argparse.Namespace) -> int:
    """``classify`` or ``evaluate``: the checks, one survey of IN, the classes
    (``--labels``, else evaluating IN's and ``--train``'s labels, else
    ``--train``'s), then the run."""
    given = parse_labels(args.labels) if args.labels is not None else None
    options, skipped, fmt = _prepare(args)
    resumed = resume_point(args)
    fields = prompt_fields(args)
    train = read_train(args, fields)
    random_state(args, train)
    evaluate = args.command == "evaluate"
    trained = set(train.y.tolist()) if train is not None else set()
    with open_input(args.input, args.sep) as source:
        digest_rows = resumed.rows if resumed is not None else 0
        found = survey(source, args, fields, chunk_rows=args.chunk_rows, digest_rows=digest_rows, evaluate=evaluate)
        if given is not None:
            labels = given
        elif evaluate:
            labels = sorted(found.gold | trained)  # the classes the input's labels and --train's show
        else:
            labels = sorted(trained)
        if len(labels) < 2:
            path = args.input if evaluate else train.path
            advice = "pass every class with --labels a,b,c" if evaluate else "a classifier needs at least two"
            raise UsageError(f"{path}: column {args.label_column!r} has one class ({labels[0]!r}); {advice}")
        if evaluate and given is not None:
            _check_labels(labels, found.gold, args.input, args, every=False)
        if train is not None:
            _check_labels(labels, trained, train.path, args, every=True)
        run(Job(args, source, found, labels, fields, options, train, skipped, fmt, resumed))
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

    for name, help, description in (
        ("classify", "add each class's probability and the predicted class to a table", "Reads IN and writes its "
         "rows, in their order, plus one proba_<label> column per label and a predicted column (to OUT, or as CSV "
         "on stdout)."),
        ("evaluate", "classify a labelled table and print a classification report", "Classifies IN and prints "
         "scikit-learn's classification report, accuracy and log-loss."),
    ):  # fmt: skip
        command = commands.add_parser(name, help=help, description=description)
        add_table_options(command, evaluate=name == "evaluate")
        command.set_defaults(handler=_run_table)

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

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
from typing import Any

from ._tables import (
    KNOWN_FORMATS,
    UsageError,
    as_strings,
    check_output,
    parse_labels,
    read_table,
    require_column,
    write_table,
)

__all__ = ["main"]

DEMO_INSTRUCTIONS = "Classify the sentiment of each movie review."
DEMO_PROMPT = "Review: {text}\nSentiment:"

EXIT_OK, EXIT_ENGINE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130




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


# --------------------------------------------------------- classifying


def _prompt_inputs(frame: Any, args: argparse.Namespace) -> Any:
    """The estimator's X: a DataFrame with one column per prompt field. ``{text}``
    is filled from ``--text-column``; any other field from the column of that name."""
    import pandas as pd

    from .reading.prompts import DEFAULT_PROMPT, LABELS_FIELD, PromptTemplate

    try:
        template = PromptTemplate.parse(DEFAULT_PROMPT if args.prompt is None else args.prompt)
    except ValueError as exc:
        raise UsageError(f"--prompt: {exc}") from None
    fields = [f for f in template.fields if f != LABELS_FIELD]
    columns = {}
    for field in fields:
        column = args.text_column if field == "text" else field
        if field != "text":
            require_column(frame, column, args.input, f"the prompt's {{{field}}} field")
        columns[field] = as_strings(frame, column, args.input, "text" if field == "text" else f"{{{field}}}")
    return pd.DataFrame(columns)


def _classify_frame(frame: Any, labels: list[str], args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """Fits a zero-shot classifier on ``labels`` and classifies every row.

    Zero-shot needs no labelled data: ``fit`` gets no ``y``, the classes come
    from ``labels`` (each class spoken as itself; ``classes_`` is them sorted),
    and the first ``len(labels)`` rows of X serve only as sample texts for the
    label-token check. Nothing is learned from them.

    Returns (proba with columns in ``labels`` order, predicted classes, classifier).
    """
    from .classifier import LLMLabelClassifier
    from .engines import get_engine
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
        labels={label: label for label in labels},
    )
    print(f"Classifying {len(X)} texts from {args.input} with {args.model} ...", file=sys.stderr, flush=True)
    try:
        get_engine(args.model)
    except Exception as exc:
        raise EngineFailure(f"cannot start the engine for model {args.model!r}: {type(exc).__name__}: {exc}") from exc
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            clf.fit(X.iloc[: len(labels)].reset_index(drop=True))
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
    labels = parse_labels(args.labels)
    check_output(args.output)
    frame = read_table(args.input, [args.text_column])
    require_column(frame, args.text_column, args.input, "--text-column")
    proba, predicted, _ = _classify_frame(frame, labels, args)
    write_table(_with_predictions(frame, labels, proba, predicted, "classify"), args.output)
    if args.output not in (None, "-"):
        print(f"Wrote {len(frame)} rows to {args.output}", file=sys.stderr)
    return EXIT_OK


def _evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    labels = parse_labels(args.labels) if args.labels is not None else None
    check_output(args.output)
    frame = read_table(args.input, [args.text_column, args.label_column])
    require_column(frame, args.text_column, args.input, "--text-column")
    require_column(frame, args.label_column, args.input, "--label-column")
    gold = as_strings(frame, args.label_column, args.input, "label").to_numpy(dtype=object)
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
        write_table(_with_predictions(frame, labels, proba, predicted, "evaluate"), args.output)
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
    from .reading.prompts import DEFAULT_PROMPT

    command.add_argument("input", metavar="IN", help=f"the table to classify ({KNOWN_FORMATS}; '-': CSV on stdin)")
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
        help=f"where to write the rows with probabilities ({KNOWN_FORMATS}; format by extension)",
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

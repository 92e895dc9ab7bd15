"""The ``llm-label-clf`` command (also ``python -m llm_label_clf``)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

__all__ = ["main"]

DEMO_PROMPT = "Review: {text}\nSentiment (positive or negative):"


def _demo(args: argparse.Namespace) -> int:
    import pandas as pd
    from sklearn.metrics import accuracy_score, classification_report, log_loss

    from .classifier import LLMLabelClassifier

    try:
        frame = pd.read_csv(args.data)
    except (OSError, ValueError) as exc:
        print(f"llm-label-clf demo: cannot read {args.data}: {exc}", file=sys.stderr)
        return 2
    if args.limit:
        frame = frame.iloc[: args.limit]
    texts, y = frame["text"].tolist(), frame["label"].to_numpy()
    clf = LLMLabelClassifier(model=args.model, prompt=args.prompt, low_mass="ignore")
    print(f"Classifying {len(texts)} texts from {args.data} with {args.model} ...", flush=True)
    start = time.perf_counter()
    clf.fit(texts, y)
    started = time.perf_counter()
    proba = clf.predict_proba(texts)
    elapsed = time.perf_counter() - started
    pred = clf.classes_[proba.argmax(axis=1)]
    print(classification_report(y, pred, digits=3))
    print(f"accuracy {accuracy_score(y, pred):.3f}  log-loss {log_loss(y, proba, labels=clf.classes_):.3f}")
    print(
        f"{len(texts) / elapsed:.1f} texts/s on predict_proba "
        f"(engine start and fit: {started - start:.1f} s)"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llm-label-clf", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="zero-shot SST-2 sentiment with the built-in model")
    demo.add_argument("--data", default="../shared/datasets/sst2_dev.csv", help="CSV with text,label columns")
    demo.add_argument("--model", default="smollm2-135m-instruct")
    demo.add_argument("--prompt", default=DEMO_PROMPT)
    demo.add_argument("--limit", type=int, default=0, help="only the first N rows (0: all)")
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())

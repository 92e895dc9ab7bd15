"""Which input rows the command line classifies, and the output's rows:
``--bad-rows`` applied (a row whose text, prompt field or, evaluating, label
is missing or blank stops the command, is left out and listed in a side file,
or stays in place unclassified), and the output laid out in the input's order
with the probabilities, the prediction and, keeping bad rows, their reason."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .tables import (
    Table,
    UsageError,
    bad_row_reasons,
    check_cells,
    check_output,
    shown_rows,
    skipped_path,
    write_table,
)

__all__ = ["Rows", "announce_bad_rows", "good_rows", "skipped_target", "with_predictions"]


def skipped_target(args: argparse.Namespace) -> str | None:
    """Where ``--bad-rows skip`` lists the rows it leaves out, checked writable."""
    if args.skipped is not None and args.bad_rows != "skip":
        raise UsageError(f"--skipped {args.skipped} lists skipped rows: it needs --bad-rows skip")
    if args.bad_rows != "skip":
        return None
    path = args.skipped if args.skipped is not None else skipped_path(args.output, args.input)
    if path is None or path == "-":
        raise UsageError("--bad-rows skip lists the rows it leaves out in a file: name it with --skipped FILE")
    check_output(path, args.sep)
    others = [p for p in (args.input, args.output, args.train) if p not in (None, "-")]
    if any(Path(path).resolve() == Path(p).resolve() for p in others):
        raise UsageError(f"--bad-rows skip would list the skipped rows in {path}, which the command reads or writes")
    return path


@dataclass(frozen=True)
class Rows:
    """Every input row's reason to leave it unclassified ("" for a good row),
    the rows classified (``used``, in input order) and whether the output
    keeps the bad rows in place (``--bad-rows keep``)."""

    reasons: list[str]
    used: list[int]
    keep: bool

    @property
    def bad(self) -> list[int]:
        """The rows not classified, in input order."""
        return [i for i, reason in enumerate(self.reasons) if reason]


def good_rows(frame: Any, cells: list[tuple[str, str]], args: argparse.Namespace) -> Rows:
    """The rows to classify under ``--bad-rows``: raises UsageError naming the
    bad rows (error) or when no row is good; writes nothing."""
    if args.bad_rows == "error":
        remedy = "fill or drop them, or pass --bad-rows skip (leave them out) or keep (mark them)"
        check_cells(frame, cells, args.input, remedy)
        return Rows([""] * len(frame), list(range(len(frame))), keep=False)
    reasons = bad_row_reasons(frame, cells)
    used = [i for i, reason in enumerate(reasons) if not reason]
    if not used:
        raise UsageError(
            f"{args.input}: every row is bad ({len(frame)} rows; row 0: {reasons[0]}): nothing to classify"
        )
    return Rows(reasons, used, keep=args.bad_rows == "keep")


def announce_bad_rows(table: Table, rows: Rows, args: argparse.Namespace, skipped: str | None) -> None:
    """Says on stderr what became of the bad rows, and under ``--bad-rows
    skip`` lists them in ``skipped``: ``row`` (counting data rows from 0),
    ``line`` (delimited text: the 1-based line of the input the row starts on)
    and ``reason``. The list is written on every skip run, header only when
    no row was skipped, so it never describes an earlier run."""
    import pandas as pd

    bad = rows.bad
    if rows.keep and bad:
        written = args.command == "classify" or args.output is not None
        where = " in place, the reason in the output's 'error' column" if written else ""
        print(
            f"llm-label-clf {args.command}: {len(bad)} bad row(s) (rows {shown_rows(bad)}) left unclassified{where}",
            file=sys.stderr,
        )
    if skipped is None:
        return
    listed = pd.DataFrame({"row": pd.Series(bad, dtype="int64")})
    lines = table.row_lines() if bad else None
    if table.sep is not None and (lines is not None or not bad):
        listed["line"] = pd.Series([lines[i] for i in bad] if lines else [], dtype="int64")
    listed["reason"] = pd.Series([rows.reasons[i] for i in bad], dtype=object)
    write_table(listed, skipped, sep=args.sep)
    if bad:
        print(
            f"llm-label-clf {args.command}: skipped {len(bad)} bad row(s) (rows {shown_rows(bad)}); "
            f"they are listed with the reason in {skipped}",
            file=sys.stderr,
        )


def with_predictions(frame: Any, labels: list[str], proba: Any, predicted: Any, rows: Rows, command: str) -> Any:
    """The output: the input's rows in their order (skipped ones left out)
    plus one ``proba_<label>`` column per label and ``predicted``; under
    ``--bad-rows keep`` every row, the bad ones with empty cells and the
    reason in an ``error`` column."""
    import numpy as np

    keep = rows.keep
    out = frame.copy() if keep else frame.iloc[rows.used].reset_index(drop=True)
    at = np.asarray(rows.used) if keep else np.arange(len(rows.used))
    new = [f"proba_{label}" for label in labels] + ["predicted"] + (["error"] if keep else [])
    clash = [c for c in new if c in out.columns]
    if clash:
        print(f"llm-label-clf {command}: note: replacing the input's column(s) {', '.join(clash)}", file=sys.stderr)
        out = out.drop(columns=clash)
    for k, label in enumerate(labels):
        column = np.full(len(out), np.nan)
        column[at] = proba[:, k]
        out[f"proba_{label}"] = column
    column = np.full(len(out), None, dtype=object)
    column[at] = predicted
    out["predicted"] = column
    if keep:
        out["error"] = [reason or None for reason in rows.reasons]
    return out

"""Which input rows the command line classifies (``survey``, one pass before
the engine starts; ``--bad-rows``), and each chunk of output in the input's
order with the probabilities, the prediction and, keeping bad rows, their
reason (``with_predictions``). Why: docs/architecture.md, ``cli/rows.py``."""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .chunks import Source, read_table
from .resume import RowDigest
from .sinks import write_atomically
from .tables import UsageError, check_output, skipped_path, write_table

__all__ = [
    "SAMPLE_ROWS", "Rows", "Survey", "Train", "announce_bad_rows", "as_strings", "bad_row_reasons", "new_columns",
    "prompt_fields", "prompt_inputs", "read_train", "skipped_target", "survey", "with_predictions",
]  # fmt: skip

#: The good rows the survey keeps, drawn uniformly over the whole input (seeded, in
#: input order): the zero-shot fit's texts, which the default calibration estimates
#: the class prior on (a file sorted by class would mislead its first rows).
SAMPLE_ROWS = 256
#: What ``--bad-rows error`` says to do about bad rows.
_REMEDY = "fill or drop them, or pass --bad-rows skip (leave them out) or keep (mark them)"


def require_column(frame: Any, column: str, path: str, option: str) -> None:
    """Raises UsageError naming ``path``'s columns and ``option`` when ``frame``
    has no ``column``; when its one column's name holds a separator, the
    separator is likely wrong, and the message says so."""
    if column not in frame.columns:
        have = ", ".join(repr(str(c)) for c in frame.columns)
        message = f"{path} has no column {column!r} (its columns: {have}); name the right one with {option}"
        if len(frame.columns) == 1 and any(s in str(frame.columns[0]) for s in ",;\t|"):
            message += ", or set the field separator with --sep"
        raise UsageError(message)


def blank_rows(frame: Any, column: str) -> list[int]:
    """The rows of ``frame`` (counted from 0) whose ``column`` cell is missing
    (None, NaN, NA) or a string of only whitespace; a list in a JSON cell is not."""
    import numpy as np

    cells = frame[column]
    blank = cells.map(lambda v: isinstance(v, str) and not v.strip()).to_numpy(dtype=bool)
    return np.flatnonzero(cells.isna().to_numpy() | blank).tolist()


def bad_row_reasons(frame: Any, cells: Sequence[tuple[str, str]]) -> list[str]:
    """For each row of ``frame``, why it cannot be used: a missing or blank
    cell in one of ``cells`` (column, what it holds), as "no text in column
    'text'"; several reasons joined by "; ", "" for a good row."""
    reasons = [[] for _ in range(len(frame))]  # type: list[list[str]]
    for column, what in cells:
        for i in blank_rows(frame, column):
            reasons[i].append(f"no {what} in column {column!r}")
    return ["; ".join(r) for r in reasons]


def shown_rows(rows: Sequence[int], limit: int = 5) -> str:
    """The first ``limit`` row numbers, comma-separated, "..." after them."""
    return ", ".join(str(i) for i in rows[:limit]) + (", ..." if len(rows) > limit else "")


def missing_cells(path: str, column: str, what: str, rows: Sequence[int], count: int, remedy: str) -> UsageError:
    """The error for ``count`` rows of ``path`` with no ``what`` in ``column``:
    ``rows`` are the first of them (more than five shown as "...")."""
    return UsageError(
        f"{path}: {count} row(s) have no {what} in column {column!r} "
        f"(rows {shown_rows(rows)}, counting data rows from 0); {remedy}"
    )


def check_cells(frame: Any, cells: Sequence[tuple[str, str]], path: str, remedy: str = "fill or drop them") -> None:
    """Raises UsageError naming the first of ``cells`` (column, what it holds)
    that has missing or blank cells, and their rows; ``remedy`` ends it."""
    for column, what in cells:
        bad = blank_rows(frame, column)
        if bad:
            raise missing_cells(path, column, what, bad, len(bad), remedy)


def as_strings(frame: Any, column: str, path: str, what: str) -> Any:
    """The column as strings; a missing or blank cell is an error naming its row."""
    check_cells(frame, [(column, what)], path)
    return frame[column].map(lambda v: v if isinstance(v, str) else str(v))


def prompt_fields(args: argparse.Namespace) -> dict[str, str]:
    """The prompt's fields that the input fills, each with its column:
    ``{text}`` from ``--text-column``, any other field from the column of its
    name (``{labels}`` and ``{options}`` are filled by the package)."""
    from ..reading.prompts import DEFAULT_PROMPT, PromptTemplate

    try:
        template = PromptTemplate.parse(DEFAULT_PROMPT if args.prompt is None else args.prompt)
    except ValueError as exc:
        raise UsageError(f"--prompt: {exc}") from None
    return {f: args.text_column if f == "text" else f for f in template.input_fields}


def prompt_cells(frame: Any, fields: dict[str, str], path: str) -> list[tuple[str, str]]:
    """The columns whose cells every classified row needs, with what each
    holds ("text", "{title}"); raises UsageError for a column ``frame`` lacks."""
    cells = []
    for field, column in fields.items():
        if field != "text":
            require_column(frame, column, path, f"the prompt's {{{field}}} field")
        cells.append((column, "text" if field == "text" else f"{{{field}}}"))
    return cells


def prompt_inputs(frame: Any, cells: list[tuple[str, str]], fields: dict[str, str], path: str) -> Any:
    """The estimator's X: a DataFrame with one column per prompt field, as strings."""
    import pandas as pd

    what = dict(cells)
    return pd.DataFrame({f: as_strings(frame, c, path, what[c]).tolist() for f, c in fields.items()})


@dataclass(frozen=True)
class Train:
    """The labelled rows of ``--train``: the estimator's X and y."""

    X: Any
    y: Any
    path: str


def read_train(args: argparse.Namespace, fields: dict[str, str]) -> Train | None:
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
    """One chunk's rows: each row's reason to leave it unclassified ("" for
    a good row), the rows classified (``used``, in order) and whether the
    output keeps the bad rows in place (``--bad-rows keep``)."""

    reasons: list[str]
    used: list[int]
    keep: bool

    @classmethod
    def of(cls, frame: Any, cells: list[tuple[str, str]], keep: bool) -> Rows:
        reasons = bad_row_reasons(frame, cells)
        return cls(reasons, [i for i, reason in enumerate(reasons) if not reason], keep)

    @property
    def bad(self) -> list[int]:
        """The rows not classified, in order."""
        return [i for i, reason in enumerate(self.reasons) if reason]


@dataclass
class Survey:
    """What one pass over the input found: the cells read (column, what it
    holds; the label last when evaluating), the input's columns, the rows,
    the bad ones with their reasons and start lines, the good rows' labels,
    a sample of their prompt inputs, types that make every chunk agree, and
    the digest of the first ``digest_rows`` rows."""

    cells: list[tuple[str, str]]
    columns: list[str]
    rows: int
    bad: list[int]
    reasons: dict[int, str]
    lines: dict[int, int] | None
    gold: set[str]
    sample: Any
    dtypes: dict[str, Any]
    digest: str
    delimited: bool = False

    @property
    def used(self) -> int:
        """The rows classified."""
        return self.rows - len(self.bad)


def survey(
    source: Source, args: argparse.Namespace, fields: dict[str, str], *, chunk_rows: int, digest_rows: int,
    evaluate: bool,
) -> Survey:
    """One pass over ``source`` before any engine starts (see ``Survey``).
    Raises UsageError for a missing column, a file without rows, bad rows
    under ``--bad-rows error`` (naming them) or when every row is bad."""
    import numpy as np
    import pandas as pd

    label = args.label_column if evaluate else None
    strings = [args.text_column] + ([label] if label else [])
    cells: list[tuple[str, str]] = []
    kinds: dict[str, set[Any]] = {}
    blanks: dict[str, list[int]] = {}
    counts: dict[str, int] = {}
    found = Survey([], [], 0, [], {}, None, set(), None, {}, "")
    samples, keys, rng = pd.DataFrame(), np.empty(0), np.random.default_rng(0)
    digest = None
    for chunk in source.chunks(chunk_rows, strings):
        if digest is None:
            require_column(chunk, args.text_column, source.path, "--text-column")
            if label:
                require_column(chunk, label, source.path, "--label-column")
            cells = prompt_cells(chunk, fields, source.path) + ([(label, "label")] if label else [])
            digest = RowDigest([column for column, _ in cells])
            found.columns = [str(c) for c in chunk.columns]
        for column in chunk.columns:
            kinds.setdefault(column, set()).add(chunk[column].dtype)
        if args.bad_rows == "error":
            for column, _ in cells:
                rows = blank_rows(chunk, column)
                blanks.setdefault(column, []).extend(found.rows + i for i in rows[:6])
                counts[column] = counts.get(column, 0) + len(rows)
        reasons = bad_row_reasons(chunk, cells)
        good = [i for i, reason in enumerate(reasons) if not reason]
        for i, reason in enumerate(reasons):
            if reason:
                found.bad.append(found.rows + i)
                if args.bad_rows == "skip" or not found.reasons:  # the list needs each; messages the first
                    found.reasons[found.rows + i] = reason
        if label:
            found.gold.update(as_strings(chunk.iloc[good], label, source.path, "label").tolist())
        samples = pd.concat([samples, prompt_inputs(chunk.iloc[good], cells, fields, source.path)])
        keys = np.concatenate([keys, rng.random(len(good))])
        keep = np.sort(np.argsort(keys, kind="stable")[:SAMPLE_ROWS])
        samples, keys = samples.iloc[keep], keys[keep]
        if found.rows < digest_rows:
            digest.update(chunk.iloc[: digest_rows - found.rows])
        found.rows += len(chunk)
    if found.rows == 0:
        raise UsageError(f"{source.path} has no rows: nothing to classify")
    for column, what in cells:
        if counts.get(column):
            raise missing_cells(source.path, column, what, blanks[column], counts[column], _REMEDY)
    if not found.used:
        first = found.bad[0]
        raise UsageError(
            f"{source.path}: every row is bad ({found.rows} rows; row {first}: {found.reasons[first]}): "
            "nothing to classify"
        )
    found.cells, found.digest, found.delimited = cells, digest.hexdigest(), source.sep is not None
    found.sample = samples.reset_index(drop=True)
    found.dtypes = _agreeing_types(kinds, source.fmt, strings)
    if args.bad_rows == "skip" and found.bad and source.sep is not None:
        found.lines = _bad_lines(source, found)
    return found


def _agreeing_types(kinds: dict[str, set[Any]], fmt: str, strings: list[str]) -> dict[str, Any]:
    """For each column whose type differs between chunks, one every chunk
    can take: numbers as floats, else text (delimited) or objects (JSON)."""
    if fmt == "parquet":
        return {}
    agreed = {}
    for column, seen in kinds.items():
        if len(seen) > 1 and column not in strings:
            numeric = all(kind.kind in "iuf" for kind in seen)
            agreed[column] = "float64" if numeric else str if fmt in ("csv", "tsv") else object
    return agreed


def _bad_lines(source: Source, found: Survey) -> dict[int, int] | None:
    """The input line each bad row starts on; None when the records Python's
    csv reads are not the rows pandas read."""
    wanted, lines, count = set(found.bad), {}, 0
    try:
        for row, line in enumerate(source.lines()):
            if row in wanted:
                lines[row] = line
            count = row + 1
    except (csv.Error, OSError, ValueError):
        return None
    return lines if count == found.rows else None


def announce_bad_rows(found: Survey, args: argparse.Namespace, skipped: str | None) -> None:
    """Says on stderr what becomes of the bad rows, and under ``--bad-rows
    skip`` lists them in ``skipped`` (replaced atomically, so it never
    describes an earlier run): ``row`` (counting data rows from 0), ``line``
    (delimited text: the 1-based line of the input the row starts on) and
    ``reason``; header only when no row is skipped."""
    import pandas as pd

    bad = found.bad
    if args.bad_rows == "keep" and bad:
        written = args.command == "classify" or args.output is not None
        where = " in place, the reason in the output's 'error' column" if written else ""
        print(
            f"llm-label-clf {args.command}: {len(bad)} bad row(s) (rows {shown_rows(bad)}) left unclassified{where}",
            file=sys.stderr,
        )
    if skipped is None:
        return
    listed = pd.DataFrame({"row": pd.Series(bad, dtype="int64")})
    lines = found.lines if bad else {}
    if found.delimited and lines is not None:
        listed["line"] = pd.Series([lines[i] for i in bad], dtype="int64")
    listed["reason"] = pd.Series([found.reasons[i] for i in bad], dtype=object)
    write_atomically(skipped, lambda name: write_table(listed, name, sep=args.sep))
    if bad:
        print(
            f"llm-label-clf {args.command}: skipped {len(bad)} bad row(s) (rows {shown_rows(bad)}); "
            f"they are listed with the reason in {skipped}",
            file=sys.stderr,
        )


def new_columns(labels: list[str], keep: bool) -> list[str]:
    """The columns the output adds: ``proba_<label>`` per label, ``predicted``
    and, keeping bad rows, ``error``."""
    return [f"proba_{label}" for label in labels] + ["predicted"] + (["error"] if keep else [])


def with_predictions(frame: Any, labels: list[str], proba: Any, predicted: Any, rows: Rows) -> Any:
    """One chunk of output: its input rows in their order (skipped ones left
    out) plus one ``proba_<label>`` column per label and ``predicted``; under
    ``--bad-rows keep`` every row, the bad ones with empty cells and the
    reason in an ``error`` column. An input column of one of those names is
    replaced."""
    import pandas as pd

    at = rows.used if rows.keep else range(len(rows.used))  # the frame's index is 0..n-1: missing rows stay empty
    out = frame if rows.keep else frame.iloc[rows.used].reset_index(drop=True)
    out = out.drop(columns=[c for c in new_columns(labels, rows.keep) if c in out.columns])
    for k, label in enumerate(labels):
        out[f"proba_{label}"] = pd.Series(proba[:, k], index=at, dtype=float)
    out["predicted"] = pd.Series(predicted, index=at)
    if rows.keep:
        out["error"] = [reason or None for reason in rows.reasons]
    return out

"""The command line's tables: formats by extension (or any delimited text
with ``--sep``), the checks of an output before any work, small tables
written whole (the skipped rows' list), the checks of the columns a command
needs, and the bad rows (a missing or blank cell where the prompt or the
report needs one) for ``--bad-rows``. Inputs are read in chunks by
``chunks``; outputs are written chunk by chunk by ``sinks``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "KNOWN_FORMATS",
    "UsageError",
    "as_strings",
    "bad_row_reasons",
    "blank_rows",
    "check_cells",
    "check_output",
    "delimiter",
    "format_of",
    "missing_cells",
    "need_pyarrow",
    "parse_labels",
    "require_column",
    "shown_rows",
    "skipped_path",
    "to_stdout",
    "write_table",
]

#: File formats by extension (after an optional compression suffix for text formats).
_FORMATS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
}
_DELIMITED = ("csv", "tsv")
_COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst", ".zip")
KNOWN_FORMATS = (
    ".csv, .tsv, .parquet, .jsonl (or .json); CSV, TSV and JSON may end in "
    + ", ".join(_COMPRESSIONS)
    + "; any other name is delimited text with --sep"
)


class UsageError(Exception):
    """Bad arguments or input: reported on stderr, exit status 2."""


def format_of(path: str, role: str, sep: str | None = None) -> str:
    """The table format of ``path`` by its extension ("-" is CSV on stdin or
    stdout). With ``sep``, a name of no known table format is delimited text."""
    if path == "-":
        return "csv"
    suffixes = [s.lower() for s in Path(path).suffixes]
    compressed = bool(suffixes) and suffixes[-1] in _COMPRESSIONS
    if compressed:
        suffixes = suffixes[:-1]
    fmt = _FORMATS.get(suffixes[-1]) if suffixes else None
    if fmt is None and sep is not None:
        fmt = "csv"
    if fmt is None or (compressed and fmt == "parquet"):
        raise UsageError(f"{role} {path}: unknown format (by its extension); use {KNOWN_FORMATS}")
    return fmt


def delimiter(fmt: str, sep: str | None) -> str:
    """The field separator of delimited text: ``sep`` when given, else a tab
    for TSV and a comma for CSV."""
    return sep if sep is not None else ("\t" if fmt == "tsv" else ",")


def need_pyarrow(path: str) -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise UsageError(f"{path}: Parquet needs pyarrow, which is not installed (pip install pyarrow)") from None


def check_output(path: str | None, sep: str | None = None) -> str | None:
    """Checks before any work that the output can be written; returns its
    format. Parquet is written as a folder of part files, so OUT may be one;
    a ``.zip`` cannot be appended to chunk by chunk and is refused."""
    if path is None:
        return None
    fmt = format_of(path, "output", sep)
    if path == "-":
        return fmt
    parent = Path(path).parent
    if not parent.is_dir():
        raise UsageError(f"cannot write {path}: folder {parent} does not exist")
    if Path(path).is_dir() and fmt != "parquet":
        raise UsageError(f"cannot write {path}: it is a directory")
    if path.lower().endswith(".zip"):
        raise UsageError(f"cannot write {path}: a .zip cannot be written chunk by chunk; use .gz, .bz2 or .xz")
    if fmt == "parquet":
        need_pyarrow(path)
    return fmt


def to_stdout(frame: Any, sep: str | None, *, header: bool = True) -> bool:
    """Writes ``frame`` as delimited text (CSV unless ``sep``) on stdout;
    False when the reader has closed the pipe (e.g. ``| head``: it has what
    it wanted), after which stdout goes nowhere."""
    try:
        frame.to_csv(sys.stdout, index=False, sep=delimiter("csv", sep), header=header)
        sys.stdout.flush()
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return False
    return True


def write_table(frame: Any, path: str | None, *, sep: str | None = None) -> None:
    """Writes ``frame`` by ``path``'s extension; None or "-" is delimited
    text (CSV unless ``sep``) on stdout."""
    if path is None or path == "-":
        to_stdout(frame, sep)
        return
    fmt = format_of(path, "output", sep)
    try:
        if fmt in _DELIMITED:
            frame.to_csv(path, index=False, sep=delimiter(fmt, sep))
        elif fmt == "parquet":
            frame.to_parquet(path, index=False)
        elif fmt == "jsonl":
            frame.to_json(path, orient="records", lines=True, force_ascii=False)
        else:
            frame.to_json(path, orient="records", force_ascii=False, indent=1)
    except (OSError, ValueError, ImportError) as exc:
        raise UsageError(f"cannot write {path}: {type(exc).__name__}: {exc}") from None


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


def _blank(value: Any) -> bool:
    """A missing cell (None, NaN, NA) or a string of only whitespace."""
    import pandas as pd

    if isinstance(value, str):
        return not value.strip()
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # a list or array in a JSON cell is not missing
        return False


def blank_rows(frame: Any, column: str) -> list[int]:
    """The rows of ``frame`` (counted from 0) whose ``column`` cell is missing or blank."""
    return [i for i, value in enumerate(frame[column].tolist()) if _blank(value)]


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


def skipped_path(output: str | None, input_path: str) -> str | None:
    """Where ``--bad-rows skip`` lists the rows it leaves out unless told:
    NAME.skipped.csv beside OUT (writing to stdout: beside IN), NAME being its
    file name less its format and compression extensions. None when both are
    stdin and stdout."""
    base = output if output not in (None, "-") else input_path
    if base in (None, "-"):
        return None
    p = Path(base)
    name = p.name
    for extensions in (_COMPRESSIONS, tuple(_FORMATS)):
        for ext in extensions:
            if name.lower().endswith(ext) and len(name) > len(ext):
                name = name[: -len(ext)]
                break
    return str(p.with_name(name + ".skipped.csv"))


def parse_labels(spec: str) -> list[str]:
    labels = [part.strip() for part in spec.split(",")]
    if any(not label for label in labels):
        raise UsageError(f"--labels {spec!r} has an empty label; give them as a,b,c")
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise UsageError(f"--labels {spec!r} repeats {', '.join(duplicates)}")
    if len(labels) < 2:
        raise UsageError(f"--labels {spec!r} has one label; a classifier needs at least two")
    return labels

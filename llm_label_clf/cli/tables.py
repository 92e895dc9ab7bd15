"""The command line's tables: CSV, TSV, Parquet and JSON (Lines) read and
written by extension (or any delimited text with ``--sep``), with errors that
name the file and say what to do; the checks of the columns a command needs;
and the bad rows (a missing or blank cell where the prompt or the report needs
one), with the input line each row starts on, for ``--bad-rows``."""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "KNOWN_FORMATS",
    "Table",
    "UsageError",
    "as_strings",
    "bad_row_reasons",
    "check_cells",
    "check_output",
    "delimiter",
    "format_of",
    "parse_labels",
    "read_table",
    "record_lines",
    "require_column",
    "shown_rows",
    "skipped_path",
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


def _need_pyarrow(path: str) -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise UsageError(f"{path}: Parquet needs pyarrow, which is not installed (pip install pyarrow)") from None


@dataclass(frozen=True)
class Table:
    """A table as ``read_table`` read it: its rows, its path and format, the
    separator of delimited text (else None) and, for stdin, the text read."""

    frame: Any
    path: str
    fmt: str
    sep: str | None
    stdin_text: str | None = field(default=None, repr=False)

    def row_lines(self) -> list[int] | None:
        """The 1-based line of the input each data row starts on (delimited
        text with a header only; None otherwise, or when it cannot be told)."""
        if self.sep is None:
            return None
        if self.stdin_text is not None:
            return record_lines(io.StringIO(self.stdin_text, newline=""), self.sep, len(self.frame))
        from pandas.io.common import get_handle

        try:
            with get_handle(self.path, "r", encoding="utf-8", compression="infer") as handles:
                return record_lines(handles.handle, self.sep, len(self.frame))
        except (OSError, ValueError, ImportError):
            return None


def record_lines(source: Any, sep: str, n_rows: int) -> list[int] | None:
    """The 1-based line each data row of delimited text starts on, as pandas
    reads the text: the first record is the header, blank lines are skipped
    and a quoted field may span lines. None when the count of records differs
    from ``n_rows`` (the rows pandas read) or the text is not CSV to Python."""
    limit = csv.field_size_limit(2**31 - 1)  # long texts in one field
    try:
        reader = csv.reader(source, delimiter=sep)
        lines: list[int] = []
        previous, header = 0, True
        for record in reader:
            start, previous = previous + 1, reader.line_num
            if not record:
                continue
            if header:
                header = False
            else:
                lines.append(start)
    except csv.Error:
        return None
    finally:
        csv.field_size_limit(limit)
    return lines if len(lines) == n_rows else None


def read_table(path: str, string_columns: Sequence[str], *, sep: str | None = None) -> Table:
    """Reads CSV, TSV, Parquet or JSON Lines by extension (with ``sep``, any
    other name as delimited text). Delimited and JSON cells are kept as written:
    only an empty field is missing (``NA`` or ``null`` in a review is text), and
    JSON strings are never converted to numbers or dates."""
    import pandas as pd

    fmt = format_of(path, "input", sep)
    stdin_text = None
    if path == "-":
        stdin_text = sys.stdin.read()
        source: Any = io.StringIO(stdin_text)
    else:
        source = path
        p = Path(path)
        if not p.exists():
            raise UsageError(f"cannot read {path}: no such file")
        if p.is_dir():
            raise UsageError(f"cannot read {path}: it is a directory, not a file")
    if fmt == "parquet":
        _need_pyarrow(path)
    try:
        if fmt in _DELIMITED:
            frame = pd.read_csv(
                source,
                sep=delimiter(fmt, sep),
                dtype={c: str for c in string_columns},
                keep_default_na=False,
                na_values=[""],
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
        kind = {"csv": "CSV", "tsv": "TSV", "parquet": "Parquet", "jsonl": "JSON Lines", "json": "JSON"}[fmt]
        if fmt in _DELIMITED and sep is not None:
            kind = f"text separated by {sep!r}"
        raise UsageError(f"cannot read {path} as {kind}: {type(exc).__name__}: {exc}") from None
    if not isinstance(frame, pd.DataFrame):  # a JSON file holding one scalar or a list of scalars
        raise UsageError(f"cannot read {path} as a table of records")
    if len(frame) == 0:
        raise UsageError(f"{path} has no rows: nothing to classify")
    separator = delimiter(fmt, sep) if fmt in _DELIMITED else None
    return Table(frame.reset_index(drop=True), path, fmt, separator, stdin_text)


def check_output(path: str | None, sep: str | None = None) -> str | None:
    """Checks before any work that the output can be written; returns its format."""
    if path is None:
        return None
    fmt = format_of(path, "output", sep)
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


def write_table(frame: Any, path: str | None, *, sep: str | None = None) -> None:
    """Writes ``frame`` by ``path``'s extension; None or "-" is delimited
    text (CSV unless ``sep``) on stdout."""
    if path is None or path == "-":
        try:
            frame.to_csv(sys.stdout, index=False, sep=delimiter("csv", sep))
            sys.stdout.flush()
        except BrokenPipeError:  # e.g. piped into `head`: the reader has what it wanted
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
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


def bad_row_reasons(frame: Any, cells: Sequence[tuple[str, str]]) -> list[str]:
    """For each row of ``frame``, why it cannot be used: a missing or blank
    cell in one of ``cells`` (column, what it holds), as "no text in column
    'text'"; several reasons joined by "; ", "" for a good row."""
    reasons = [[] for _ in range(len(frame))]  # type: list[list[str]]
    for column, what in cells:
        for i, value in enumerate(frame[column].tolist()):
            if _blank(value):
                reasons[i].append(f"no {what} in column {column!r}")
    return ["; ".join(r) for r in reasons]


def shown_rows(rows: Sequence[int], limit: int = 5) -> str:
    """The first ``limit`` row numbers, comma-separated, "..." after them."""
    return ", ".join(str(i) for i in rows[:limit]) + (", ..." if len(rows) > limit else "")


def check_cells(frame: Any, cells: Sequence[tuple[str, str]], path: str, remedy: str = "fill or drop them") -> None:
    """Raises UsageError naming the first of ``cells`` (column, what it holds)
    that has missing or blank cells, and their rows; ``remedy`` ends it."""
    for column, what in cells:
        bad = [i for i, value in enumerate(frame[column].tolist()) if _blank(value)]
        if bad:
            raise UsageError(
                f"{path}: {len(bad)} row(s) have no {what} in column {column!r} "
                f"(rows {shown_rows(bad)}, counting data rows from 0); {remedy}"
            )


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

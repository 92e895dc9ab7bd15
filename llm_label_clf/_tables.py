"""The command line's tables: CSV, Parquet and JSON (Lines) read and written
by extension, with errors that name the file and say what to do, and the
checks of the columns a command needs."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["KNOWN_FORMATS", "UsageError", "as_strings", "check_output", "format_of", "parse_labels",
           "read_table", "require_column", "write_table"]

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
KNOWN_FORMATS = ".csv, .parquet, .jsonl (or .json); CSV and JSON may end in " + ", ".join(_COMPRESSIONS)


class UsageError(Exception):
    """Bad arguments or input: reported on stderr, exit status 2."""



def format_of(path: str, role: str) -> str:
    """The table format of ``path`` by its extension ("-" is CSV on stdin/stdout)."""
    if path == "-":
        return "csv"
    suffixes = [s.lower() for s in Path(path).suffixes]
    compressed = bool(suffixes) and suffixes[-1] in _COMPRESSIONS
    if compressed:
        suffixes = suffixes[:-1]
    fmt = _FORMATS.get(suffixes[-1]) if suffixes else None
    if fmt is None or (compressed and fmt == "parquet"):
        raise UsageError(f"{role} {path}: unknown format (by its extension); use {KNOWN_FORMATS}")
    return fmt


def _need_pyarrow(path: str) -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise UsageError(f"{path}: Parquet needs pyarrow, which is not installed (pip install pyarrow)") from None


def read_table(path: str, string_columns: Sequence[str]) -> Any:
    """Reads CSV, Parquet or JSON Lines by extension. CSV and JSON cells are
    kept as written: only an empty CSV field is missing (``NA`` or ``null`` in
    a review is text), and JSON strings are never converted to numbers or dates."""
    import pandas as pd

    fmt = format_of(path, "input")
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


def check_output(path: str | None) -> str | None:
    """Checks before any work that the output can be written; returns its format."""
    if path is None:
        return None
    fmt = format_of(path, "output")
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


def write_table(frame: Any, path: str | None) -> None:
    if path is None or path == "-":
        try:
            frame.to_csv(sys.stdout, index=False)
            sys.stdout.flush()
        except BrokenPipeError:  # e.g. piped into `head`: the reader has what it wanted
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    fmt = format_of(path, "output")
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


def require_column(frame: Any, column: str, path: str, option: str) -> None:
    if column not in frame.columns:
        have = ", ".join(repr(str(c)) for c in frame.columns)
        raise UsageError(f"{path} has no column {column!r} (its columns: {have}); name the right one with {option}")


def as_strings(frame: Any, column: str, path: str, what: str) -> Any:
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

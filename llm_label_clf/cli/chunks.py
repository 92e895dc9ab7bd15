"""The command line's input, read a chunk of exactly ``--chunk-rows`` rows at
a time (pandas' chunked readers, Parquet record batches); read errors name
the file and say what to do (docs/architecture.md: ``cli/chunks.py``)."""

from __future__ import annotations

import contextlib
import csv
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .tables import UsageError, delimiter, format_of, need_pyarrow

__all__ = ["CHUNK_ROWS", "Source", "open_input", "parquet_parts", "read_table", "record_starts"]

#: Rows per chunk unless ``--chunk-rows`` says otherwise: one ``predict_proba``
#: call, one write and one progress commit each (a kill loses at most this many).
CHUNK_ROWS = 1000

_KINDS = {"csv": "CSV", "tsv": "TSV", "parquet": "Parquet", "jsonl": "JSON Lines", "json": "JSON"}
_FIELDS = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def record_starts(source: Any, sep: str) -> Iterator[int]:
    """The 1-based line each data record of delimited text starts on, as
    pandas reads the text: the first record is the header, blank lines are
    skipped and a quoted field may span lines. Raises ``csv.Error`` for text
    that is not CSV to Python."""
    limit = csv.field_size_limit(2**31 - 1)  # long texts in one field
    try:
        reader = csv.reader(source, delimiter=sep)
        previous, header = 0, True
        for record in reader:
            start, previous = previous + 1, reader.line_num
            if not record:
                continue
            if header:
                header = False
            else:
                yield start
    finally:
        csv.field_size_limit(limit)


def parquet_parts(path: str) -> list[Path]:
    """The Parquet files of ``path``: itself, or a folder's visible ``*.parquet``
    files in name order (the order ``classify`` wrote its parts in)."""
    p = Path(path)
    if not p.is_dir():
        return [p]
    return sorted(f for f in p.glob("*.parquet") if not f.name.startswith((".", "_")))


@dataclass(frozen=True)
class Source:
    """An input table: its name as given (``-`` for stdin), the file read,
    its format and, for delimited text, its separator."""

    path: str
    file: str
    fmt: str
    sep: str | None

    def chunks(
        self, rows: int, string_columns: Sequence[str] = (), dtypes: dict[str, Any] | None = None
    ) -> Iterator[Any]:
        """The table's rows as DataFrames of exactly ``rows`` rows (the last
        one fewer; one empty frame, with the columns, when there are no rows),
        indexed from 0 each. Delimited and JSON cells are kept as written:
        only an empty field is missing (``NA`` or ``null`` in a review is
        text), JSON strings are never converted, and ``string_columns`` are
        read as text. ``dtypes`` fixes other columns' types (the survey's
        choice over the whole file, so that every chunk agrees). Raises
        UsageError naming the file."""
        import pandas as pd

        try:
            yield from _exact(self._frames(rows, string_columns, dtypes or {}), rows)
        except pd.errors.EmptyDataError:
            raise UsageError(f"{self.path} is empty: no header and no rows") from None
        except (OSError, ValueError, ImportError) as exc:  # parser, decoding and Arrow errors are ValueErrors
            raise UsageError(self._unreadable(exc)) from None

    def _frames(self, rows: int, string_columns: Sequence[str], dtypes: dict[str, Any]) -> Iterator[Any]:
        import pandas as pd

        if self.fmt in ("csv", "tsv"):
            dtype = {**dtypes, **{c: str for c in string_columns}}
            yield from pd.read_csv(
                self.file, sep=self.sep, dtype=dtype, keep_default_na=False, na_values=[""], chunksize=rows
            )
            return
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            for part in parquet_parts(self.file):
                for batch in pq.ParquetFile(part).iter_batches(batch_size=rows):
                    yield batch.to_pandas()
            return
        json = {"lines": True, "dtype": False, "convert_dates": False, "chunksize": rows}
        if self.fmt == "jsonl":
            frames = pd.read_json(self.file, **json)
        else:  # .json: JSON Lines, or else one array of records (read whole: it has no parts)
            try:
                frames = list(pd.read_json(self.file, **json))
            except ValueError:
                frames = [pd.read_json(self.file, dtype=False, convert_dates=False)]
            if any(not isinstance(f, pd.DataFrame) for f in frames):
                raise UsageError(f"cannot read {self.path} as a table of records")
        for frame in frames:  # JSON values keep their JSON types; only a column whose type varies is widened
            wanted = {c: t for c, t in dtypes.items() if c in frame.columns and frame[c].dtype != t}
            yield frame.astype(wanted) if wanted else frame

    def _unreadable(self, exc: Exception) -> str:
        """A read error's message: the file and format, and, when a delimited
        line has more fields than the header, which line and what to do."""
        kind = f"text separated by {self.sep!r}" if self.sep not in (None, ",", "\t") else _KINDS[self.fmt]
        found = _FIELDS.search(str(exc)) if self.fmt in ("csv", "tsv") else None
        if found is None:
            return f"cannot read {self.path} as {kind}: {type(exc).__name__}: {exc}"
        expected, line, saw = found.groups()
        said = f"cannot read {self.path} as {kind}: line {line} has {saw} fields where the header has {expected}"
        if self.sep == "," and "\t" in self.header():
            return f"{said}; its header holds tabs: if the file is tab-separated, pass --sep '\\t' (or name it .tsv)"
        return f"{said}: quote the fields that hold {self.sep!r}, or pass the file's separator with --sep"

    def header(self) -> str:
        """The file's first line ("" when it cannot be read)."""
        from pandas.io.common import get_handle

        try:
            with get_handle(self.file, "r", encoding="utf-8", compression="infer") as handles:
                return handles.handle.readline()
        except (OSError, ValueError, ImportError):
            return ""

    def lines(self) -> Iterator[int]:
        """``record_starts`` of this delimited file (raises ``csv.Error``)."""
        from pandas.io.common import get_handle

        with get_handle(self.file, "r", encoding="utf-8", compression="infer") as handles:
            yield from record_starts(handles.handle, self.sep or ",")


def _exact(frames: Iterator[Any], rows: int) -> Iterator[Any]:
    """``frames`` re-cut into frames of exactly ``rows`` rows (the last one
    fewer; one empty frame, with the columns, when there are no rows)."""
    import pandas as pd

    held, yielded = None, False
    for frame in frames:
        fresh = held is None or not len(held)  # an empty remainder would change the next one's types
        held = frame.reset_index(drop=True) if fresh else pd.concat([held, frame], ignore_index=True)
        while len(held) >= rows:
            yield held.iloc[:rows].reset_index(drop=True)
            held, yielded = held.iloc[rows:].reset_index(drop=True), True
    if held is not None and (len(held) or not yielded):
        yield held


@contextlib.contextmanager
def open_input(path: str, sep: str | None) -> Iterator[Source]:
    """The input ``path`` as a Source (stdin copied to a temporary file,
    removed on exit). Raises UsageError for a missing file, a folder that is
    not Parquet, an unknown format or Parquet without pyarrow."""
    fmt = format_of(path, "input", sep)
    separator = delimiter(fmt, sep) if fmt in ("csv", "tsv") else None
    if path == "-":
        handle, spooled = tempfile.mkstemp(prefix="llm-label-clf-stdin-", suffix=".csv")
        try:
            with os.fdopen(handle, "w", encoding="utf-8", newline="") as copy:
                shutil.copyfileobj(sys.stdin, copy)
            yield Source(path, spooled, fmt, separator)
        finally:
            Path(spooled).unlink(missing_ok=True)
        return
    p = Path(path)
    if not p.exists():
        raise UsageError(f"cannot read {path}: no such file")
    if p.is_dir() and fmt != "parquet":
        raise UsageError(f"cannot read {path}: it is a directory, not a file")
    if fmt == "parquet":
        need_pyarrow(path)
        if p.is_dir() and not parquet_parts(path):
            raise UsageError(f"cannot read {path}: a folder without Parquet files")
    yield Source(path, path, fmt, separator)


def read_table(path: str, string_columns: Sequence[str], *, sep: str | None = None) -> Any:
    """A whole table as one DataFrame (``--train``, which is fitted on at
    once), read by the same rules as the chunks. Raises UsageError for a file
    without rows."""
    import pandas as pd

    with open_input(path, sep) as source:
        frames = list(source.chunks(CHUNK_ROWS, string_columns))
    if not frames or not sum(len(f) for f in frames):
        raise UsageError(f"{path} has no rows: nothing to classify")
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]

"""The command line's output, written chunk by chunk: text formats appended to
one file (its length is the committed state), Parquet as a folder of part
files, delimited text on stdout (docs/architecture.md: ``cli/sinks.py``)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .tables import UsageError, delimiter, to_stdout

__all__ = ["Sink", "open_sink", "write_atomically"]


def write_atomically(path: str | Path, write: Callable[[str], None]) -> None:
    """Calls ``write`` with a hidden temporary name beside ``path`` (same
    extension), fsyncs it and renames it onto ``path`` (and syncs the folder
    where the system allows it): a reader, or a run killed at any point,
    finds the old file or the new one, never a part."""
    target = Path(path)
    temporary = target.with_name(f".tmp-{target.name}")
    write(str(temporary))
    with open(temporary, "rb") as written:
        os.fsync(written.fileno())
    os.replace(temporary, target)
    try:
        folder = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except OSError:
        pass


def _compressor(path: str) -> Callable[[bytes], bytes]:
    """Compresses one chunk as a member of its own, by ``path``'s suffix."""
    suffix = Path(path).suffix.lower()
    if suffix == ".gz":
        import gzip

        return lambda data: gzip.compress(data, mtime=0)
    if suffix == ".zst":
        try:
            import zstandard
        except ImportError:
            raise UsageError(f"cannot write {path}: .zst needs zstandard (pip install zstandard)") from None
        return zstandard.ZstdCompressor().compress
    if suffix in (".bz2", ".xz"):
        import bz2
        import lzma

        return bz2.compress if suffix == ".bz2" else lzma.compress
    return lambda data: data


def _replace(path: Path, folder: bool) -> None:
    """Removes whatever is at ``path`` and puts an empty file (or folder) there."""
    if path.is_dir():
        shutil.rmtree(path)
    path.unlink(missing_ok=True)
    if folder:
        path.mkdir()
    else:
        path.touch()


class Sink:
    """An output, and what the stream needs of one; this base writes nothing
    (``evaluate`` without ``-o``: the report is the result)."""

    rows = 0

    def state(self) -> dict[str, int]:
        """The committed state, as the progress file records it."""
        return {}

    def begin(self, state: dict[str, int] | None) -> None:
        """Starts a fresh output (None: any old one removed) or goes back to
        a committed ``state``."""

    def write(self, frame: Any) -> bool:
        """Appends one chunk's rows, durably; False when nothing reads on."""
        return True

    def finish(self) -> None:
        """Closes the output (a JSON array's bracket)."""


class TextSink(Sink):
    """A CSV, TSV, JSON Lines or JSON-array file, appended chunk by chunk.
    The header (CSV, TSV) or the opening bracket (JSON) comes with the first
    chunk; a JSON array is closed by ``finish``."""

    def __init__(self, path: str, fmt: str, sep: str | None) -> None:
        self.path, self.fmt, self.sep = path, fmt, delimiter(fmt, sep) if fmt in ("csv", "tsv") else None
        self.compress, self.size = _compressor(path), 0

    def state(self) -> dict[str, int]:
        return {"bytes": self.size, "rows": self.rows}

    def begin(self, state: dict[str, int] | None) -> None:
        target = Path(self.path)
        if state is None:
            _replace(target, folder=False)
            return
        size = target.stat().st_size if target.is_file() else -1
        if size < state["bytes"]:
            raise UsageError(
                f"cannot resume {self.path}: it holds {max(size, 0)} bytes where its progress file says "
                f"{state['bytes']} were written, so it was changed after the run; start over with --overwrite"
            )
        os.truncate(target, state["bytes"])  # a torn last line, or a chunk written but not committed, goes
        self.size, self.rows = state["bytes"], state["rows"]

    def write(self, frame: Any) -> bool:
        if self.fmt in ("csv", "tsv"):
            text = frame.to_csv(index=False, sep=self.sep, header=self.size == 0, lineterminator="\n")
        else:
            text = frame.to_json(orient="records", lines=True, force_ascii=False) if len(frame) else ""
            text += "\n" if text and not text.endswith("\n") else ""
            if self.fmt == "json":  # a JSON record is one line: its strings escape line breaks
                body = ",\n".join(text.splitlines())
                text = ("[\n" if self.size == 0 else ",\n" if body and self.rows else "") + body
        self._append(text)
        self.rows += len(frame)
        return True

    def _append(self, text: str) -> None:
        if not text:
            return
        data = self.compress(text.encode("utf-8"))
        try:
            with open(self.path, "ab") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            raise UsageError(f"cannot write {self.path}: {type(exc).__name__}: {exc}") from None
        self.size += len(data)

    def finish(self) -> None:
        if self.fmt == "json":
            self._append(("\n]\n" if self.rows else "]\n") if self.size else "[]\n")


class ParquetSink(Sink):
    """A folder of Parquet part files, one per chunk that has rows, named by
    the chunk's number; every part has the first part's schema (a column that
    is empty in the first part is text)."""

    PART = re.compile(r"part-(\d+)\.parquet")

    def __init__(self, path: str) -> None:
        self.path, self.chunks, self.schema = Path(path), 0, None

    def state(self) -> dict[str, int]:
        return {"chunks": self.chunks, "rows": self.rows}

    def begin(self, state: dict[str, int] | None) -> None:
        import pyarrow.parquet as pq

        if state is None:
            _replace(self.path, folder=True)
            return
        if not self.path.is_dir():
            raise UsageError(
                f"cannot resume {self.path}: its progress file describes a folder of Parquet parts, which is "
                "not there; start over with --overwrite"
            )
        for part in self.path.iterdir():
            found = self.PART.fullmatch(part.name)
            if part.name.startswith(".tmp-") or (found and int(found.group(1)) >= state["chunks"]):
                part.unlink()  # a part not committed, or a temporary file of a killed write
        parts = sorted(p for p in self.path.iterdir() if self.PART.fullmatch(p.name))
        self.chunks, self.rows = state["chunks"], state["rows"]
        self.schema = pq.read_schema(parts[0]) if parts else None

    def write(self, frame: Any) -> bool:
        import pyarrow as pa
        import pyarrow.parquet as pq

        index, self.chunks = self.chunks, self.chunks + 1
        if len(frame) == 0:
            return True
        if self.schema is None:
            table = pa.Table.from_pandas(frame, preserve_index=False)
            fields = [pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f for f in table.schema]
            self.schema = pa.schema(fields, metadata=table.schema.metadata)
            table = table.cast(self.schema)
        else:
            table = pa.Table.from_pandas(frame, schema=self.schema, preserve_index=False)
        part = self.path / f"part-{index:08d}.parquet"
        try:
            write_atomically(part, lambda name: pq.write_table(table, name))
        except OSError as exc:
            raise UsageError(f"cannot write {part}: {type(exc).__name__}: {exc}") from None
        self.rows += len(frame)
        return True


class StdoutSink(Sink):
    """Delimited text on stdout (CSV unless ``--sep``), the header once."""

    def __init__(self, sep: str | None) -> None:
        self.sep, self.open, self.first = sep, True, True

    def write(self, frame: Any) -> bool:
        self.open = self.open and to_stdout(frame, self.sep, header=self.first)
        self.first = False
        return self.open


def open_sink(path: str | None, fmt: str | None, sep: str | None) -> Sink:
    """The sink of ``-o OUT`` by OUT's format ("-": stdout; None: none)."""
    if path is None:
        return Sink()
    if path == "-":
        return StdoutSink(sep)
    return ParquetSink(path) if fmt == "parquet" else TextSink(path, fmt or "csv", sep)

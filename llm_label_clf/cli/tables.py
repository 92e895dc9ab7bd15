"""The command line's tables: formats by extension (or any delimited text
with ``--sep``), the checks of an output before any work, small tables
written whole (the skipped rows' list), the checks of the columns a command
needs, and the bad rows (a missing or blank cell where the prompt or the
report needs one) for ``--bad-rows``. Inputs are read in chunks by
``chunks``; outputs are written chunk by chunk by ``sinks``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

__all__ = [
    "KNOWN_FORMATS", "UsageError", "check_output", "delimiter", "format_of", "need_pyarrow", "parse_labels",
    "skipped_path", "to_stdout", "write_table",
]  # fmt: skip

#: File formats by extension (after an optional compression suffix for text formats).
_FORMATS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl",
            ".ndjson": "jsonl", ".json": "json"}  # fmt: skip
_COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst", ".zip")
KNOWN_FORMATS = (
    f".csv, .tsv, .parquet, .jsonl (or .json); CSV, TSV and JSON may end in {', '.join(_COMPRESSIONS)}; "
    "any other name is delimited text with --sep"
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
        if fmt in ("csv", "tsv"):
            frame.to_csv(path, index=False, sep=delimiter(fmt, sep))
        elif fmt == "parquet":
            frame.to_parquet(path, index=False)
        elif fmt == "jsonl":
            frame.to_json(path, orient="records", lines=True, force_ascii=False)
        else:
            frame.to_json(path, orient="records", force_ascii=False, indent=1)
    except (OSError, ValueError, ImportError) as exc:
        raise UsageError(f"cannot write {path}: {type(exc).__name__}: {exc}") from None


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

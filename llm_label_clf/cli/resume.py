"""What lets ``classify --resume`` continue a killed run (the progress file
``OUT.progress.json``, the input's row digest), and keeps a run from
overwriting an output it was not told to replace (docs/architecture.md:
``cli/resume.py``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .sinks import write_atomically
from .tables import UsageError

__all__ = ["Progress", "RowDigest", "check_targets", "first_changed_row", "progress_path", "setting_changes"]

#: The progress file's layout version; another is refused.
VERSION = 1


def progress_path(output: str) -> Path:
    """The progress file of the output ``output``: beside it, ``.progress.json`` added."""
    return Path(f"{output}.progress.json")


@dataclass
class Progress:
    """A run's committed progress, as ``OUT.progress.json`` holds it."""

    input: str
    rows: int
    chunks: int
    digest: str
    output: dict[str, int]
    settings: dict[str, Any]
    complete: bool = False
    version: int = field(default=VERSION)

    def save(self, path: Path | None) -> None:
        """Replaces ``path`` atomically with this progress (None: an output without one)."""
        if path is None:
            return
        text = json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"
        write_atomically(path, lambda name: Path(name).write_text(text, encoding="utf-8"))

    @classmethod
    def load(cls, path: Path, output: str) -> Progress:
        """The progress in ``path``; raises UsageError naming it when it is
        not a progress file of this version."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("version") != VERSION:
                raise ValueError(f"version {data.get('version')!r}, this command writes {VERSION}")
            return cls(**data)
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise UsageError(
                f"cannot resume {output}: its progress file {path} is unreadable ({type(exc).__name__}: {exc}); "
                "start over with --overwrite"
            ) from None


class RowDigest:
    """A SHA-256 digest of the given columns' cells, row after row: each cell
    as its length and text (a missing cell marked apart from any text), so
    no two different tables of cells give the same stream of bytes."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        self._hash = hashlib.sha256()

    def update(self, frame: Any) -> None:
        for row in _cells(frame, self.columns):
            self._hash.update(
                "".join("\x00" if v is None else f"\x01{len(v)}:{v}" for v in row).encode("utf-8") + b"\x1e"
            )

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def _cells(frame: Any, columns: Sequence[str]) -> Iterator[tuple[str | None, ...]]:
    """Each row's cells of ``columns``, as text (None for a missing cell)."""
    values = []
    for column in columns:
        cells = zip(frame[column].tolist(), frame[column].isna().tolist(), strict=True)
        values.append([None if missing else v if isinstance(v, str) else str(v) for v, missing in cells])
    return zip(*values, strict=True)


def setting_changes(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The options whose value differs between the run that wrote the output
    and this one, each as ``--option: was X, now Y``."""
    names = {"engine_options": "--engine-option", "train": "--train (its content)", "command": "the command"}
    changed = []
    for key in sorted(set(before) | set(now)):
        if before.get(key) != now.get(key):
            name = names.get(key, "--" + key.replace("_", "-"))
            changed.append(f"{name}: was {before.get(key)!r}, now {now.get(key)!r}")
    return changed


def check_targets(output: str | None, *, resume: bool, overwrite: bool, fmt: str | None) -> None:
    """Before any work: ``--resume`` and ``--overwrite`` make sense here, and
    without either an existing output is not replaced. Raises UsageError
    naming the file and the ways out. (The skipped rows' list is derived
    from IN: each run rewrites it whole.)"""
    if resume and overwrite:
        raise UsageError("--resume continues OUT and --overwrite replaces it: pass one of them")
    if resume and output in (None, "-"):
        raise UsageError("--resume continues an output file: name it with -o OUT")
    if resume and fmt == "json":
        raise UsageError(
            f"--resume cannot continue {output}: a JSON array is unreadable until it is closed; write JSON Lines "
            "(.jsonl), CSV, TSV or Parquet to resume"
        )
    if resume or overwrite or output in (None, "-") or not Path(output).exists():
        return
    if Path(output).is_dir() and not any(Path(output).iterdir()):
        return
    raise UsageError(
        f"{output} exists: pass --resume to continue the run that wrote it (if it was stopped), or --overwrite "
        "to replace it"
    )


def first_changed_row(
    inputs: Iterator[Any], written: Iterator[Any], columns: Sequence[str], rows: int, listed: set[int]
) -> int | None:
    """The first of the input's first ``rows`` rows whose cells (``columns``)
    differ from the output row written for it; rows in ``listed`` (skipped,
    so not in the output) are passed over. None when every compared row agrees."""
    out = (cells for frame in written for cells in _cells(frame, columns))
    row = 0
    for frame in inputs:
        for cells in _cells(frame, columns):
            if row >= rows:
                return None
            if row not in listed and next(out, None) != cells:
                return row
            row += 1
    return None if row >= rows else row

"""The read store's database: one SQLite file of label reads that every
process on the machine reading with it shares (the estimator, loky workers,
the command line), opened once per process and path (``database``)."""

from __future__ import annotations

import atexit
import hashlib
import os
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..exceptions import ReadStoreError

__all__ = [
    "BUSY_TIMEOUT_S",
    "SCHEMA",
    "VERSION",
    "Database",
    "ModelReads",
    "StoreWriteError",
    "StoredRead",
    "database",
    "prompt_digest",
]

SCHEMA = "llm_label_clf.read_store"
VERSION = 1
#: How long a writer waits for another process's transaction before failing.
BUSY_TIMEOUT_S = 120.0
#: Prompt digests per SELECT (SQLite before 3.32 allows 999 parameters a statement).
LOOKUP_CHUNK = 900
#: SQLite's primary result codes of a write that fails for room or permission, not for a damaged
#: file (a write past RLIMIT_FSIZE fails with EFBIG: SQLITE_IOERR_WRITE).
_WRITE_FAILURES = {sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM,
                   sqlite3.SQLITE_IOERR}
_TABLES = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE spaces (id INTEGER PRIMARY KEY AUTOINCREMENT, reader TEXT NOT NULL, sequences TEXT NOT NULL, "
    "model TEXT NOT NULL, key TEXT NOT NULL, UNIQUE (reader, sequences))",
    "CREATE TABLE reads (space INTEGER NOT NULL, prompt BLOB NOT NULL, logprobs BLOB NOT NULL, "
    "top INTEGER NOT NULL, mass BLOB, crc INTEGER NOT NULL, PRIMARY KEY (space, prompt)) WITHOUT ROWID",
)
_SELECT = "SELECT prompt, logprobs, top, mass, crc FROM reads WHERE space = ?"
_WHAT_TO_DO = "delete the file (what it held is read again) or give read_store another path"


class StoreWriteError(ReadStoreError):
    """A batch could not be written (disk full, file-size limit, read-only
    file); the store's earlier reads are intact."""


@dataclass(frozen=True)
class StoredRead:
    """One prompt's stored read: each label sequence's logprob, the model's
    top token, and the log of the first-token label mass (None: none read)."""

    logprobs: np.ndarray
    top_token: int
    first_logmass: float | None


@dataclass(frozen=True)
class ModelReads:
    """What ``Database.models`` reports per reader: the model as the
    estimator named it, its reader key (JSON), its label sets and reads."""

    model: str
    key: str
    label_sets: int
    reads: int


def prompt_digest(ids: Sequence[int]) -> bytes:
    """The SHA-256 of a prompt's token ids (int64, little-endian): its key."""
    return hashlib.sha256(np.asarray(ids, dtype="<i8").tobytes()).digest()


def _crc(prompt: bytes, logprobs: bytes, top: int, mass: bytes | None) -> int:
    return zlib.crc32(prompt + logprobs + int(top).to_bytes(8, "little", signed=True) + (mass or b""))


class Database:
    """The read store at ``path`` as this process sees it: one connection
    (made on first use, shared by threads under a lock), the space ids it
    has looked up, and this process's counts of reads ``found`` in it and
    ``stored`` into it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.found = 0
        self.stored = 0
        self.writes_failed = False
        self._lock = threading.RLock()
        self._connection: sqlite3.Connection | None = None
        self._spaces: dict[tuple[str, str], int] = {}

    # ------------------------------------------------------------ opening

    def error(self, exc: BaseException, doing: str, *, writing: bool = True) -> ReadStoreError:
        """``exc`` as the ``ReadStoreError`` to raise, naming the file, what was
        being done and what to do: a ``StoreWriteError`` when ``writing`` failed
        for room or permission (opening writes too: WAL's index file)."""
        if isinstance(exc, ReadStoreError):
            return exc
        code = getattr(exc, "sqlite_errorcode", None)
        if writing and ((code is not None and code & 0xFF in _WRITE_FAILURES) or isinstance(exc, OSError)):
            folder = self.path.parent
            writable = os.access(folder, os.W_OK) and (not self.path.exists() or os.access(self.path, os.W_OK))
            if writable:
                todo = "free space, or give read_store a path on a disk with room"
            else:
                todo = f"{folder} or the file is not writable: give read_store a path in a writable folder"
            return StoreWriteError(f"read store {self.path}: cannot {doing} ({exc}): {todo}")
        return ReadStoreError(f"read store {self.path}: cannot {doing}: {exc}. The file is damaged or is not a "
                              f"read store of llm_label_clf: {_WHAT_TO_DO}")

    def connection(self) -> sqlite3.Connection:
        """The open connection, checked (or the store created) on first use.
        Raises ReadStoreError naming the file."""
        with self._lock:
            if self._connection is None:
                self._connection = self._open()
            return self._connection

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except (sqlite3.Error, OSError) as exc:
            raise self.error(exc, "create or open it") from exc
        try:
            self._check(connection)
            mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise ReadStoreError(
                    f"read store {self.path}: its file system does not support SQLite's WAL mode (journal mode "
                    f"{mode!r}), which lets several processes share it: give read_store a path on a local disk"
                )
            connection.execute("PRAGMA synchronous=NORMAL")
        except BaseException as exc:
            connection.close()
            if isinstance(exc, sqlite3.Error | OSError):
                raise self.error(exc, "open it") from exc
            raise
        return connection

    def _check(self, connection: sqlite3.Connection) -> None:
        """Checks the header of an existing file without writing to it, or
        creates the tables in a new (empty) one."""
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            connection.execute("BEGIN IMMEDIATE")
            with connection:  # commits, or rolls back on any error
                if not connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                    for statement in _TABLES:
                        connection.execute(statement)
                    connection.executemany(
                        "INSERT INTO meta VALUES (?, ?)", [("schema", SCHEMA), ("version", str(VERSION))]
                    )
            tables = {"meta"}
        if "meta" not in tables:
            shown = ", ".join(sorted(tables)[:5])
            raise ReadStoreError(
                f"read store {self.path} is an SQLite database of something else (tables {shown}; no 'meta' "
                f"table naming {SCHEMA!r}); it was left as it is: give read_store another path"
            )
        meta = dict(connection.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("schema") != SCHEMA:
            raise ReadStoreError(
                f"read store {self.path} is an SQLite database of something else (its meta table names schema "
                f"{meta.get('schema')!r}, not {SCHEMA!r}); it was left as it is: give read_store another path"
            )
        if str(meta.get("version")) != str(VERSION):
            raise ReadStoreError(
                f"read store {self.path} has schema version {meta.get('version')!r}; this llm_label_clf reads "
                f"version {VERSION}: use the llm_label_clf that wrote it, or {_WHAT_TO_DO}"
            )

    def close(self) -> None:
        """Closes the connection (the next use opens it again)."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
                self._spaces.clear()

    # ------------------------------------------------------------ reads

    def space(self, reader: str, sequences: str, *, model: str, key: str) -> int:
        """The id of the space of (``reader``, ``sequences``), created if new."""
        known = self._spaces.get((reader, sequences))
        if known is not None:
            return known
        find = "SELECT id FROM spaces WHERE reader = ? AND sequences = ?"
        with self._lock:
            connection = self.connection()
            try:
                row = connection.execute(find, (reader, sequences)).fetchone()
                if row is None:
                    connection.execute("BEGIN IMMEDIATE")
                    with connection:
                        add = "INSERT OR IGNORE INTO spaces (reader, sequences, model, key) VALUES (?, ?, ?, ?)"
                        connection.execute(add, (reader, sequences, model, key))
                    row = connection.execute(find, (reader, sequences)).fetchone()
            except sqlite3.Error as exc:
                raise self.error(exc, "look up or add a reader") from exc
            self._spaces[(reader, sequences)] = int(row[0])
            return int(row[0])

    def get(self, space: int, digests: Iterable[bytes], width: int) -> dict[bytes, StoredRead]:
        """The stored reads of the prompts ``digests`` in ``space`` (absent ones
        left out). Raises ReadStoreError when a row is damaged (its CRC or its
        width of ``width`` logprobs does not match)."""
        wanted = list(digests)
        found: dict[bytes, StoredRead] = {}
        with self._lock:
            connection = self.connection()
            try:
                for start in range(0, len(wanted), LOOKUP_CHUNK):
                    chunk = wanted[start : start + LOOKUP_CHUNK]
                    marks = ",".join("?" * len(chunk))
                    query = f"{_SELECT} AND prompt IN ({marks})"
                    for prompt, logprobs, top, mass, crc in connection.execute(query, (space, *chunk)):
                        sizes_ok = len(logprobs) == 8 * width and (mass is None or len(mass) == 8)
                        if not sizes_ok or _crc(prompt, logprobs, top, mass) != crc:
                            raise ReadStoreError(
                                f"read store {self.path}: a stored read fails its check (space {space}): the file "
                                f"is damaged: {_WHAT_TO_DO}"
                            )
                        first = None if mass is None else float(np.frombuffer(mass, dtype="<f8")[0])
                        found[prompt] = StoredRead(np.frombuffer(logprobs, dtype="<f8").copy(), int(top), first)
            except sqlite3.Error as exc:
                raise self.error(exc, "read it", writing=False) from exc
            self.found += len(found)
        return found

    def put(self, space: int, reads: Sequence[tuple[bytes, StoredRead]]) -> None:
        """Stores ``reads`` (prompt digest, read) in ``space`` in one
        transaction; a prompt already stored keeps its row. Raises
        StoreWriteError when the write fails for room or permission (nothing
        of the batch is stored), ReadStoreError when the file is damaged."""
        rows = []
        for prompt, read in reads:
            logprobs = np.ascontiguousarray(read.logprobs, dtype="<f8").tobytes()
            mass = None if read.first_logmass is None else np.float64(read.first_logmass).astype("<f8").tobytes()
            crc = _crc(prompt, logprobs, read.top_token, mass)
            rows.append((space, prompt, logprobs, int(read.top_token), mass, crc))
        with self._lock:
            connection = self.connection()
            try:
                connection.execute("BEGIN IMMEDIATE")
                with connection:  # one transaction: nothing of the batch is stored if it fails
                    connection.executemany("INSERT OR IGNORE INTO reads VALUES (?, ?, ?, ?, ?, ?)", rows)
            except (sqlite3.Error, OSError) as exc:
                raise self.error(exc, f"store {len(rows)} reads") from exc
            self.stored += len(rows)

    # ------------------------------------------------------------ what it holds

    def count(self) -> int:
        """How many reads the store holds (one per prompt and label set)."""
        with self._lock:
            try:
                return int(self.connection().execute("SELECT COUNT(*) FROM reads").fetchone()[0])
            except sqlite3.Error as exc:
                raise self.error(exc, "count its reads", writing=False) from exc

    def models(self) -> list[ModelReads]:
        """Per reader key (model weights, dtype and options), what it holds, most reads first."""
        query = (
            "SELECT s.model, s.key, COUNT(DISTINCT s.id), COUNT(r.prompt) FROM spaces s "
            "LEFT JOIN reads r ON r.space = s.id GROUP BY s.reader ORDER BY COUNT(r.prompt) DESC"
        )
        with self._lock:
            try:
                return [ModelReads(m, k, int(n), int(c)) for m, k, n, c in self.connection().execute(query)]
            except sqlite3.Error as exc:
                raise self.error(exc, "list its models", writing=False) from exc

    def clear(self) -> int:
        """Deletes every read and space (space ids are never reused) and
        gives the room back to the file system; returns the reads deleted."""
        with self._lock:
            connection = self.connection()
            try:
                held = self.count()
                connection.execute("BEGIN IMMEDIATE")
                with connection:
                    connection.execute("DELETE FROM reads")
                    connection.execute("DELETE FROM spaces")
                connection.execute("VACUUM")
                connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:
                raise self.error(exc, "clear it") from exc
            self._spaces.clear()
            return held


_open: dict[tuple[str, int], Database] = {}
_open_lock = threading.Lock()


def database(path: str | os.PathLike[str]) -> Database:
    """This process's ``Database`` for ``path`` (one per absolute path and
    process: a forked child opens its own connection). Opens nothing yet."""
    location = Path(os.fspath(path)).expanduser().absolute()
    key = (str(location), os.getpid())
    with _open_lock:
        found = _open.get(key)
        if found is None:
            found = _open[key] = Database(location)
        return found


@atexit.register
def _close_all() -> None:
    """Closes this process's connections at exit (the last one out folds the WAL back into the file)."""
    for (_, pid), db in list(_open.items()):
        if pid == os.getpid():
            db.close()

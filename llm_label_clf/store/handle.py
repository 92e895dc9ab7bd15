"""The read store as the estimator sees it: ``ReadStore`` (plain data: its
path), ``open_read_store`` (which store, if any, and is it usable; before
any engine) and ``store_ref`` (the reader key a fit's plans carry).
Remote servers (``base_url``) read without a store."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .fingerprint import reader_key
from .sqlite import Database, ModelReads, database

__all__ = ["READ_STORE_ENV", "ReadStore", "StoreInfo", "StoreRef", "check_read_store", "open_read_store", "store_ref"]

#: Set to a path to give every estimator without a ``read_store`` that store.
READ_STORE_ENV = "LLM_LABEL_CLF_READ_STORE"


@dataclass(frozen=True)
class StoreInfo:
    """What a read store holds: its file, its size on disk in bytes (the
    database with its write-ahead log), its reads, and per reader key (model
    weights, dtype, options) its model name, label sets and reads."""

    path: Path
    bytes: int
    reads: int
    models: list[ModelReads]


@dataclass(frozen=True)
class ReadStore:
    """A persistent store of label reads: an SQLite file at ``path``.

    Pass it (or the path alone) as ``LLMLabelClassifier(read_store=...)``:
    reads found there are not read again, and every read the engine makes is
    stored batch by batch, so a killed run loses at most its batch in flight.
    A read is found only when everything that changes its numbers matches:
    the model's files (fingerprinted), the engine settings that change
    numbers, the vLLM and torch versions, the device, the prompt's token
    ids and the label token sequences read. The handle is plain data: clones
    and pickles carry the path; each process opens its own connection.

    Parameters
    ----------
    path : str or PathLike
        The store's file; created, with its folder, on first use.

    Examples
    --------
    >>> from llm_label_clf.store import ReadStore
    >>> ReadStore("~/reads.sqlite")
    ReadStore(path='~/reads.sqlite')
    """

    path: str | os.PathLike[str]

    @property
    def database(self) -> Database:
        """This process's database for the path (opened on first use)."""
        return database(self.path)

    def info(self) -> StoreInfo:
        """Its size, reads and models. Raises ReadStoreError naming the file
        when it is not a read store or is damaged."""
        db = self.database
        reads, models = db.count(), db.models()
        size = sum(p.stat().st_size for p in (db.path, db.path.with_name(db.path.name + "-wal")) if p.exists())
        return StoreInfo(db.path, size, reads, models)

    def clear(self) -> int:
        """Deletes every stored read (the file stays, empty); returns how many."""
        return self.database.clear()

    @property
    def found(self) -> int:
        """The reads this process found in the store (not read again)."""
        return self.database.found

    @property
    def stored(self) -> int:
        """The reads this process stored (read by the engine)."""
        return self.database.stored


@dataclass(frozen=True)
class StoreRef:
    """Where a reading plan's reads are stored and under which reader:
    the store's ``path``, the reader key's SHA-256 (``reader``), the key
    itself as JSON (``key``, shown by ``store info``) and the model as the
    estimator named it."""

    path: str
    reader: str
    key: str
    model: str

    @property
    def database(self) -> Database:
        return database(self.path)


def check_read_store(value: Any) -> str | None:
    """The parameter check of ``read_store``: None when valid, else what it must be."""
    if value is None or isinstance(value, ReadStore) or (isinstance(value, str | os.PathLike) and os.fspath(value)):
        return None
    return "must be None, a path (str or PathLike) to a read store file, or a ReadStore"


def _chosen(estimator: Any) -> ReadStore | None:
    """The estimator's store: its ``read_store``, else the environment's
    (for embedded engines only), else None."""
    value = estimator.read_store
    if value is None:
        env = os.environ.get(READ_STORE_ENV, "").strip()
        if not env or estimator.base_url is not None:
            return None
        value = env
    return value if isinstance(value, ReadStore) else ReadStore(value)


def open_read_store(estimator: Any) -> ReadStore | None:
    """The store ``estimator`` reads through, opened and checked (created
    when new), or None. Raises ValueError for a store with ``base_url``;
    ReadStoreError naming the file when it is not a read store, is damaged,
    or cannot be created or written."""
    store = _chosen(estimator)
    if store is None:
        return None
    if estimator.base_url is not None:
        raise ValueError(
            f"{type(estimator).__name__}: read_store={estimator.read_store!r} needs an embedded engine: a remote "
            "server reports its model's name but nothing of its weights, dtype or options, so a model updated "
            "behind the same name would get stale reads. Pass read_store=None with base_url"
        )
    store.database.connection()
    return store


def store_ref(estimator: Any) -> StoreRef | None:
    """The ``StoreRef`` of ``estimator``'s reads (its store and reader key),
    or None without a store. Call after ``open_read_store``; a hub model's
    files are downloaded first (as its engine's start would), no engine
    starts. Raises ReadStoreError when they cannot be fingerprinted."""
    store = _chosen(estimator)
    if store is None:
        return None
    key = json.dumps(reader_key(estimator.model, estimator.engine_options), sort_keys=True)
    reader = hashlib.sha256(key.encode()).hexdigest()
    return StoreRef(str(store.database.path), reader, key, str(estimator.model))


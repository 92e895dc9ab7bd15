"""The persistent read store: label reads kept on disk, so a killed run, a
rerun, a cross-validation or another process sharing the file never reads a
prompt twice (``LLMLabelClassifier(read_store=...)``, or the
``LLM_LABEL_CLF_READ_STORE`` environment variable for whole scripts).

``sqlite`` is the database (SQLite in WAL mode; why, and how a kill, two
writers, a damaged or foreign file and a full disk are met); ``fingerprint``
the reader key that a stored read must match (the model's files, the engine
settings that change numbers, versions, device); ``handle`` the
``ReadStore`` handle and the two steps of ``fit`` that use it. Reading
through the store is ``reading.stored``'s job."""

from .fingerprint import model_fingerprint, reader_key
from .handle import READ_STORE_ENV, ReadStore, StoreInfo, StoreRef, check_read_store, open_read_store, store_ref

__all__ = [
    "READ_STORE_ENV",
    "ReadStore",
    "StoreInfo",
    "StoreRef",
    "check_read_store",
    "model_fingerprint",
    "open_read_store",
    "reader_key",
    "store_ref",
]

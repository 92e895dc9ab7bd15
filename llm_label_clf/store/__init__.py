"""The persistent read store: label reads kept on disk, so a killed run, a
rerun, a cross-validation or another process sharing the file never reads a
prompt twice (``LLMLabelClassifier(read_store=...)``). ``sqlite`` is the
database, ``fingerprint`` the reader key, ``handle`` the ``ReadStore`` handle."""

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

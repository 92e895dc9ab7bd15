"""Remote engines: one checked ``RemoteClient`` per (servers, model, options)
per process, shared like embedded engines. Each server is checked once, on
first use: it answers, serves the model, tokenizes like the local tokenizer
and honours ``logprob_token_ids``. A closed client is replaced on next use,
and every client is closed at exit (``loop.on_exit``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from ..exceptions import RemoteServerError
from ..models.builtin import resolve_model
from ._http import (
    EnvBearerAuth,
    RemoteRequestError,
    check_label_reads,
    check_tokenizer,
    normalize_url,
    served_card,
)
from ._registry import EngineRegistry
from .client import DEFAULT_API_KEY_ENV, RemoteClient, RemoteOptions
from .handle import Engine
from .loop import ORDER_REMOTE, on_exit

__all__ = [
    "DEFAULT_API_KEY_ENV",
    "RemoteClient",
    "RemoteRequestError",
    "RemoteServerError",
    "get_remote_engine",
    "remote_engine",
    "shutdown_remote_engines",
]

logger = logging.getLogger(__name__)

_registry = EngineRegistry(lambda engine: engine.client.shutdown())


def get_remote_engine(
    base_url: str | Sequence[str],
    model: str,
    *,
    max_concurrency: int = RemoteOptions.max_concurrency,
    timeout_s: float = RemoteOptions.timeout_s,
    max_retries: int = RemoteOptions.max_retries,
    api_key_env: str = DEFAULT_API_KEY_ENV,
) -> Engine:
    """The shared client over the vLLM server(s) at ``base_url`` serving ``model``.

    What an estimator with ``base_url`` reads on. Checked on first use: each
    server answers, serves ``model``, tokenizes like the local tokenizer and
    honours ``logprob_token_ids``. Reads are spread over the servers (least
    in flight), retried with backoff on connection errors, 429 and 5xx, and
    moved to another server when one dies. One client per (servers, model,
    options) per process, closed at exit or by
    :func:`shutdown_remote_engines`.

    Parameters
    ----------
    base_url : str or list of str
        Server URLs (``http://host:8000`` or ``http://host:8000/v1``).
    model : str
        The served model name; its tokenizer comes from the built-in model, a
        local folder, or the server's model root.
    max_concurrency : int, default=32
        Reads in flight per server.
    timeout_s : float, default=60.0
        Seconds per request.
    max_retries : int, default=4
        Retries of a read before it fails.
    api_key_env : str, default="VLLM_API_KEY"
        The name of the environment variable holding the API key (read at
        use; the key is never stored, logged or pickled).

    Returns
    -------
    Engine
        The handle estimators read on (its ``client`` is a ``RemoteClient``).

    Raises
    ------
    ValueError
        A bad URL or option, a model the server does not serve, or another
        tokenizer than the local one.
    ConnectionError
        A server does not answer (a ``RemoteServerError``).
    PermissionError
        A server wants an API key that ``api_key_env`` does not provide.
    RuntimeError
        A server's vLLM ignores ``logprob_token_ids`` (too old).

    Examples
    --------
    >>> from llm_label_clf import get_remote_engine
    >>> get_remote_engine("ftp://10.0.0.5:8000", "smollm2-135m-instruct")
    Traceback (most recent call last):
    ...
    ValueError: server URL 'ftp://10.0.0.5:8000' has scheme 'ftp': use http:// or https://, e.g. 'http://127.0.0.1:8000'
    >>> engine = get_remote_engine("http://10.0.0.5:8000/v1", "smollm2-135m-instruct")  # doctest: +SKIP
    """
    urls = _server_urls(base_url)  # checked before the options
    options = RemoteOptions(
        max_concurrency=max_concurrency, timeout_s=timeout_s, max_retries=max_retries, api_key_env=api_key_env
    )
    return remote_engine(urls, model, options)


def remote_engine(base_url: str | Sequence[str], model: str, options: RemoteOptions) -> Engine:
    """``get_remote_engine`` with options already checked (``engine_for``)."""
    urls = _server_urls(base_url)
    key = json.dumps([model, {"base_url": sorted(urls), **options.as_dict()}], sort_keys=True)
    return _registry.get(key, lambda: _connect(model, urls, options))


def _server_urls(base_url: str | Sequence[str]) -> list[str]:
    """``base_url`` as a list of normalized URLs; raises ValueError for an
    empty list, a bad URL or one listed twice."""
    urls = [base_url] if isinstance(base_url, str) else list(base_url)
    urls = [normalize_url(url) for url in urls]
    if not urls:
        raise ValueError("base_url is empty: pass a server URL such as 'http://127.0.0.1:8000'")
    if len(set(urls)) != len(urls):
        raise ValueError(f"base_url lists a server twice: {urls}")
    return urls


def shutdown_remote_engines() -> None:
    """Closes every remote client of this process; the next use reconnects.

    Called at exit too. Servers are not stopped: they belong to whoever
    started them.
    """
    _registry.shutdown_all()


def _connect(model: str, urls: list[str], options: RemoteOptions) -> Engine:
    """Checks every server, then the engine over them; its ``options`` are
    ``base_url`` and the ``RemoteOptions`` fields (plain data)."""
    env = options.api_key_env
    with httpx.Client(timeout=min(options.timeout_s, 30.0), auth=EnvBearerAuth(env)) as http:
        cards = {url: served_card(http, url, model, env) for url in urls}
        tokenizer = _load_tokenizer(model, next(iter(cards.values())))
        for url, card in cards.items():
            check_tokenizer(http, url, card["id"], tokenizer, env)
            check_label_reads(http, url, card["id"], tokenizer, env)
    lengths = [card["max_model_len"] for card in cards.values() if card.get("max_model_len")]
    if not lengths:
        raise RemoteServerError(f"the servers {urls} do not report max_model_len: are they vLLM servers?")
    client = RemoteClient({url: card["id"] for url, card in cards.items()}, options)
    logger.info("Connected to %s serving %s", urls, model)
    spec = {"base_url": urls, **options.as_dict()}
    return Engine(model=model, options=spec, client=client, tokenizer=tokenizer, max_model_len=min(lengths))


def _load_tokenizer(model: str, card: Mapping[str, Any]) -> Any:
    """The tokenizer of the built-in model, of a local folder ``model``, else of
    the server's model root (a local folder or a hub id)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ImportError("remote engines need transformers: pip install 'llm_label_clf[remote]'") from None
    source = resolve_model(model)
    if not Path(source).is_dir():
        source = card.get("root") or model
    try:
        return AutoTokenizer.from_pretrained(source)
    except Exception as exc:  # transformers raises many kinds (OSError, ValueError, HF errors)
        raise ValueError(
            f"cannot load the tokenizer for {model!r} from {source!r} ({type(exc).__name__}: {exc}): "
            "pass model= a local Hugging Face folder of the model the server runs"
        ) from exc


on_exit(shutdown_remote_engines, order=ORDER_REMOTE)

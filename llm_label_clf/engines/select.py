"""The one place that picks the engine for an estimator's spec: the embedded
vLLM engine, or the remote servers at ``base_url``. Estimators hold only that
plain-data spec and call ``engine_for`` whenever they read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .handle import Engine
from .local import get_engine
from .options import RemoteOptions
from .remote import remote_engine

__all__ = ["engine_for"]


def engine_for(
    model: str,
    base_url: str | Sequence[str] | None,
    engine_options: Mapping[str, Any] | None,
    *,
    owner: str = "LLMLabelClassifier",
) -> Engine:
    """The shared engine for ``(model, base_url, engine_options)``: embedded
    when ``base_url`` is None (``engine_options`` are vLLM engine arguments),
    else over the servers at ``base_url`` (``engine_options`` may then hold
    only the remote client's options; others raise ValueError naming ``owner``)."""
    if base_url is None:
        return get_engine(model, engine_options)
    return remote_engine(base_url, model, RemoteOptions.from_engine_options(engine_options, owner=owner))

"""The one place that picks the engine for an estimator's spec: the embedded
vLLM engine, the machine's shared server in its place (in joblib's worker
processes, ``workers``), or the remote servers at ``base_url``. Estimators
hold only that plain-data spec and call ``engine_for`` whenever they read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..models.source import check_model_source
from .client import RemoteOptions
from .handle import Engine
from .local import find_engine, get_engine
from .remote import remote_engine
from .shared import owned_shared_engine, shared_engine
from .workers import uses_shared_engine

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
    only the remote client's options; others raise ValueError naming ``owner``).
    Without ``base_url``, a worker process, or a process owning a live shared
    server for the spec, reads through the shared server (``workers``, ``shared``)."""
    if base_url is None:
        check_model_source(model)  # a missing model raises before vLLM is imported
        if uses_shared_engine():
            return shared_engine(model, engine_options)
        return (
            find_engine(model, engine_options)
            or owned_shared_engine(model, engine_options)
            or get_engine(model, engine_options)
        )
    return remote_engine(base_url, model, RemoteOptions.from_engine_options(engine_options, owner=owner))

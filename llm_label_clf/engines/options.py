"""The remote client's options, validated once: ``RemoteClient``,
``get_remote_engine`` and ``engine_for`` all build a ``RemoteOptions``, so a
bad value is refused with the same message wherever it comes from."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_API_KEY_ENV", "RemoteOptions"]

#: The variable vLLM's own server reads its key from (``--api-key`` otherwise).
DEFAULT_API_KEY_ENV = "VLLM_API_KEY"


@dataclass(frozen=True)
class RemoteOptions:
    """How the client talks to vLLM servers: reads in flight per server
    (``max_concurrency``), seconds per request (``timeout_s``), retries per read
    (``max_retries``), and the environment variable holding the API key
    (``api_key_env``; the key itself is never stored)."""

    max_concurrency: int = 32
    timeout_s: float = 60.0
    max_retries: int = 4
    api_key_env: str = DEFAULT_API_KEY_ENV

    def __post_init__(self) -> None:
        if not isinstance(self.max_concurrency, int) or self.max_concurrency < 1:
            raise ValueError(f"max_concurrency={self.max_concurrency!r}: must be an int >= 1")
        if not isinstance(self.timeout_s, int | float) or not self.timeout_s > 0:
            raise ValueError(f"timeout_s={self.timeout_s!r}: must be a number of seconds > 0")
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries={self.max_retries!r}: must be an int >= 0")
        if not isinstance(self.api_key_env, str) or not self.api_key_env:
            raise ValueError(f"api_key_env={self.api_key_env!r}: must name an environment variable")

    @classmethod
    def names(cls) -> list[str]:
        """The option names, sorted."""
        return sorted(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_engine_options(cls, options: Mapping[str, Any] | None, *, owner: str) -> RemoteOptions:
        """The options an estimator's ``engine_options`` give the remote client.
        Raises ValueError, naming ``owner``, for keys that are vLLM engine
        options (they belong where the servers are started) or unknown."""
        given = dict(options or {})
        fields = cls.names()
        unknown = sorted(set(given) - set(fields))
        if unknown:
            raise ValueError(
                f"{owner}: engine_options {unknown} do not apply to remote servers (base_url is set); "
                f"the remote client takes {fields}, and the servers' own engine options are set "
                "where they are started"
            )
        return cls(**given)

    def as_dict(self) -> dict[str, Any]:
        """The options as keyword arguments (of ``RemoteClient``, ``get_remote_engine``)."""
        return dataclasses.asdict(self)

"""One ``/v1/completions`` POST and what its failure means for its read:
retry (``Retry``, perhaps on another server) or give up
(``RemoteRequestError``)."""

from __future__ import annotations

from typing import Any

import httpx

from ._http import RemoteRequestError, auth_message, error_text

__all__ = ["RETRY_STATUS", "Retry", "post_completions"]

#: Statuses that say "later", not "never": timeout and rate limit.
RETRY_STATUS = frozenset({408, 429})


class Retry(Exception):
    """One attempt failed in a way another attempt may not; ``server_down``
    when the server itself looks down (its reads move elsewhere)."""

    def __init__(self, reason: str, *, server_down: bool) -> None:
        super().__init__(reason)
        self.server_down = server_down


async def post_completions(
    http: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    request_id: str,
    headers: dict[str, str],
    *,
    api_key_env: str,
) -> Any:
    """POSTs ``payload`` to ``url``'s ``/v1/completions`` and returns the JSON
    body. Raises ``Retry`` on connection errors, 408, 429 and 5xx, and
    ``RemoteRequestError`` on any other non-200 status."""
    try:
        response = await http.post(f"{url}/v1/completions", json=payload, headers=headers)
    except httpx.TransportError as exc:  # refused, reset, timed out, closed mid-answer
        raise Retry(f"{type(exc).__name__}: {exc}", server_down=True) from None
    status = response.status_code
    if status in RETRY_STATUS:
        raise Retry(f"HTTP {status}", server_down=False)
    if status >= 500:  # 502-504: the server or its proxy is down or overloaded
        raise Retry(f"HTTP {status}: {error_text(response)}", server_down=status in (502, 503, 504))
    if status in (401, 403):
        raise RemoteRequestError(auth_message(url, status, api_key_env), status)
    if status != 200:
        raise RemoteRequestError(f"{url} rejected request {request_id} (HTTP {status}): {error_text(response)}", status)
    return response.json()

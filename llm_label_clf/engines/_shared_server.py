"""The shared server's own process: vLLM's OpenAI server on 127.0.0.1 for one
(model, settings), started by ``shared`` and retiring by itself."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["Activity", "serve"]

logger = logging.getLogger(__name__)

#: How often the watchdog looks.
TICK_S = 1.0
#: Idle seconds after which a server with no live owner, or no entry, retires.
ORPHAN_GRACE_S = 5.0
#: How long a graceful shutdown may take before the process exits hard.
SHUTDOWN_GRACE_S = 60.0
#: Requests that are not use: health probes and metrics scrapes.
_PASSIVE_PATHS = ("/health", "/ping", "/metrics", "/version")


class _Usage:
    """Requests in flight and when the last one ended (monotonic seconds)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.last = time.monotonic()

    def begin(self) -> None:
        with self.lock:
            self.in_flight += 1

    def end(self) -> None:
        with self.lock:
            self.in_flight -= 1
            self.last = time.monotonic()

    def idle_s(self) -> float:
        """Seconds since the last request ended; 0 while one is in flight."""
        with self.lock:
            return 0.0 if self.in_flight else time.monotonic() - self.last


_usage = _Usage()


class Activity:
    """ASGI middleware (vLLM's ``--middleware``) that records use of the server."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("path") in _PASSIVE_PATHS:
            await self.app(scope, receive, send)
            return
        _usage.begin()
        try:
            await self.app(scope, receive, send)
        finally:
            _usage.end()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


class _Watchdog:
    """Retires the server when it is no longer wanted (see the module doc)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from .shared import Registry

        self.registry = Registry(Path(spec["registry"]))
        self.name = spec["name"]
        self.port = int(spec["port"])
        self.idle_limit_s = float(spec["idle_s"])
        self.ready = False

    def run(self) -> None:
        while True:
            time.sleep(TICK_S)
            try:
                if self._should_retire() and self._unregister():
                    break
            except Exception:  # a watchdog that dies would leave the server up forever
                logger.exception("shared server watchdog failed; retiring")
                break
        print(f"shared server retiring ({time.strftime('%H:%M:%S')})", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)  # vLLM's graceful shutdown
        time.sleep(SHUTDOWN_GRACE_S)
        os._exit(1)

    def _should_retire(self) -> bool:
        entry = self.registry.read(self.name)
        ours = entry is not None and entry.get("pid") == os.getpid()
        owned = ours and self.registry.any_owner_alive(entry)
        if not self.ready:
            self.ready = _healthy(self.port)
            # still starting: stop only if the entry names owners and all are gone
            return ours and not owned
        idle = _usage.idle_s()
        if ours:
            idle = min(idle, self.registry.touched_s_ago(self.name))
        limit = self.idle_limit_s if owned else min(self.idle_limit_s, ORPHAN_GRACE_S)
        return idle >= limit

    def _unregister(self) -> bool:
        """Removes this server's entry, so no client attaches any more; False
        (look again next tick) when a client holds the registry lock or the
        server turned out to be wanted after all."""
        with self.registry.lock(self.name, blocking=False) as held:
            if not held or not self._should_retire():
                return False
            entry = self.registry.read(self.name)
            if entry is not None and entry.get("pid") == os.getpid():
                self.registry.remove(self.name)
        return True


def _arguments(spec: dict[str, Any]) -> Any:
    """vLLM's parsed server arguments for ``spec``: loopback, the port, the
    model under its served name, our middleware, then every engine setting
    set by name (as ``AsyncEngineArgs.from_cli_args`` reads them back)."""
    import dataclasses

    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(description="llm_label_clf shared vLLM server"))
    argv = ["--model", spec["model_path"], "--served-model-name", spec["served_model_name"]]
    argv += ["--host", "127.0.0.1", "--port", str(spec["port"])]
    argv += ["--middleware", f"{__name__}.Activity", "--disable-uvicorn-access-log"]
    args = parser.parse_args(argv)
    fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    unknown = sorted(set(spec["settings"]) - fields)
    if unknown:
        raise SystemExit(f"engine options {unknown} are not vLLM engine arguments")
    for name, value in {"disable_log_stats": True, **spec["settings"]}.items():
        setattr(args, name, value)
    validate_parsed_serve_args(args)
    return args


def serve(spec: dict[str, Any]) -> None:
    """Runs the server described by ``spec`` (from ``shared``) until it retires."""
    import uvloop

    from ._processes import own_process_group
    from .environment import engine_process_environment, prepare_environment

    prepare_environment()
    with engine_process_environment(), own_process_group():
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch deprecations in vLLM's imports
            from vllm.entrypoints.launchers.api_server.entry import run_server
        args = _arguments(spec)
        threading.Thread(target=_Watchdog(spec).run, name="shared-server-watchdog", daemon=True).start()
        uvloop.run(run_server(args))


if __name__ == "__main__":
    # run the module's own copy (the middleware vLLM imports by name is that one)
    from llm_label_clf.engines import _shared_server

    _shared_server.serve(json.loads(sys.argv[1]))

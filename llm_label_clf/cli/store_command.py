"""The ``store`` command: what a persistent read store holds (``store info
PATH``: its size, its reads, and per model, i.e. per reader key of weights,
dtype and options, its label sets and reads) and emptying it (``store clear
PATH``). Neither starts an engine. A file that is not a read store, or a
damaged one, exits 2 with the error naming the file; a missing file is
reported, never created."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_store_command"]

EXIT_OK, EXIT_USAGE = 0, 2


def add_store_command(commands: Any) -> None:
    """Adds ``store info|clear PATH`` to the ``llm-label-clf`` subcommands."""
    store = commands.add_parser(
        "store",
        help="show or clear a persistent read store (--read-store, read_store=)",
        description="What a read store holds, or emptying it. Starts no engine.",
    )
    actions = store.add_subparsers(dest="store_action", required=True)
    info = actions.add_parser("info", help="its size, reads and models")
    info.add_argument("path", metavar="PATH", help="the read store's file")
    info.add_argument("--json", action="store_true", help="print it as JSON")
    clear = actions.add_parser("clear", help="delete every stored read (the file stays, empty)")
    clear.add_argument("path", metavar="PATH", help="the read store's file")
    store.set_defaults(handler=_store)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _store(args: argparse.Namespace) -> int:
    from ..exceptions import ReadStoreError
    from ..store import ReadStore

    where = f"llm-label-clf store {args.store_action}"
    if not Path(args.path).expanduser().is_file():
        print(f"{where}: error: {args.path}: no such file (a read store is created by its first use)", file=sys.stderr)
        return EXIT_USAGE
    store = ReadStore(args.path)
    try:
        if args.store_action == "clear":
            print(f"{args.path}: {store.clear():,} reads deleted")
            return EXIT_OK
        info = store.info()
    except ReadStoreError as exc:
        print(f"{where}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        models = [{"model": m.model, "key": json.loads(m.key), "label_sets": m.label_sets, "reads": m.reads}
                  for m in info.models]
        print(json.dumps({"path": str(info.path), "bytes": info.bytes, "reads": info.reads, "models": models}))
        return EXIT_OK
    print(f"{info.path}: {_size(info.bytes)}, {info.reads:,} reads, {len(info.models)} model(s)")
    for m in info.models:
        key = json.loads(m.key)
        options = ", ".join(f"{k}={v}" for k, v in key.get("options", {}).items()) or "defaults"
        print(
            f"  {m.model}: {m.reads:,} reads, {m.label_sets} label set(s); weights {key.get('weights', '?')[:12]}, "
            f"{options}, vLLM {key.get('vllm')}, {key.get('device')}"
        )
    return EXIT_OK

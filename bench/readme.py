"""Puts the latest benchmark tables into the README and the docs: replaces
whatever lies between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` and
nothing else, in README.md and in every docs page that has those markers.

Run: ``python bench/readme.py`` (the ``bench`` block, from
``bench/results/summary.md``; ``run.py`` calls ``update`` at the end of a full
run), or ``python bench/readme.py NAME FILE`` for another block (say
``selection bench/results/selection-summary.md``).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SUMMARY = Path(__file__).resolve().parent / "results" / "summary.md"


def update(markdown: str, readme: Path = README, name: str = "bench") -> bool:
    """Replaces the text between the ``name`` markers with ``markdown``;
    returns whether the file changed. Raises ValueError when the markers are
    missing or out of order."""
    start_marker, end_marker = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = readme.read_text()
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < start:
        raise ValueError(f"{readme} needs the markers {start_marker} and {end_marker}, in that order")
    new = text[: start + len(start_marker)] + "\n" + markdown.strip() + "\n" + text[end:]
    if new == text:
        return False
    readme.write_text(new)
    return True


def update_everywhere(name: str, markdown: str) -> list[Path]:
    """``update`` on README.md and each docs page that hold the markers;
    returns the files changed (none when no page holds them: the docs'
    benchmarks page embeds ``bench/results/*.md`` itself)."""
    pages = [p for p in [README, *sorted((ROOT / "docs").rglob("*.md"))] if f"<!-- {name}:start -->" in p.read_text()]
    return [page for page in pages if update(markdown, page, name)]


if __name__ == "__main__":
    name, source = (sys.argv[1], Path(sys.argv[2])) if len(sys.argv) > 2 else ("bench", SUMMARY)
    changed = update_everywhere(name, source.read_text())
    print(f"{name}: updated {[str(p.relative_to(ROOT)) for p in changed] or 'nothing (already up to date)'}",
          file=sys.stderr)

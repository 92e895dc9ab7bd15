"""Puts the latest benchmark tables into the README: replaces whatever lies
between ``<!-- bench:start -->`` and ``<!-- bench:end -->`` and nothing else.

Run: ``python bench/readme.py`` (uses ``bench/results/summary.md``); ``run.py``
calls ``update`` at the end of a full run.
"""

from __future__ import annotations

import sys
from pathlib import Path

START = "<!-- bench:start -->"
END = "<!-- bench:end -->"
README = Path(__file__).resolve().parents[1] / "README.md"
SUMMARY = Path(__file__).resolve().parent / "results" / "summary.md"


def update(markdown: str, readme: Path = README) -> bool:
    """Replaces the text between the markers with ``markdown``; returns whether
    the file changed. Raises ValueError when the markers are missing or out of
    order."""
    text = readme.read_text()
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{readme} needs the markers {START} and {END}, in that order")
    new = text[: start + len(START)] + "\n" + markdown.strip() + "\n" + text[end:]
    if new == text:
        return False
    readme.write_text(new)
    return True


if __name__ == "__main__":
    changed = update(SUMMARY.read_text())
    print(f"{README}: {'updated' if changed else 'already up to date'}", file=sys.stderr)

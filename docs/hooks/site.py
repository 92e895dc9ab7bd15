"""MkDocs hooks of this site (``hooks:`` in mkdocs.yml; excluded from the pages).

- The notebooks in ``notebooks/`` become pages under ``notebooks/``, rendered
  by mkdocs-jupyter from their committed outputs (nothing is executed).
- A notebook listed in the navigation but not (yet) in ``notebooks/`` is left
  out of the navigation, so a notebook being written elsewhere does not break
  the build; Markdown links to it would still fail it.
- A line ``<!-- bench-results: NAME.md -->`` in a page is replaced by
  ``bench/results/NAME.md``, its headings turned into bold lines, so the
  benchmark pages show the files the benchmarks wrote. A missing file fails
  the build.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
INCLUDE = re.compile(r"^<!-- bench-results: (\S+) -->$", re.MULTILINE)
HEADING = re.compile(r"^#+ (.*)$", re.MULTILINE)


def on_config(config):
    config.nav = _existing(config.nav)
    return config


def _existing(nav):
    """``nav`` without entries naming a notebook that does not exist."""
    kept = []
    for item in nav or []:
        target = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(target, list):
            kept.append({next(iter(item)): _existing(target)})
        elif isinstance(target, str) and target.startswith("notebooks/") and not (ROOT / target).is_file():
            continue
        else:
            kept.append(item)
    return kept


@event_priority(100)  # before mkdocs-jupyter turns .ipynb files into pages
def on_files(files, config):
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        # a plain File (not File.generated): mkdocs-jupyter's wrapper reads src_dir
        files.append(File(f"notebooks/{path.name}", str(ROOT), config.site_dir, config.use_directory_urls))
    return files


def on_page_markdown(markdown, page, config, files):
    def embed(match: re.Match[str]) -> str:
        path = RESULTS / match.group(1)
        if not path.is_file():
            raise PluginError(f"{page.file.src_uri} embeds {path}, which does not exist")
        return HEADING.sub(r"**\1**", path.read_text(encoding="utf-8")).strip()

    return INCLUDE.sub(embed, markdown)

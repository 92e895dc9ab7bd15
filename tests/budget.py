"""Where the suite's time goes: at the end of every run, a table of seconds
per test file and of the engines each file started, by the kind of process
that hosts them.

The CI tier's budget is 30 minutes from a clean clone on 2 cores capped to
AVX2 (README, "Development"); on such a CPU an engine start costs 30-130 s,
so engine starts are what the table counts. They are counted from outside,
whatever started them (our engines, vLLM servers, Ray's vLLM stage): a
thread looks every half second for vLLM's engine-core processes (named
``VLLM::EngineCore``, which live for 20 s at least) and files each new one
under the test running when it appeared and under the kind of its parent
process (this test process, a notebook kernel, a vLLM server, a loky, Ray or
Dask worker, another subprocess).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

#: How often the process table is read for new engine-core processes.
POLL_S = 0.5
#: vLLM names its engine-core process so (``/proc/PID/comm`` keeps 15 characters).
ENGINE_CORE_COMM = "VLLM::EngineCor"
#: An engine of another process still running this long after its file's last
#: test counts as left behind (one shutting down takes ~5 s).
LINGER_S = 15.0


def _read(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parent(pid: int) -> int:
    stat = _read(f"/proc/{pid}/stat")
    fields = stat.rpartition(")")[2].split()
    return int(fields[1]) if fields else 0


def host_kind(host: int, test_pid: int) -> str:
    """What kind of process ``host`` (an engine core's parent) is."""
    if host == test_pid:
        return "this process"
    cmdline = _read(f"/proc/{host}/cmdline")
    if "vllm.entrypoints.openai.api_server" in cmdline:
        return "vLLM server"
    if "llm_label_clf.engines._shared_server" in cmdline:
        return "shared server"
    if "ipykernel" in cmdline:
        return "notebook kernel"
    if cmdline.startswith("ray::"):
        return "Ray actor"
    if "loky" in cmdline:
        return "loky worker"
    if cmdline.startswith("dask worker"):  # the title a Dask nanny gives its worker
        return "Dask worker"
    return "subprocess"


class EngineCensus:
    """Finds engine-core processes as they appear; ``starts`` lists
    ``(test file, host kind)`` once per engine."""

    def __init__(self) -> None:
        self.test_pid = os.getpid()
        self.current_file = "(session start)"
        self.starts: list[tuple[str, str]] = []
        #: engine cores alive, by pid: the kind of their host
        self.alive: dict[int, str] = {}
        #: when each engine core was last seen gone (monotonic seconds), by pid
        self.ended: dict[int, float] = {}
        self._seen: set[int] = set()
        self._lock = threading.Lock()  # the watcher and the test thread both look
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="engine-census", daemon=True)

    def start(self) -> None:
        if Path("/proc").is_dir():
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._look()  # one last look

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            self._look()

    def _look(self) -> None:
        with self._lock:
            self._look_unlocked()

    def _look_unlocked(self) -> None:
        for pid in list(self.alive):
            if not Path(f"/proc/{pid}").exists() or _read(f"/proc/{pid}/stat").rpartition(")")[2].split()[:1] == ["Z"]:
                del self.alive[pid]
                self.ended[pid] = time.monotonic()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) in self._seen:
                continue
            pid = int(entry.name)
            if _read(f"/proc/{pid}/comm").strip() != ENGINE_CORE_COMM:
                continue
            self._seen.add(pid)
            kind = host_kind(_parent(pid), self.test_pid)
            self.alive[pid] = kind
            self.starts.append((self.current_file, kind))

    def others_alive(self) -> list[int]:
        """Engine cores alive now that this process does not host (left behind
        by a file whose tests are done, if they outlive LINGER_S)."""
        self._look()
        return [pid for pid, kind in self.alive.items() if kind != "this process"]

    def lingered(self, pids: list[int], since: float) -> int:
        """How many of ``pids`` were still running LINGER_S after ``since``."""
        now = time.monotonic()
        return sum(self.ended.get(pid, now) - since > LINGER_S for pid in pids)


class Budget:
    """The pytest plugin: seconds per file and the census's engine starts."""

    def __init__(self) -> None:
        self.census = EngineCensus()
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: Counter[str] = Counter()
        #: engines of other processes alive when the next file began, and when
        self.left_running: dict[str, tuple[list[int], float]] = {}
        self.started = time.monotonic()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item):
        path = item.location[0]
        if path != self.census.current_file:
            if self.census.current_file in self.seconds:
                self.left_running[self.census.current_file] = (self.census.others_alive(), time.monotonic())
            self.census.current_file = path
        yield

    def pytest_runtest_logreport(self, report) -> None:
        path = report.location[0] if report.location else report.nodeid.split("::")[0]
        self.seconds[path] += report.duration
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.tests[path] += 1

    def pytest_sessionstart(self, session) -> None:
        self.census.start()

    def pytest_terminal_summary(self, terminalreporter) -> None:
        self.census.stop()
        if not self.seconds:  # nothing ran (--collect-only, say)
            return
        starts_by_file: dict[str, Counter[str]] = defaultdict(Counter)
        for path, kind in self.census.starts:
            starts_by_file[path][kind] += 1
        kinds = sorted({kind for _, kind in self.census.starts})
        write = terminalreporter.write_line
        terminalreporter.section("time and engine starts per test file")
        self.left_running[self.census.current_file] = (self.census.others_alive(), time.monotonic())
        write("engine starts by the kind of process that hosts them; 'left' = other processes' engines still")
        write(f"running {LINGER_S:.0f} s after the file's last test (each costs memory, and CPU if it works)")
        header = f"{'file':<34} {'tests':>5} {'seconds':>8}  " + "  ".join(f"{k:>15}" for k in kinds) + "   left"
        write(header)
        files = sorted(set(self.seconds) | set(starts_by_file), key=lambda f: -self.seconds.get(f, 0.0))
        for path in files:
            counts = "  ".join(f"{starts_by_file[path][k] or '':>15}" for k in kinds)
            pids, since = self.left_running.get(path, ([], 0.0))
            left = self.census.lingered(pids, since) or ""
            write(f"{path:<34} {self.tests[path]:>5} {self.seconds.get(path, 0.0):>8.0f}  {counts}   {left:>4}")
        totals = Counter(kind for _, kind in self.census.starts)
        write(f"{'total':<34} {sum(self.tests.values()):>5} {sum(self.seconds.values()):>8.0f}  "
              + "  ".join(f"{totals[k]:>15}" for k in kinds))
        write(f"engine starts: {len(self.census.starts)} ({', '.join(f'{totals[k]} {k}' for k in kinds) or 'none'});"
              f" wall time {time.monotonic() - self.started:.0f} s")


def register(config) -> None:
    """Adds the plugin to this pytest run (called from conftest's ``pytest_configure``)."""
    if not hasattr(config, "workerinput"):  # not inside an xdist worker
        config.pluginmanager.register(Budget(), "llm-label-clf-budget")

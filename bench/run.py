"""The end-to-end comparison, with the built-in model on SST-2 dev and an AG
News sample: raw ``vllm.LLM.generate`` label reads (the floor),
``LLMLabelClassifier.predict_proba``, skorch's ``ZeroShotClassifier`` (on a
subset) and a hand-written transformers forward (``bench/contenders.py``);
then the estimator's scenarios
(``bench/scenarios.py``). Each contender serves passes from its own process
(``--serve NAME``) for the whole run, so its peak memory is its own; raw vLLM
stays up throughout and each other contender's passes alternate with its
passes, the order rotating, so every ratio compares passes run under the same
load.

Run: ``make bench`` or ``python bench/run.py [--quick]`` (``--quick``: a few
texts, written to ``bench/results/quick/``); writes ``summary.json`` and
``.md`` (``bench/report.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import common, report  # noqa: E402
from bench.common import TAG, PeakRSS, emit, sizes  # noqa: E402

ANCHOR = "raw"
#: Memory (GiB) a contender's process tree needs, waited for before it starts.
NEEDS_GIB = {"raw": 5.0, "clf": 5.0, "skorch": 2.0, "hf": 2.0, "scenarios": 5.0}
MEMORY_WAIT_S = 600


def phases(size: Any) -> list[tuple[tuple[str, ...], list[tuple[str, int, tuple[str, ...]]]]]:
    """Who joins raw vLLM in each phase, and per task how many passes and by whom."""
    few = max(size.passes - 1, 1)
    goal_group = (ANCHOR, "clf", "skorch")
    lengths = [(f"length:{n}", few, (ANCHOR, "clf")) for n in size.length_texts]
    return [
        (("clf", "skorch"), [("sst2", size.passes, goal_group), ("agnews", few, goal_group), *lengths]),
        (("hf",), [("sst2", few, (ANCHOR, "hf")), ("agnews", few, (ANCHOR, "hf"))]),
    ]


def serve(name: str, quick: bool) -> None:
    """A contender's process: one timed pass per ``{"op": "pass", "task": ...}``
    line on stdin until ``{"op": "end"}``; errors are reported, not raised."""
    from bench.contenders import CONTENDERS

    out = sys.stdout
    sys.stdout = sys.stderr  # anything else printed goes to the log
    with PeakRSS() as rss:
        try:
            contender = CONTENDERS[name](sizes(quick))
            emit(contender.start(), out)
        except Exception as exc:  # noqa: BLE001 (reported to the orchestrator)
            traceback.print_exc()
            emit({"error": f"{type(exc).__name__}: {exc}"[:500]}, out)
            return
        for line in sys.stdin:
            request = json.loads(line)
            if request["op"] == "end":
                break
            try:
                emit(contender.run_pass(request["task"]), out)
            except Exception as exc:  # noqa: BLE001 (e.g. labels the estimator does not support)
                traceback.print_exc()
                emit({"task": request["task"], "error": f"{type(exc).__name__}: {exc}"[:500]}, out)
    emit({"peak_rss_gib": rss.gib}, out)


class Session:
    """The orchestrator's handle on one serving contender process."""

    def __init__(self, name: str, quick: bool, log: Path) -> None:
        """Starts contender ``name``."""
        self.name = name
        self.memory_wait_s = wait_for_memory(NEEDS_GIB.get(name, 5.0))
        self.load_start = os.getloadavg()[0]
        self._log = log.open("w")
        command = [sys.executable, str(Path(__file__).resolve()), "--serve", name] + (["--quick"] if quick else [])
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     text=True, cwd=ROOT)
        self.started = self._read()
        self.passes: list[dict[str, Any]] = []

    @property
    def alive(self) -> bool:
        return "error" not in self.started and self.proc.poll() is None

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(TAG):
                return json.loads(line[len(TAG):])
        return {"error": f"the {self.name} process exited ({self.proc.wait()}); see {self._log.name}"}

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return {"error": f"the {self.name} process is gone; see {self._log.name}"}
        return self._read()

    def run_pass(self, task: str) -> dict[str, Any]:
        result = self.request({"op": "pass", "task": task}) if self.alive else {"error": self.started.get("error")}
        result.setdefault("task", task)
        self.passes.append(result)
        return result

    def close(self) -> dict[str, Any]:
        final = self.request({"op": "end"}) if self.alive else {}
        self.proc.wait()
        self._log.close()
        return {"worker": self.name, **self.started, **final, "memory_wait_s": self.memory_wait_s,
                "load_avg_1m_start": self.load_start, "load_avg_1m_end": os.getloadavg()[0], "passes": self.passes}


def wait_for_memory(gib: float) -> float:
    """Waits (up to ``MEMORY_WAIT_S``) for ``gib`` GiB to be available; returns the seconds waited."""
    import psutil

    began = time.perf_counter()
    while psutil.virtual_memory().available < gib * 2**30 and time.perf_counter() - began < MEMORY_WAIT_S:
        time.sleep(5)
    return time.perf_counter() - began


def run_scenarios(quick: bool, log: Path) -> dict[str, Any]:
    """The estimator's scenarios in one fresh process (no engine started yet)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--scenarios"] + (["--quick"] if quick else [])
    meta = {"memory_wait_s": wait_for_memory(NEEDS_GIB["scenarios"]), "load_avg_1m_start": os.getloadavg()[0]}
    began = time.perf_counter()
    with log.open("w") as err:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT, check=False)
    meta.update(wall_s=time.perf_counter() - began, load_avg_1m_end=os.getloadavg()[0])
    tagged = [line[len(TAG):] for line in proc.stdout.splitlines() if line.startswith(TAG)]
    if proc.returncode != 0 or not tagged:
        return {"error": f"exit code {proc.returncode}; see {log}", **meta}
    return {**json.loads(tagged[-1]), **meta}


def interleave(quick: bool, out: Path) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Runs the phases (pass ``p`` of a task goes round the group from member
    ``p``); returns each contender's closed session and the cycles."""
    size = sizes(quick)
    sessions = {ANCHOR: Session(ANCHOR, quick, out / f"{ANCHOR}.log")}
    print(f"{ANCHOR}: started {sessions[ANCHOR].started}", flush=True)
    closed: dict[str, dict[str, Any]] = {}
    cycles: list[dict[str, Any]] = []
    for members, tasks in phases(size):
        for name in members:
            sessions[name] = Session(name, quick, out / f"{name}.log")
            print(f"{name}: started {sessions[name].started}", flush=True)
        for task, passes, group in tasks:
            for p in range(passes):
                order = [*group[p % len(group):], *group[: p % len(group)]]
                cycle = {"task": task, "pass": p, "order": order, "texts_per_s": {}}
                for name in order:
                    result = sessions[name].run_pass(task)
                    cycle["texts_per_s"][name] = result.get("texts_per_s")
                cycles.append(cycle)
                shown = ", ".join(f"{k} {v:.1f}" if v else f"{k} failed" for k, v in cycle["texts_per_s"].items())
                print(f"{task} pass {p + 1}/{passes}: texts/s {shown}", flush=True)
        for name in members:
            closed[name] = sessions.pop(name).close()
    closed[ANCHOR] = sessions.pop(ANCHOR).close()
    return closed, cycles


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--scenarios", action="store_true", help=argparse.SUPPRESS)
    args = common.arguments(parser, report.markdown, lambda a: ("quick/" if a.quick else "") + "summary",
                             quick=False)
    if args.serve:
        serve(args.serve, args.quick)
        return
    if args.scenarios:
        from bench.scenarios import scenarios

        emit(scenarios(sizes(args.quick)))
        return

    out = common.RESULTS / "quick" if args.quick else common.RESULTS
    out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        (out / ".gitignore").write_text("*\n")
    size = sizes(args.quick)
    doc = common.record(started=time.strftime("%Y-%m-%d %H:%M"), quick=args.quick,
                         sizes={**vars(size), "length_texts": {str(k): v for k, v in size.length_texts.items()}})
    start = time.perf_counter()
    closed, cycles = interleave(args.quick, out)
    print("scenarios ...", flush=True)
    scenario_results = run_scenarios(args.quick, out / "scenarios.log")
    doc.update(report.build(closed, cycles, scenario_results), finished=time.strftime("%Y-%m-%d %H:%M"),
               wall_s=time.perf_counter() - start)
    print(common.write(args.name, doc, report.markdown))


if __name__ == "__main__":
    main()

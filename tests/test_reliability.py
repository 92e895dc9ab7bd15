"""Faults and lifecycle on the real engine: a killed engine process, a real
Ctrl-C, a killed parent, clean exit, concurrent callers and determinism.
Each script here starts an engine of its own, so all of them are in the full
tier (``make test-full``): a Ctrl-C, a clean exit, and SIGKILL of a reading
script and of the ``classify`` command. CI keeps Ctrl-C through
test_notebook's interrupted kernel, on the kernel's engine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest

from helpers import make_classifier, wait_until
from llm_label_clf import GenerationError, LLMLabelClassifier
from llm_label_clf.cli.resume import progress_path
from llm_label_clf.engines.local import engine_count, get_engine


@pytest.fixture(scope="module")
def sst2(sst2_all):
    X, y = sst2_all
    return X, y


def make(**params) -> LLMLabelClassifier:
    params.setdefault("low_mass", "ignore")
    return make_classifier(**params)


@pytest.mark.full
def test_killed_engine_fails_the_unfinished_items_and_the_next_call_restarts(engine, sst2):
    """Kills the engine's own process (a real fault, no double) while a long
    predict is in flight: the call raises GenerationError naming the unfinished
    items, and the next call starts a fresh engine that gives the same numbers."""
    X, y = sst2
    options = {"max_model_len": 4096}  # its own engine, so the session's survives
    clf = make(engine_options=options, batch_size=1024).fit(X[:40], y[:40])
    before_kill = clf.predict_proba(X[:16])
    victim = get_engine(engine_options=options)
    errors: list[BaseException] = []

    def predict() -> None:
        try:
            clf.predict_proba(X)
        except BaseException as exc:  # collected for the assertions below
            errors.append(exc)

    thread = threading.Thread(target=predict)
    thread.start()
    while victim.client.get_num_unfinished_requests() == 0 and thread.is_alive():
        threading.Event().wait(0.05)
    psutil.Process(engine_process_pid(victim)).kill()
    thread.join(timeout=300)
    assert len(errors) == 1 and isinstance(errors[0], GenerationError), errors
    failed = errors[0].items
    assert failed and all(0 <= i < len(X) for i in failed) and list(failed) == sorted(set(failed))
    assert str(failed[0]) in str(errors[0])
    starts = engine_count()
    np.testing.assert_allclose(clf.predict_proba(X[:16]), before_kill, atol=1e-9)
    assert engine_count() == starts + 1


def engine_process_pid(engine) -> int:
    """The pid of vLLM's engine-core process behind ``engine``."""
    return engine.client.engine_core.resources.engine_manager.processes[0].pid


def test_two_threads_predicting_at_once_get_correct_results(engine, sst2):
    X, y = sst2
    clf = make().fit(X[:40], y[:40])
    first, second = X[:64], X[64:128]  # each call seconds long: the two are in the engine at once
    expected = [clf.predict_proba(first), clf.predict_proba(second)]
    results: dict[int, np.ndarray] = {}

    def run(k: int, texts: list[str]) -> None:
        results[k] = clf.predict_proba(texts)

    threads = [threading.Thread(target=run, args=(k, t)) for k, t in enumerate((first, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    np.testing.assert_allclose(results[0], expected[0], atol=1e-12)
    np.testing.assert_allclose(results[1], expected[1], atol=1e-12)


def test_repeated_calls_and_batch_mates_do_not_change_probabilities(engine, sst2):
    X, y = sst2
    clf = make().fit(X[:40], y[:40])
    batch = clf.predict_proba(X[:64])
    np.testing.assert_array_equal(clf.predict_proba(X[:64]), batch)
    alone = np.vstack([clf.predict_proba([text]) for text in X[:8]])
    np.testing.assert_array_equal(alone, batch[:8])
    shuffled = np.random.default_rng(0).permutation(64)
    np.testing.assert_array_equal(clf.predict_proba([X[i] for i in shuffled]), batch[shuffled])


@pytest.mark.full
def test_process_exits_cleanly_and_leaves_no_engine_process(tmp_path):
    script = textwrap.dedent(
        """
        import os, psutil
        from llm_label_clf import LLMLabelClassifier
        if __name__ == "__main__":
            clf = LLMLabelClassifier(progress=False, low_mass="ignore").fit(["good", "bad"], ["positive", "negative"])
            clf.predict_proba(["fine"])
            print(" ".join(str(p.pid) for p in psutil.Process().children(recursive=True)), flush=True)
        """
    )
    (tmp_path / "exit.py").write_text(script)
    result = subprocess.run([sys.executable, str(tmp_path / "exit.py")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr[-2000:]
    children = [int(pid) for pid in result.stdout.split()]
    assert children, "the engine should have run in a child process"
    # multiprocessing's resource tracker exits a moment after its parent: allow that.
    lingering = still_running_after(children, timeout_s=20)
    assert not lingering, lingering


def still_running_after(pids: list[int], timeout_s: float) -> list[tuple[int, str]]:
    """Which of ``pids`` are still running (zombies aside) ``timeout_s`` from
    now; those are killed, so a failing test leaves nothing behind."""
    processes = []
    for pid in pids:
        try:
            processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, still_running = psutil.wait_procs(processes, timeout=timeout_s)
    lingering = [p for p in still_running if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for process in lingering:
        process.kill()
    return [(p.pid, p.name()) for p in lingering]


#: A script in a long ``predict_proba``: it prints IN_FLIGHT and the pids of its
#: processes (engine core, worker, resource tracker) once the read is in the
#: engine, catches the KeyboardInterrupt, then reports on the engine.
CTRL_C_SCRIPT = textwrap.dedent(
    """
    import json, sys, threading, time
    import pandas as pd
    import psutil
    from llm_label_clf import LLMLabelClassifier
    from llm_label_clf.engines.local import engine_count, get_engine
    from llm_label_clf.engines.loop import run_sync

    def engine_pid(engine):
        return engine.client.engine_core.resources.engine_manager.processes[0].pid

    def report_in_flight(engine, done):
        while not done.is_set():
            if engine.client.get_num_unfinished_requests() > 0:
                kids = psutil.Process().children(recursive=True)
                print("IN_FLIGHT " + " ".join(str(p.pid) for p in kids), flush=True)
                return
            time.sleep(0.01)

    if __name__ == "__main__":
        frame = pd.read_csv(sys.argv[1])
        X, y = frame["text"].tolist(), frame["label"].tolist()
        # ten copies of the dev set, each led by its own number so that none is
        # served from the prefix cache, sent as one chunk: minutes of work in the
        # engine at once, which only an abort ends within the 30 s allowed below
        long_X = [f"{k}. {text}" for k in range(10) for text in X]
        clf = LLMLabelClassifier(progress=False, low_mass="ignore", batch_size=len(long_X))
        clf.fit(X[:40], y[:40])
        before = clf.predict_proba(X[:8])
        engine = get_engine()
        pid = engine_pid(engine)
        done = threading.Event()
        threading.Thread(target=report_in_flight, args=(engine, done), daemon=True).start()
        result = {"interrupted": False}
        try:
            clf.predict_proba(long_X)
        except KeyboardInterrupt:
            result["interrupted"] = True
        done.set()
        deadline = time.monotonic() + 30
        while engine.client.get_num_unfinished_requests() and time.monotonic() < deadline:
            time.sleep(0.05)
        result["unfinished"] = engine.client.get_num_unfinished_requests()
        # the engine core's own view, through a vLLM utility call: idle within
        # seconds, where the un-aborted read would keep it busy for minutes
        def core_has_work():
            return run_sync(engine.client.engine_core.call_utility_async("has_work"))
        while core_has_work() and time.monotonic() < deadline:
            time.sleep(0.1)
        result["core_has_work"] = core_has_work()
        result["dead"] = engine.dead
        starts = engine_count()
        after = clf.predict_proba(X[:8])
        result["max_diff"] = float(abs(after - before).max())
        result["engine_starts"] = engine_count() - starts
        result["same_engine"] = get_engine() is engine and engine_pid(engine) == pid
        result["children"] = [p.pid for p in psutil.Process().children(recursive=True)]
        print("RESULT " + json.dumps(result), flush=True)
    """
)


def start_script(tmp_path: Path, name: str, source: str, *args: str) -> subprocess.Popen:
    """Runs ``source`` as a script in a session of its own, the way a terminal
    runs a foreground job: its own process group, with the engine it starts.
    stdout is piped line by line; stderr goes to ``<name>.err`` (vLLM logs a lot)."""
    (tmp_path / f"{name}.py").write_text(source)
    return subprocess.Popen(
        [sys.executable, str(tmp_path / f"{name}.py"), *args],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / f"{name}.err").open("w"),
        text=True,
        start_new_session=True,
    )


def read_until(child: subprocess.Popen, prefix: str, timeout_s: float = 600) -> str:
    """The child's first stdout line starting with ``prefix`` (the child is
    killed if it does not come within ``timeout_s``)."""
    watchdog = threading.Timer(timeout_s, child.kill)
    watchdog.start()
    try:
        for line in child.stdout:
            if line.startswith(prefix):
                return line
    finally:
        watchdog.cancel()
    raise AssertionError(f"the script ended (rc {child.wait()}) without printing {prefix}")


@pytest.mark.full  # CI: test_notebook::test_interrupting_the_kernel_keeps_the_engine, the same SIGINT and checks
def test_ctrl_c_aborts_the_read_and_the_engine_stays_usable(tmp_path, datasets_dir):
    """A real Ctrl-C, as a terminal or Jupyter's "interrupt kernel" sends it:
    SIGINT to the whole process group of a script in a long ``predict_proba``.
    The call raises KeyboardInterrupt, every in-flight request is aborted (the
    engine core itself has no work left), and the same engine (not a restarted
    one) gives the same probabilities after. (vLLM's engine processes shut
    down on SIGINT; they must not get this one.) The script then ends
    normally, and its engine processes with it."""
    child = start_script(tmp_path, "ctrl_c", CTRL_C_SCRIPT, str(datasets_dir / "sst2_dev.csv"))
    try:
        read_until(child, "IN_FLIGHT")
        os.killpg(child.pid, signal.SIGINT)
        line = read_until(child, "RESULT", timeout_s=300)
        assert child.wait(timeout=120) == 0
    finally:
        child.kill()
    result = json.loads(line.removeprefix("RESULT "))
    errors = (tmp_path / "ctrl_c.err").read_text()[-3000:]
    assert result["interrupted"], errors
    assert result["unfinished"] == 0 and result["core_has_work"] is False
    assert not result["dead"] and result["same_engine"] and result["engine_starts"] == 0, errors
    assert result["max_diff"] <= 1e-9
    assert result["children"], "the engine should have run in a child process"
    lingering = still_running_after(result["children"], timeout_s=20)
    assert not lingering, lingering


#: Seconds every engine process has, from its parent's SIGKILL, to be gone.
KILLED_PARENT_GRACE_S = 5.0


@pytest.mark.full
def test_engine_processes_exit_when_a_reading_parent_is_killed(tmp_path, datasets_dir):
    """The engine runs in a process group of its own, so a Ctrl-C spares it; it
    must still not outlive its parent. The Ctrl-C test's script, in its long
    read (the worker computing), gets SIGKILL (no exit hooks run): every
    process under it, the engine core, vLLM's worker and the resource
    tracker, is gone within 5 s."""
    child = start_script(tmp_path, "killed", CTRL_C_SCRIPT, str(datasets_dir / "sst2_dev.csv"))
    try:
        pids = [int(pid) for pid in read_until(child, "IN_FLIGHT").split()[1:]]
        assert len(pids) >= 2, "expected vLLM's engine core and a worker"
    except BaseException:
        child.kill()
        raise
    assert_killing_leaves_nothing(child, pids, "a Python process reading")


@pytest.mark.full
def test_engine_processes_exit_when_the_classify_command_is_killed(tmp_path, datasets_dir):
    """``llm-label-clf classify`` gets SIGKILL once its first chunk is
    committed, in the middle of the run: its engine processes are gone within
    5 s (before issue 55, vLLM's worker went on computing for 13 s and more)."""
    texts = pd.read_csv(datasets_dir / "sst2_dev.csv")["text"].tolist()
    source, target = tmp_path / "in.csv", tmp_path / "out.csv"
    pd.DataFrame({"text": [f"{i}. {text}" for i, text in enumerate(texts)]}).to_csv(source, index=False)
    command = subprocess.Popen(
        [sys.executable, "-m", "llm_label_clf", "classify", str(source), "--labels", "positive,negative",
         "--no-progress", "--chunk-rows", "50", "-o", str(target)],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "classify.err").open("w"), start_new_session=True,
    )  # fmt: skip
    try:
        assert wait_until(lambda: rows_committed(target) > 0 or command.poll() is not None, 600, 0.05)
        assert command.poll() is None, (tmp_path / "classify.err").read_text()[-2000:]
        pids = [p.pid for p in psutil.Process(command.pid).children(recursive=True)]
        assert len(pids) >= 2, "expected vLLM's engine core and a worker"
    except BaseException:
        command.kill()
        raise
    assert_killing_leaves_nothing(command, pids, "the classify command")


def rows_committed(target: Path) -> int:
    """The input rows the progress file of ``target`` says are done (0 before it is there)."""
    try:
        return json.loads(progress_path(str(target)).read_text())["rows"]
    except (OSError, ValueError):
        return 0


def assert_killing_leaves_nothing(parent: subprocess.Popen, pids: list[int], what: str) -> None:
    """SIGKILLs ``parent`` and asserts that every one of ``pids`` (collected
    before the kill) is gone within ``KILLED_PARENT_GRACE_S``; prints their
    CPU share just before the kill and the seconds from the kill to each one
    gone (watched up to 30 s). Any left running are killed, so a failure
    leaves nothing behind."""
    processes = {process: label(process) for process in map(psutil.Process, pids)}
    busy = sum(cpu_percent(p) for p in processes)
    killed = time.monotonic()
    parent.kill()
    parent.wait()
    gone = seconds_until_gone(list(processes), limit_s=30, since=killed)
    for process in processes:
        if running(process):
            process.kill()
    times = ", ".join(f"{processes[p]} {'>30' if s is None else f'{s:.2f}'} s" for p, s in gone.items())
    print(f"\n{what} killed with its processes at {busy:.0f}% CPU; gone after: {times}")
    late = {processes[p]: s for p, s in gone.items() if s is None or s > KILLED_PARENT_GRACE_S}
    assert not late, late


def cpu_percent(process: psutil.Process, interval_s: float = 0.5) -> float:
    """``process``'s CPU share over the next ``interval_s`` (0 once it is gone)."""
    try:
        return process.cpu_percent(interval=interval_s)
    except psutil.NoSuchProcess:
        return 0.0


def label(process: psutil.Process) -> str:
    """``process``'s name, or "resource tracker" for multiprocessing's."""
    return "resource tracker" if "resource_tracker" in " ".join(process.cmdline()) else process.name()


def seconds_until_gone(
    processes: list[psutil.Process], limit_s: float, since: float
) -> dict[psutil.Process, float | None]:
    """For each of ``processes``, the seconds from ``since`` until it no longer
    runs (a zombie is gone), polled every 10 ms up to ``limit_s`` after
    ``since``; None for those still running then."""
    gone: dict[psutil.Process, float | None] = dict.fromkeys(processes)
    while (left := [p for p, s in gone.items() if s is None]) and time.monotonic() - since <= limit_s:
        for process in left:
            if not running(process):
                gone[process] = time.monotonic() - since
        time.sleep(0.01)
    return gone


def running(process: psutil.Process) -> bool:
    """Whether ``process`` (the same one: pid and start time) runs: any of its
    threads not yet a zombie. A killed process whose main thread has exited
    shows as a zombie while its other threads are still exiting, with its
    files (the resource tracker's pipe) still open."""
    try:
        if not process.is_running():
            return False
        tasks = Path(f"/proc/{process.pid}/task")
        if not tasks.is_dir():
            return process.status() != psutil.STATUS_ZOMBIE
        return any(thread_state(task) not in ("Z", "X") for task in tasks.iterdir())
    except (psutil.NoSuchProcess, FileNotFoundError):
        return False


def thread_state(task: Path) -> str:
    """The state letter of a thread (``/proc/PID/task/TID/stat``), "X" once it is gone."""
    try:
        return (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"

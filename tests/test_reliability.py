"""Faults and lifecycle on the real engine: a killed engine process, a real
Ctrl-C, a killed parent, clean exit, concurrent callers and determinism.
Each script here starts an engine of its own: CI runs the Ctrl-C script (it
also ends normally), the full tier (``make test-full``) the other two."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import psutil
import pytest

from helpers import make_classifier
from llm_label_clf import GenerationError, LLMLabelClassifier
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
    first, second = X[:200], X[200:400]
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


#: A script in a long ``predict_proba``: it prints IN_FLIGHT once the read is in
#: the engine, catches the KeyboardInterrupt, then reports on the engine.
CTRL_C_SCRIPT = textwrap.dedent(
    """
    import json, sys, threading, time
    import pandas as pd
    from llm_label_clf import LLMLabelClassifier
    from llm_label_clf.engines.local import engine_count, get_engine
    from llm_label_clf.engines.loop import run_sync

    def engine_pid(engine):
        return engine.client.engine_core.resources.engine_manager.processes[0].pid

    def report_in_flight(engine, done):
        while not done.is_set():
            if engine.client.get_num_unfinished_requests() > 0:
                print("IN_FLIGHT", flush=True)
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
        result["children"] = [p.pid for p in __import__("psutil").Process().children(recursive=True)]
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


ENGINE_SCRIPT = textwrap.dedent(
    """
    import os, time
    import psutil
    from llm_label_clf import get_engine
    if __name__ == "__main__":
        get_engine()
        kids = psutil.Process().children(recursive=True)
        print("PIDS " + " ".join(str(p.pid) for p in kids if p.name().startswith("VLLM")), flush=True)
        time.sleep(600)
    """
)


@pytest.mark.full
def test_engine_processes_exit_when_their_parent_is_killed(tmp_path):
    """The engine runs in a process group of its own, so a Ctrl-C spares it; it
    must still not outlive its parent. SIGKILL the parent (no exit hooks run):
    the engine core and its workers exit."""
    child = start_script(tmp_path, "parent", ENGINE_SCRIPT)
    try:
        pids = [int(pid) for pid in read_until(child, "PIDS").split()[1:]]
    finally:
        child.kill()
        child.wait()
    assert len(pids) >= 2, "expected vLLM's engine core and a worker"
    lingering = still_running_after(pids, timeout_s=60)
    assert not lingering, lingering

"""Faults and lifecycle on the real engine: a killed engine process, clean
exit, concurrent callers and determinism."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import psutil
import pytest

from helpers import make_classifier
from llm_label_clf import GenerationError, LLMLabelClassifier
from llm_label_clf.engine import engine_count, get_engine


@pytest.fixture(scope="module")
def sst2(sst2_all):
    X, y = sst2_all
    return X, y


def make(**params) -> LLMLabelClassifier:
    params.setdefault("low_mass", "ignore")
    return make_classifier(**params)


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
    alive = []
    for pid in children:
        try:
            alive.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    # multiprocessing's resource tracker exits a moment after its parent: allow that.
    _, still_running = psutil.wait_procs(alive, timeout=20)
    lingering = [p for p in still_running if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not lingering, [(p.pid, p.name()) for p in lingering]

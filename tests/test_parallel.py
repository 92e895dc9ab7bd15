"""scikit-learn's ``n_jobs`` on the real engine (``engines.workers``,
``engines.shared``): with joblib's process backend (loky) the worker processes
start no engine and read through one shared server on loopback, with the
threading backend they share this process's engine, and either way the
scores equal ``n_jobs=None``'s; joint reads too. Other ``multiprocessing``
children use the server only when they opt in. Also: each worker's own
engine on request, waiting for a server that starts slowly, and the shared
server retiring by itself, also after its owner is SIGKILLed.

The module uses a registry folder of its own and a short idle timeout, set
before any worker process starts (workers and the server inherit them).
CI starts the shared server once and reads through it from loky workers; the
workers' own engines, the other searches, a fresh process and the server's
retirement are in the full tier (``make test-full``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import joblib
import numpy as np
import pytest
from sklearn.calibration import CalibratedClassifierCV
from sklearn.model_selection import (
    GridSearchCV,
    RandomizedSearchCV,
    cross_val_predict,
    cross_val_score,
    cross_validate,
)

from helpers import SST2_TEMPLATE, make_classifier, wait_until
from llm_label_clf.engines.environment import START_TIMEOUT_ENV
from llm_label_clf.engines.local import engine_count, engine_settings
from llm_label_clf.engines.shared import (
    SHARED_DIR_ENV,
    SHARED_IDLE_ENV,
    Registry,
    idle_s,
    pid_alive,
    shared_engine,
    shared_servers,
    stop_shared_servers,
    wait_for_server,
)
from llm_label_clf.engines.workers import (
    SHARED_ENGINE_ENV,
    WORKER_ENGINE_ENV,
    uses_shared_engine,
    worker_engine_mode,
)
from llm_label_clf.models.builtin import DEFAULT_MODEL
from llm_label_clf.testing import free_port

N_TEXTS = 24
PROMPTS = [SST2_TEMPLATE, "Text: {text}\nSentiment:"]
#: The shared server's idle timeout here: long enough to span the tests
#: (a fresh process and its workers start in ~30 s), short enough to wait for.
IDLE_S = 60
#: Probabilities read through the server against this process's engine
#: (both float32 with the same settings; measured 0.0).
ATOL = 1e-5
#: A joint read's later slots come from decode steps batched differently in
#: the server and here: float32 sums in another order (~1e-6, test_joint).
JOINT_ATOL = 2e-5
#: The idle timeout of the server that a SIGKILLed parent leaves behind.
KILLED_PARENT_IDLE_S = 20
#: How long a retiring server may take to shut down gracefully (vLLM's
#: shutdown ~5 s; _shared_server gives it 60 s before exiting hard).
SHUTDOWN_S = 60


def fresh_workers() -> None:
    """Ends joblib's reusable worker processes, so the next ones start with
    this process's environment as it is now."""
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)


def worker_engine_counts(n: int = 4) -> list[int]:
    """``engine_count()`` as seen in (most likely each of) the worker processes."""
    return joblib.Parallel(n_jobs=2)(joblib.delayed(engine_count)() for _ in range(n))


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def descendants(pid: int) -> list[int]:
    """``pid``'s children, their children, and so on."""
    found, todo = [], [pid]
    while todo:
        below = children(todo.pop())
        found += below
        todo += below
    return found


def joblib_process(pid: int) -> bool:
    """Whether ``pid`` is one of joblib's processes (a loky worker, or a
    resource tracker, which lives as long as the workers holding its pipe)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"loky" in cmdline or b"resource_tracker" in cmdline


def set_environ(values: dict[str, str | None]) -> dict[str, str | None]:
    """Sets each variable (removes it for None); returns their values before."""
    before = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    return before


def engine_decision(env: dict[str, str | None]) -> str:
    """In a worker process, with ``env`` set there for the call: whether it
    would read through the shared server ("shared"), start its own engine
    ("own"), or refuse ("error: ..."); starts nothing."""
    before = set_environ(env)
    try:
        return "shared" if uses_shared_engine() else "own"
    except RuntimeError as exc:
        return f"error: {exc}"
    finally:
        set_environ(before)


@pytest.fixture(scope="module", autouse=True)
def shared_setup(tmp_path_factory):
    """The module's registry and idle timeout, in place before any worker
    starts; at the end the workers end and any server left is stopped."""
    folder = str(tmp_path_factory.mktemp("shared_servers"))
    before = set_environ({SHARED_DIR_ENV: folder, SHARED_IDLE_ENV: str(IDLE_S), WORKER_ENGINE_ENV: None})
    fresh_workers()
    yield
    fresh_workers()
    stop_shared_servers()
    set_environ(before)


@pytest.fixture(scope="module")
def sst2(sst2_all):
    X, y = sst2_all
    return X[:N_TEXTS], y[:N_TEXTS]


def make(**params):
    params.setdefault("low_mass", "ignore")
    return make_classifier(**params)


# --- no engine needed --------------------------------------------------------


def test_settings_from_the_environment_are_checked(monkeypatch):
    monkeypatch.setenv(SHARED_IDLE_ENV, "soon")
    with pytest.raises(ValueError, match=f"{SHARED_IDLE_ENV}='soon'"):
        idle_s()
    monkeypatch.setenv(WORKER_ENGINE_ENV, "mine")
    with pytest.raises(ValueError, match=rf"{WORKER_ENGINE_ENV}='mine': expected one of \['own', 'shared'\]"):
        worker_engine_mode()
    assert not uses_shared_engine()  # this process is no worker: the variable is not even read


def test_only_loky_workers_read_through_the_shared_server_unless_others_opt_in():
    """Loky workers read through the shared server by default; other
    ``multiprocessing`` children start their own engine (a daemonic one is
    told how to opt in) unless LLM_LABEL_CLF_WORKER_ENGINE=shared or
    LLM_LABEL_CLF_SHARED_ENGINE=1. No engine starts."""
    unset = {WORKER_ENGINE_ENV: None, SHARED_ENGINE_ENV: None}
    try:
        loky = joblib.Parallel(n_jobs=2)(joblib.delayed(engine_decision)(unset) for _ in range(2))
        own = unset | {WORKER_ENGINE_ENV: "own"}
        assert joblib.Parallel(n_jobs=2)(joblib.delayed(engine_decision)(own) for _ in range(2)) == ["own", "own"]
    finally:
        # Workers whose first task was this light one count the next tests'
        # reads (tokenizer, client: > 300 MB) as a leak: loky retires them and
        # warns from its manager thread, which the warnings-as-errors filter
        # killed, and the next n_jobs run hung. Later tests get fresh workers.
        fresh_workers()
    assert loky == ["shared", "shared"]
    spawn = multiprocessing.get_context("spawn")  # not fork: this process runs threads
    with ProcessPoolExecutor(1, mp_context=spawn) as plain:  # not daemonic: may start an engine
        assert plain.submit(engine_decision, unset).result() == "own"
    with spawn.Pool(1) as pool:  # daemonic
        refused, opted, opted_all = pool.map(
            engine_decision, [unset, unset | {WORKER_ENGINE_ENV: "shared"}, unset | {SHARED_ENGINE_ENV: "1"}]
        )
    assert refused.startswith("error: this worker process is daemonic") and f"{WORKER_ENGINE_ENV}=shared" in refused
    assert (opted, opted_all) == ("shared", "shared")


def test_a_starting_server_is_waited_for_until_it_exits_or_logs_a_failure(tmp_path, monkeypatch):
    """A stand-in for a server still starting after the start-up timeout (a
    real process that answers on no port; the real server starts that slowly
    only on a loaded machine, so this fault is injected): waited for past
    LLM_LABEL_CLF_START_TIMEOUT_S while it runs, given up on once its log
    shows a traceback, and at once when it has exited."""
    monkeypatch.setenv(START_TIMEOUT_ENV, "1")
    log = tmp_path / "server.log"
    log.write_text("INFO loading the model\n")
    starting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        entry = {"pid": starting.pid, "url": f"http://127.0.0.1:{free_port()}", "log": str(log)}
        why: list[str | None] = []
        waiter = threading.Thread(target=lambda: why.append(wait_for_server(entry, failure_grace_s=1.0)))
        waiter.start()
        waiter.join(timeout=4.0)
        assert waiter.is_alive() and not why  # 4x the start-up timeout, still waiting
        with log.open("a") as handle:
            handle.write("Traceback (most recent call last):\n  ...\nRuntimeError: no memory for the KV cache\n")
        waiter.join(timeout=15.0)
        assert why == ["logged a failure"]
    finally:
        starting.kill()
        starting.wait()
    assert wait_for_server(entry) == "exited"


@pytest.mark.full
def test_a_server_that_fails_to_start_raises_with_its_log(tmp_path, monkeypatch):
    """A shared server given an option vLLM does not know exits while
    starting: the caller's error says so and quotes the server's log."""
    monkeypatch.setenv(SHARED_DIR_ENV, str(tmp_path))
    with pytest.raises(RuntimeError, match="exited; the end of its log") as info:
        shared_engine(DEFAULT_MODEL, {"no_such_engine_argument": 1})
    assert "engine options ['no_such_engine_argument'] are not vLLM engine arguments" in str(info.value)
    assert shared_servers() == []


def test_entries_of_dead_servers_are_removed(tmp_path, monkeypatch):
    monkeypatch.setenv(SHARED_DIR_ENV, str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    registry = Registry(tmp_path)
    registry.write("stale", {"name": "stale", "pid": int(dead.stdout), "owners": [], "api_key": "k"})
    registry.write("live", {"name": "live", "pid": os.getpid(), "owners": [], "api_key": "k"})
    assert [entry["name"] for entry in shared_servers()] == ["live"]
    assert registry.read("stale") is None and "api_key" not in shared_servers()[0]


# --- each worker its own engine, on request (first: no server exists yet) ----


@pytest.mark.full
def test_each_worker_starts_its_own_engine_when_asked(engine, sst2, monkeypatch):
    """LLM_LABEL_CLF_WORKER_ENGINE=own: every worker process starts an engine
    (in a loky worker this used to fail, "cannot find context for 'loky'"),
    scores equal the serial ones, no shared server starts, and the workers
    exit with their engines (they used to hang at exit)."""
    X, y = sst2
    serial = cross_val_score(make(), X, y, cv=2, error_score="raise")
    monkeypatch.setenv(WORKER_ENGINE_ENV, "own")
    fresh_workers()
    try:
        parallel = cross_val_score(make(), X, y, cv=2, n_jobs=2, error_score="raise")
        counts = worker_engine_counts()
    finally:
        started = time.monotonic()
        fresh_workers()
    print(f"own engines: worker engine counts {counts}; workers ended in {time.monotonic() - started:.1f} s")
    np.testing.assert_array_equal(parallel, serial)
    assert max(counts) == 1
    assert shared_servers() == []


# --- loky workers through the shared server ----------------------------------


def test_cross_val_score_with_processes_equals_serial(engine, sst2):
    X, y = sst2
    serial = cross_val_score(make(), X, y, cv=3, error_score="raise")
    started = time.monotonic()
    parallel = cross_val_score(make(), X, y, cv=3, n_jobs=2, error_score="raise")
    print(f"cross_val_score(n_jobs=2), server start included: {time.monotonic() - started:.0f} s")
    np.testing.assert_array_equal(parallel, serial)


def test_workers_started_no_engine_and_share_one_server(engine):
    """One server for the spec, kept for this process, started with the
    settings this process's engine has; no worker started an engine."""
    assert worker_engine_counts() == [0, 0, 0, 0]
    (server,) = shared_servers()
    assert server["owners"] == [os.getpid()]
    assert server["model"] == DEFAULT_MODEL and server["settings"] == engine_settings()
    assert server["settings"].items() <= engine.settings.items()
    assert server["idle_s"] == IDLE_S and server["url"].startswith("http://127.0.0.1:")


def test_probabilities_from_workers_equal_this_process(sst2):
    X, y = sst2
    # cross_val_predict hands the estimator y encoded as 0/1: name their words
    words = make(labels=["negative", "positive"])
    serial = cross_val_predict(words, X, y, cv=3, method="predict_proba")
    parallel = cross_val_predict(words, X, y, cv=3, method="predict_proba", n_jobs=2)
    print(f"max |workers - here| = {np.abs(parallel - serial).max():.3g}")
    np.testing.assert_allclose(parallel, serial, atol=ATOL)
    scoring = ["accuracy", "neg_log_loss"]
    a = cross_validate(make(), X, y, cv=3, scoring=scoring, error_score="raise")
    b = cross_validate(make(), X, y, cv=3, scoring=scoring, n_jobs=2, error_score="raise")
    np.testing.assert_array_equal(b["test_accuracy"], a["test_accuracy"])
    np.testing.assert_allclose(b["test_neg_log_loss"], a["test_neg_log_loss"], atol=ATOL)


def test_joint_reads_in_workers_equal_this_process(engine, datasets_dir):
    """A joint estimator (multioutput_read="joint", 2-D y) predicts in loky
    workers, through the shared server, what it predicts here (the claim of
    docs/engines/parallel.md); no engine or server starts for it."""
    import pandas as pd

    frame = pd.read_csv(datasets_dir / "trec_test.csv").head(12)
    X, Y = frame["text"].tolist(), frame[["label", "fine_label"]]
    clf = make(prompt="Question: {text}", multioutput_read="joint").fit(X, Y)
    servers, starts = shared_servers(), engine_count()
    here = clf.predict_proba(X)
    chunks = [X[:6], X[6:]]
    parts = joblib.Parallel(n_jobs=2)(joblib.delayed(clf.predict_proba)(chunk) for chunk in chunks)
    predicted = joblib.Parallel(n_jobs=2)(joblib.delayed(clf.predict)(chunk) for chunk in chunks)
    for output, want in enumerate(here):
        got = np.vstack([part[output] for part in parts])
        print(f"output {output}: max |workers - here| = {np.abs(got - want).max():.3g}")
        np.testing.assert_allclose(got, want, atol=JOINT_ATOL)
    np.testing.assert_array_equal(np.vstack(predicted), clf.predict(X))
    assert engine_count() == starts
    if servers:  # run with the module: the server the earlier tests started
        assert [s["pid"] for s in shared_servers()] == [s["pid"] for s in servers]


def grid(**options) -> GridSearchCV:
    scoring = {"accuracy": "accuracy", "log_loss": "neg_log_loss"}
    search = dict(cv=3, scoring=scoring, refit="log_loss", error_score="raise")
    return GridSearchCV(make(), {"prompt": PROMPTS}, **search, **options)


def assert_same_search(a, b) -> None:
    assert a.best_params_ == b.best_params_
    np.testing.assert_array_equal(a.cv_results_["mean_test_accuracy"], b.cv_results_["mean_test_accuracy"])
    np.testing.assert_allclose(a.cv_results_["mean_test_log_loss"], b.cv_results_["mean_test_log_loss"], atol=ATOL)


@pytest.fixture(scope="module")
def serial_grid(engine, sst2):
    return grid().fit(*sst2)


@pytest.mark.full
def test_grid_search_with_processes_equals_serial(serial_grid, sst2):
    X, y = sst2
    parallel = grid(n_jobs=2).fit(X, y)
    assert_same_search(parallel, serial_grid)
    assert len(set(serial_grid.cv_results_["mean_test_log_loss"])) == 2  # the prompts differ
    np.testing.assert_allclose(parallel.predict_proba(X), serial_grid.predict_proba(X), atol=ATOL)


@pytest.mark.full
def test_randomized_search_and_calibration_with_processes_equal_serial(sst2):
    X, y = sst2
    search = dict(param_distributions={"prompt": PROMPTS}, n_iter=2, cv=3, random_state=0, error_score="raise")
    a = RandomizedSearchCV(make(), **search).fit(X, y)
    b = RandomizedSearchCV(make(), n_jobs=2, **search).fit(X, y)
    assert a.best_params_ == b.best_params_
    np.testing.assert_allclose(b.cv_results_["mean_test_score"], a.cv_results_["mean_test_score"], atol=ATOL)
    serial = CalibratedClassifierCV(make(), cv=3).fit(X, y).predict_proba(X)
    parallel = CalibratedClassifierCV(make(), cv=3, n_jobs=2).fit(X, y).predict_proba(X)
    np.testing.assert_allclose(parallel, serial, atol=ATOL)


def test_threading_backend_shares_this_process_engine(serial_grid, sst2):
    X, y = sst2
    servers = shared_servers()
    starts = engine_count()
    with joblib.parallel_config(backend="threading"):
        threaded = grid(n_jobs=2).fit(X, y)
        scores = cross_val_score(make(), X, y, cv=3, n_jobs=2, error_score="raise")
        calibrated = CalibratedClassifierCV(make(), cv=3, n_jobs=2).fit(X, y).predict_proba(X)
    assert_same_search(threaded, serial_grid)
    np.testing.assert_array_equal(scores, cross_val_score(make(), X, y, cv=3, error_score="raise"))
    np.testing.assert_allclose(calibrated, CalibratedClassifierCV(make(), cv=3).fit(X, y).predict_proba(X), atol=ATOL)
    assert engine_count() == starts
    assert [s["pid"] for s in shared_servers()] == [s["pid"] for s in servers]


_FRESH_PROCESS = textwrap.dedent(
    """
    import json, sys
    from sklearn.model_selection import GridSearchCV
    from llm_label_clf import LLMLabelClassifier
    from llm_label_clf.engines.local import engine_count

    if __name__ == "__main__":
        data = json.loads(open(sys.argv[1]).read())
        clf = LLMLabelClassifier(prompt=data["prompts"][0], progress=False, low_mass="ignore", calibration=None)
        search = GridSearchCV(clf, {"prompt": data["prompts"]}, cv=3, n_jobs=2, error_score="raise")
        search.fit(data["X"], data["y"])
        proba = search.predict_proba(data["X"]).tolist()
        url = search.best_estimator_._engine().options.get("base_url")
        print(json.dumps({"engines": engine_count(), "best": search.best_params_, "proba": proba, "url": url}))
    """
)


@pytest.mark.full
def test_a_fresh_process_loads_the_model_nowhere_but_in_the_server(tmp_path, sst2):
    """A process that starts with GridSearchCV(n_jobs=2): its workers use the
    running server, and so does its refit (it owns the server now): no
    engine starts in it, and its probabilities equal this process's."""
    X, y = sst2
    (tmp_path / "data.json").write_text(json.dumps({"X": X, "y": y.tolist(), "prompts": PROMPTS}))
    (tmp_path / "fit.py").write_text(_FRESH_PROCESS)
    (server,) = shared_servers()
    out = subprocess.run(
        [sys.executable, str(tmp_path / "fit.py"), str(tmp_path / "data.json")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["engines"] == 0 and result["url"] == [server["url"]]
    expected = make(prompt=result["best"]["prompt"]).fit(X, y).predict_proba(X)
    np.testing.assert_allclose(np.array(result["proba"]), expected, atol=ATOL)
    (after,) = shared_servers()
    (added,) = set(after["owners"]) - {os.getpid()}  # the fresh process, now gone
    assert after["pid"] == server["pid"] and not pid_alive(added)


# --- last: the server retires by itself ---------------------------------------


@pytest.mark.full
def test_shared_server_retires_when_idle():
    """Left without reads for IDLE_S seconds, the server removes its entry
    and exits, and its engine process with it."""
    (server,) = shared_servers()
    engine_processes = children(server["pid"])
    assert engine_processes
    started = time.monotonic()
    assert wait_until(lambda: not pid_alive(server["pid"]), deadline_s=IDLE_S + 90, step_s=1)
    print(f"the server retired {time.monotonic() - started:.0f} s after the last check (idle timeout {IDLE_S} s)")
    assert shared_servers() == []
    assert wait_until(lambda: not any(pid_alive(pid) for pid in engine_processes), deadline_s=30)


_KILLED_PARENT = textwrap.dedent(
    """
    import json, os, sys, time
    import joblib
    from llm_label_clf import LLMLabelClassifier
    from llm_label_clf.engines.shared import shared_servers

    if __name__ == "__main__":
        data = json.loads(open(sys.argv[1]).read())
        clf = LLMLabelClassifier(prompt=data["prompt"], progress=False, low_mass="ignore").fit(data["X"], data["y"])
        chunks = [data["X"][:4], data["X"][4:]]
        joblib.Parallel(n_jobs=2)(joblib.delayed(clf.predict)(chunk) for chunk in chunks)
        (server,) = shared_servers()
        print(json.dumps({"server": server["pid"], "idle_s": server["idle_s"]}), flush=True)
        time.sleep(3600)  # until killed
    """
)


@pytest.mark.full
def test_nothing_a_killed_parent_started_outlives_the_idle_limit(tmp_path, sst2):
    """A process with its own engine, whose loky workers started a shared
    server (a registry and an idle limit of its own), is SIGKILLed: its
    engine processes, the server and the server's engine processes are all
    gone within the server's idle limit (plus a graceful shutdown). Not
    checked: joblib's own idle workers, which loky ends after its own idle
    timeout (300 s), as for any joblib user."""
    X, y = sst2
    (tmp_path / "data.json").write_text(json.dumps({"X": X[:8], "y": y[:8].tolist(), "prompt": SST2_TEMPLATE}))
    (tmp_path / "parent.py").write_text(_KILLED_PARENT)
    env = os.environ | {SHARED_DIR_ENV: str(tmp_path / "servers"), SHARED_IDLE_ENV: str(KILLED_PARENT_IDLE_S)}
    parent = subprocess.Popen(
        [sys.executable, str(tmp_path / "parent.py"), str(tmp_path / "data.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        line = parent.stdout.readline()
        assert line, parent.stderr.read()[-3000:]
        server = json.loads(line)
        assert server["idle_s"] == KILLED_PARENT_IDLE_S
        in_server = [server["server"], *descendants(server["server"])]
        in_parent = [pid for pid in descendants(parent.pid) if not joblib_process(pid)]
        assert len(in_server) >= 2 and in_parent  # the server, its engine process; the parent's engine
    finally:
        parent.kill()
        parent.wait()
    killed = time.monotonic()
    started = in_server + in_parent
    limit = KILLED_PARENT_IDLE_S + SHUTDOWN_S
    gone = wait_until(lambda: not any(pid_alive(pid) for pid in started), limit, 1)
    left = [pid for pid in started if pid_alive(pid)]
    print(f"after the SIGKILL: {len(started)} processes gone in {time.monotonic() - killed:.0f} s; left {left}")
    assert gone, f"still running {limit} s after the parent's SIGKILL: {left}"
    assert Registry(tmp_path / "servers").names() == []

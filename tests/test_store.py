"""The persistent read store (``read_store=``): stored reads equal fresh
ones, a rerun, a cross-validation and ``cross_val_score`` read nothing twice,
a read misses when the model's files or the engine settings differ, and bad
files, two writers, a kill mid-write, a read-only folder and a full disk give
a clear error or a correct result, never a wrong number.

Engine tests read on the session's default engine (float32: conftest); the
dtype and model checks compute reader keys without starting an engine. The
write-loop subprocesses and a rerun whose reads are all stored start no
engine; the killed ``predict_proba`` and a rerun lacking one read (full
tier) start one."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import cross_val_score

from helpers import SST2_TEMPLATE, make_classifier, wait_until
from llm_label_clf import LLMLabelClassifier, LLMLabelClassifierCV, ReadStoreError, ReadStoreWarning
from llm_label_clf.fitting.params import check_params
from llm_label_clf.reading.cache import ReadCache
from llm_label_clf.store import READ_STORE_ENV, ReadStore, model_fingerprint, store_ref
from llm_label_clf.store.sqlite import Database, StoredRead, prompt_digest

ROOT = Path(__file__).resolve().parents[1]
#: Two reads of the same prompts in other batches (tests/test_outputs.py).
READ_TOLERANCE = 1e-5
LABELS = ["negative", "positive"]


@pytest.fixture(scope="module")
def texts(sst2_all):
    return sst2_all[0]


def make(store, **params):
    params.setdefault("low_mass", "ignore")
    params.setdefault("labels", LABELS)
    return make_classifier(read_store=store, **params)


def reads_equal(a: StoredRead, b: StoredRead) -> bool:
    return np.array_equal(a.logprobs, b.logprobs) and a.top_token == b.top_token and a.first_logmass == b.first_logmass


# ------------------------------------------------------------ reading through the store


def test_stored_reads_equal_fresh_ones_and_a_rerun_reads_nothing(engine, texts, tmp_path, monkeypatch):
    """First run: every text read by the engine and stored; a fresh read
    without the store agrees to READ_TOLERANCE; a rerun (a clone, then an
    estimator given the store only by LLM_LABEL_CLF_READ_STORE) finds every
    read, stores none, and returns the first run's numbers exactly."""
    path = tmp_path / "reads.sqlite"
    X = texts[:24]
    store = ReadStore(path)
    first = make(str(path)).fit(X[:2])
    proba = first.predict_proba(X)
    assert (store.stored, store.info().reads) == (24, 24)
    fresh = make(None).fit(X[:2]).predict_proba(X)
    np.testing.assert_allclose(proba, fresh, atol=READ_TOLERANCE)
    found = store.found
    np.testing.assert_array_equal(clone(first).fit(X[:2]).predict_proba(X), proba)
    monkeypatch.setenv(READ_STORE_ENV, str(path))
    np.testing.assert_array_equal(make(None).fit(X[:2]).predict_proba(X[::-1]), proba[::-1])
    assert store.found - found == 48 and store.stored == 24  # both reruns found all, stored nothing
    info = store.info()
    assert info.reads == 24 and [m.reads for m in info.models] == [24] and info.models[0].label_sets == 1
    assert json.loads(info.models[0].key)["options"]["dtype"] == "float32"


def test_an_interrupted_call_rerun_reads_only_what_was_not_stored(engine, texts, tmp_path):
    """What a killed predict_proba leaves (its finished batches) is found on
    the rerun: the engine reads only the other texts. Another label set is
    another read of the same prompts."""
    path = tmp_path / "reads.sqlite"
    X = [f"{i}. {t}" for i, t in enumerate(texts[:40])]
    store = ReadStore(path)
    clf = make(path, batch_size=8).fit(X[:2])
    clf.predict_proba(X[:16])  # two batches, as a run killed after its second batch leaves them
    assert store.stored == 16
    clf.predict_proba(X)
    assert store.stored == 40  # 24 more: the rerun read only the 24 not stored
    other = make(path, labels=["bad", "good"]).fit(X[:2])
    other.predict_proba(X[:8])
    assert store.stored == 48 and store.info().models[0].label_sets == 2


def test_cross_validation_and_cross_val_score_read_nothing_twice(engine, texts, sst2_all, tmp_path):
    """LLMLabelClassifierCV over a store: the first fit's engine reads are
    every text and content-free input once; a second fit (another process
    would do the same) reads nothing from the engine (ReadCache counts only
    engine reads in its ancestors), and cross_val_score over the same texts
    neither."""
    path = tmp_path / "reads.sqlite"
    X, y = sst2_all[0][:24], sst2_all[1][:24]
    store = ReadStore(path)
    small = dict(prompts=[SST2_TEMPLATE], few_shots=[0], calibrations=[None, "batch"], stack=False, cv=3)
    base = make_classifier(random_state=0, low_mass="ignore", read_store=str(path))
    outer = ReadCache()
    with outer.active():
        first = LLMLabelClassifierCV(base, **small).fit(X, y)
    assert outer.reads == len(X) + 3 == store.stored  # the texts and the 3 content-free inputs
    again = ReadCache()
    with again.active():
        second = LLMLabelClassifierCV(clone(base), **small).fit(X, y)
        scores = cross_val_score(clone(base), X, y, cv=3)
    assert again.reads == 0 and store.stored == len(X) + 3
    assert second.fit_cost_["engine_reads"] == first.fit_cost_["engine_reads"]  # what the fit reads alone
    assert second.best_params_ == first.best_params_ and np.all(scores > 0)


# ------------------------------------------------------------ a rerun served by the store

#: The rerun's estimators: one uncalibrated, one with the default calibration
#: (which reads the training texts at fit), both fitted on RERUN_FIT texts.
RERUN_PARAMS = {"uncalibrated": {"calibration": None}, "calibrated": {"calibration": LLMLabelClassifier().calibration}}
RERUN_TEXTS, RERUN_FIT = 48, 24  # 24 >= MIN_BATCH (16): the default calibration reads its texts
#: A rerun script: fit and predict_proba per RERUN_PARAMS over the first
#: texts of the data (and the extra ones), each estimator's probabilities
#: saved, then what it started and read.
RERUN = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import pandas as pd
    import psutil

    spec = json.loads(sys.argv[1])
    sys.path.insert(0, spec["tests"])
    from helpers import make_classifier
    from llm_label_clf import engine_info
    from llm_label_clf.engines.local import engine_count
    from llm_label_clf.store import ReadStore

    if __name__ == "__main__":
        frame = pd.read_csv(spec["data"])
        X, y = frame["text"].tolist()[: spec["n"]] + spec["extra"], frame["label"].to_numpy()[: spec["fit"]]
        for name, params in spec["params"].items():
            clf = make_classifier(read_store=spec["store"], **params).fit(X[: spec["fit"]], y)
            np.save(f"{spec['out']}/{name}.npy", clf.predict_proba(X))
        store = ReadStore(spec["store"])
        print("RESULT " + json.dumps({
            "engine_starts": engine_count(), "stored": store.stored, "found": store.found,
            "started": [e["started"] for e in engine_info()["engines"]],
            "children": [p.pid for p in psutil.Process().children(recursive=True)],
            "imported": [name for name in ("vllm", "torch") if name in sys.modules],
        }), flush=True)
    """
)


def rerun_params(name: str) -> dict:
    return {"labels": LABELS, "low_mass": "ignore", "random_state": 0, **RERUN_PARAMS[name]}


@pytest.fixture(scope="module")
def filled_store(engine, sst2_all, tmp_path_factory):
    """A store filled by this process's engine (the session's): per
    RERUN_PARAMS, fit on the first RERUN_FIT SST-2 dev texts and
    predict_proba on the first RERUN_TEXTS; its path and those probabilities."""
    path = tmp_path_factory.mktemp("rerun") / "reads.sqlite"
    X, y = sst2_all[0][:RERUN_TEXTS], sst2_all[1][:RERUN_FIT]
    proba = {}
    for name in RERUN_PARAMS:
        clf = make_classifier(read_store=str(path), **rerun_params(name)).fit(X[:RERUN_FIT], y)
        proba[name] = clf.predict_proba(X)
    return path, proba


def rerun(store: Path, datasets_dir: Path, out: Path, extra: list[str]) -> tuple[dict, dict[str, np.ndarray]]:
    """Runs RERUN in a fresh Python process over ``store``: what it reports,
    and each estimator's probabilities."""
    spec = {"tests": str(ROOT / "tests"), "data": str(datasets_dir / "sst2_dev.csv"), "n": RERUN_TEXTS,
            "fit": RERUN_FIT, "extra": extra, "store": str(store), "out": str(out),
            "params": {name: rerun_params(name) for name in RERUN_PARAMS}}
    done = subprocess.run([sys.executable, "-c", RERUN, json.dumps(spec)], capture_output=True, text=True,
                          cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = next(json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return result, {name: np.load(out / f"{name}.npy") for name in RERUN_PARAMS}


def test_a_rerun_served_by_the_store_starts_no_engine(filled_store, datasets_dir, tmp_path):
    """A fresh process (a rerun script) whose every read is stored: fit and
    predict_proba, uncalibrated and with the default calibration, give this
    process's probabilities bit for bit, read nothing, and start no engine
    (no start counted, its handle not started, no child process at the end).
    The first such process may ask vLLM for the engine's configuration and
    record it (``engines.recorded``); the next imports neither vLLM nor torch:
    the recorded handle and the model folder's tokenizer serve fit."""
    path, expected = filled_store
    for run in ("first", "second"):
        result, proba = rerun(path, datasets_dir, tmp_path, extra=[])
        for name in RERUN_PARAMS:
            assert np.array_equal(proba[name], expected[name]), (run, name)
        assert result["engine_starts"] == 0 and result["started"] == [False] and result["children"] == [], result
        assert result["stored"] == 0 and result["found"] >= 2 * RERUN_TEXTS, result
    assert result["imported"] == [], result


@pytest.mark.full
def test_a_store_lacking_one_text_starts_the_engine_for_it_alone(filled_store, datasets_dir, tmp_path):
    """The same rerun with one text the store lacks: the engine starts, once,
    and reads that text alone; the stored texts keep their probabilities bit
    for bit."""
    path, expected = filled_store
    result, proba = rerun(path, datasets_dir, tmp_path, extra=["a film nobody had read before this test"])
    assert result["engine_starts"] == 1 and result["started"] == [True], result
    assert result["stored"] == 1, result  # the new text, read by the first estimator, found by the second
    for name in RERUN_PARAMS:
        assert proba[name].shape == (RERUN_TEXTS + 1, 2)
        assert np.array_equal(proba[name][:RERUN_TEXTS], expected[name]), name


# ------------------------------------------------------------ what a read is keyed on


def test_a_copy_of_the_model_hits_and_a_changed_byte_misses(model_path, tmp_path):
    """The fingerprint follows the files: a copy with times kept hits; one
    byte changed anywhere (its time then changes) misses; a changed byte in
    a sampled region misses even with the size and time set back by hand.
    It reads a few MiB, so it takes well under a second on this model."""
    copy = tmp_path / "model"
    shutil.copytree(model_path, copy)
    began = time.perf_counter()
    original = model_fingerprint(model_path)
    assert time.perf_counter() - began < 5
    assert model_fingerprint(copy) == original
    weights = copy / "model.safetensors"
    stat = weights.stat()

    def flip(offset: int) -> None:
        with open(weights, "r+b") as handle:
            handle.seek(offset)
            byte = handle.read(1)
            handle.seek(offset)
            handle.write(bytes([byte[0] ^ 0xFF]))

    flip(stat.st_size // 3)  # in no sampled region: the time tells
    assert model_fingerprint(copy) != original
    flip(stat.st_size // 3)
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert model_fingerprint(copy) == original  # back as it was
    other = tmp_path / "other"  # another path: the process keeps fingerprints by path, size and time
    shutil.copytree(model_path, other)
    weights = other / "model.safetensors"
    flip(100)  # the safetensors header, with the time set back
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert model_fingerprint(other) != original


def test_another_model_dtype_or_option_misses_where_memory_options_hit(engine, texts, model_path, tmp_path):
    """Reader keys computed without starting an engine: the stored reads of
    the default estimator are found under its key and under a copy of its
    model folder and another KV cache size, and not under bfloat16, another
    max_model_len, or a model folder with one byte changed."""
    path = tmp_path / "reads.sqlite"
    X = texts[:8]
    clf = make(path).fit(X[:2])
    clf.predict_proba(X)
    plan = clf.plans_[0]
    prompts = [plan.encode([{"text": t}], engine.tokenizer, engine.max_model_len).ids[0] for t in X]
    digests = [prompt_digest(p) for p in prompts]
    copy = tmp_path / "model"
    shutil.copytree(model_path, copy)

    def found(estimator) -> int:
        ref = store_ref(estimator)
        db = ref.database
        space = db.space(ref.reader, json.dumps(plan.sequences_key), model=ref.model, key=ref.key)
        return len(db.get(space, digests, len(plan.trie.sequences)))

    assert found(clf) == 8
    assert found(make(path, model=str(copy))) == 8
    assert found(make(path, engine_options={"kv_cache_memory_bytes": 1 << 29})) == 8
    assert found(make(path, engine_options={"dtype": "bfloat16"})) == 0
    assert found(make(path, engine_options={"max_model_len": 1024})) == 0
    with open(copy / "config.json", "a") as handle:
        handle.write(" ")
    assert found(make(path, model=str(copy))) == 0


def test_the_parameter_is_checked_at_fit_cloned_and_pickled(engine, texts, tmp_path):
    """read_store is stored as given, checked at fit (a bad type names the
    parameter; base_url is refused before any connection), survives clone
    and pickle (the plans carry the path; no connection is pickled)."""
    path = tmp_path / "reads.sqlite"
    with pytest.raises(ValueError, match=r"read_store=3 must be None, a path"):
        check_params(make(3))
    with pytest.raises(ValueError, match=r"read_store=.* needs an embedded engine.*stale reads"):
        make(path, base_url="http://127.0.0.1:9/v1").fit(texts[:2])
    handle = ReadStore(path)
    assert clone(make(handle)).get_params()["read_store"] == handle
    clf = make(handle).fit(texts[:2])
    clf.predict_proba(texts[:4])
    back = pickle.loads(pickle.dumps(clf))
    assert back.plans_[0].store == clf.plans_[0].store and back.plans_[0].store.path == str(path.absolute())
    found = handle.found
    np.testing.assert_array_equal(back.predict_proba(texts[:4]), clf.predict_proba(texts[:4]))
    assert handle.found - found == 8


# ------------------------------------------------------------ bad files, faults


def test_a_foreign_or_newer_file_is_refused_naming_it_and_left_alone(tmp_path):
    """A text file, another program's SQLite database and a store of a newer
    schema: ReadStoreError naming the file and what to do, at fit, before
    any engine starts; the files are not changed."""
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database\n" * 500)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE items (x)")
    newer = tmp_path / "newer.sqlite"
    Database(newer).connection().close()
    with sqlite3.connect(newer) as connection:
        connection.execute("UPDATE meta SET value = '99' WHERE key = 'version'")
    cases = [(text, "not a read store"), (other, "database of something else"), (newer, "schema version '99'")]
    for path, what in cases:
        before = hashlib.sha256(path.read_bytes()).hexdigest()
        with pytest.raises(ReadStoreError, match=what) as error:
            make(path).fit(["a text"])
        assert str(path) in str(error.value) and "another path" in str(error.value)
        assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def _filled(path: Path, n: int, width: int = 2) -> tuple[Database, int, list[tuple[bytes, StoredRead]]]:
    db = Database(path)
    space = db.space("reader", "[[[1], [2]]]", model="m", key="{}")
    rows = [(prompt_digest([i, 7]), StoredRead(np.array([-i / 7.0, -1.5][:width]), i, -0.25)) for i in range(n)]
    for start in range(0, n, 500):
        db.put(space, rows[start : start + 500])
    db.close()
    return db, space, rows


def test_a_truncated_store_raises_naming_it_never_a_wrong_read(tmp_path):
    """A store cut to half its size: looking up its reads either raises
    ReadStoreError naming the file or returns reads that are exactly those
    stored (each row carries a checksum); it never answers a wrong one."""
    path = tmp_path / "reads.sqlite"
    _, space, rows = _filled(path, 5000)
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.truncate(size // 2)
    db = Database(path)
    with pytest.raises(ReadStoreError) as error:
        got = db.get(space, [d for d, _ in rows], 2)
        assert all(reads_equal(got[d], r) for d, r in rows if d in got)
        db.count()
    assert str(path) in str(error.value) and "damaged" in str(error.value)


def test_a_damaged_row_fails_its_check(tmp_path):
    """A stored value changed in place (the row's bytes, not its structure)
    is caught by the row's CRC: ReadStoreError naming the file."""
    path = tmp_path / "reads.sqlite"
    _, space, rows = _filled(path, 10)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE reads SET logprobs = ? WHERE prompt = ?", (np.array([-9.0, -1.5]).tobytes(), rows[3][0]))
    with pytest.raises(ReadStoreError, match=r"fails its check.*damaged"):
        Database(path).get(space, [rows[3][0]], 2)


def test_unusual_floats_come_back_bit_for_bit(tmp_path):
    """NaN, infinities and -0.0 in the logprobs and the label mass (SQLite
    turns a REAL NaN into NULL) come back as stored, and pass their check."""
    db = Database(tmp_path / "reads.sqlite")
    space = db.space("reader", "[]", model="m", key="{}")
    odd = StoredRead(np.array([np.nan, -np.inf, -0.0]), 3, float("nan"))
    db.put(space, [(b"k" * 32, odd)])
    back = Database(tmp_path / "reads.sqlite").get(space, [b"k" * 32], 3)[b"k" * 32]
    assert back.logprobs.tobytes() == odd.logprobs.tobytes() and back.top_token == 3
    assert np.isnan(back.first_logmass)


WRITER = textwrap.dedent(
    """
    import sys, numpy as np
    from llm_label_clf.store.sqlite import Database, StoredRead, prompt_digest
    path, first, last, batch, rounds = sys.argv[1], *map(int, sys.argv[2:6])
    db = Database(__import__("pathlib").Path(path))
    space = db.space("reader", "[[[1], [2]]]", model="m", key="{}")
    print("READY", flush=True)
    for r in range(rounds):
        for start in range(first, last, batch):
            ids = range(start, min(start + batch, last))
            db.put(space, [(prompt_digest([i, r]), StoredRead(np.array([-i / 7.0, -r - 1.5]), i, -0.25)) for i in ids])
    print("DONE", flush=True)
    """
)


def _writer(path: Path, first: int, last: int, batch: int, rounds: int) -> subprocess.Popen:
    command = [sys.executable, "-c", WRITER, str(path), str(first), str(last), str(batch), str(rounds)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _every_row_right(path: Path) -> int:
    """Checks the file's integrity and that every row is the value its key
    was written with; returns how many rows it holds."""
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        space = connection.execute("SELECT id FROM spaces").fetchone()[0]
    db = Database(path)
    keys = {prompt_digest([i, r]): (i, r) for i in range(4000) for r in range(40)}
    held = db.get(space, list(keys), 2)
    for digest, read in held.items():
        i, r = keys[digest]
        assert reads_equal(read, StoredRead(np.array([-i / 7.0, -r - 1.5]), i, -0.25))
    assert db.count() == len(held)
    db.close()
    return len(held)


def test_two_processes_writing_at_once(tmp_path):
    """Two processes write overlapping reads into one new store at once (both
    create it): both finish, and the store holds each read once, right."""
    path = tmp_path / "reads.sqlite"
    writers = [_writer(path, 0, 3000, 100, 2), _writer(path, 1500, 4000, 100, 2)]
    outputs = [w.communicate(timeout=300) for w in writers]
    assert [w.returncode for w in writers] == [0, 0], [err for _, err in outputs]
    assert _every_row_right(path) == 2 * 4000


def test_a_kill_mid_write_loses_at_most_the_batch_in_flight(tmp_path):
    """A writer killed (SIGKILL) at three points of its write loop: after
    each, the file passes SQLite's integrity check, holds whole batches only
    (each batch is one transaction) and every stored read is right; the next
    writer goes on from there."""
    path = tmp_path / "reads.sqlite"
    rng = np.random.default_rng(0)
    held = 0
    for _ in range(3):
        writer = _writer(path, 0, 4000, 50, 40)
        assert writer.stdout.readline().strip() == "READY"
        time.sleep(rng.uniform(0.2, 1.0))
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        now = _every_row_right(path)
        assert now % 50 == 0 and now >= held  # whole batches: the one in flight is all or nothing
        held = now
    assert held > 0


def test_a_read_only_folder_is_a_clear_error_at_fit(tmp_path):
    """A new store, and a store made earlier, in a folder that cannot be
    written: ReadStoreError at fit naming the file and saying the folder is
    not writable, before any engine starts. Permissions do not stop root, so
    as root the folder is bind-mounted read-only over itself."""
    folder = tmp_path / "locked"
    folder.mkdir()
    made = folder / "made.sqlite"
    _filled(made, 10)
    if os.geteuid() == 0:
        mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(folder)], capture_output=True)
        if mounted.returncode != 0:
            pytest.skip(f"root ignores permissions, and a read-only bind mount failed: {mounted.stderr!r}")
        undo = ["umount", str(folder)]
    else:
        folder.chmod(0o555)
        undo = ["chmod", "755", str(folder)]
    try:
        assert not os.access(folder, os.W_OK)
        for path in (folder / "new.sqlite", made):
            with pytest.raises(ReadStoreError) as error:
                make(path).fit(["x"])
            message = str(error.value)
            assert str(path) in message and "not writable" in message and "writable folder" in message, message
    finally:
        subprocess.run(undo, check=True)
    assert not (folder / "new.sqlite").exists()


def test_a_full_disk_warns_once_and_the_reads_go_on(engine, texts, tmp_path):
    """The file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored so writes fail
    with EFBIG as on a full disk) set below what the next batch needs: the
    call warns ReadStoreWarning once, naming the file, returns the same
    numbers as a fresh read, and what was stored before still answers."""
    path = tmp_path / "reads.sqlite"
    X = [f"{i}. {t}" for i, t in enumerate(texts[:24])]
    store = ReadStore(path)
    clf = make(path, batch_size=8).fit(X[:2])
    before = clf.predict_proba(X[:8])
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limit[1]))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            proba = clf.predict_proba(X)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, handler)
    full = [w for w in caught if issubclass(w.category, ReadStoreWarning)]
    assert len(full) == 1 and str(path) in str(full[0].message), [str(w.message) for w in caught]
    assert store.stored == 8 and store.found >= 8  # the 8 stored before answered; nothing more was stored
    np.testing.assert_array_equal(proba[:8], before)
    np.testing.assert_allclose(proba, make(None).fit(X[:2]).predict_proba(X), atol=READ_TOLERANCE)


KILLED = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import pandas as pd
    from helpers import make_classifier
    texts = [f"{{i}}. {{t}}" for i, t in enumerate(pd.read_csv({data!r})["text"])][:{n}]
    clf = make_classifier(read_store={path!r}, labels=["negative", "positive"], batch_size=16, low_mass="ignore")
    clf.fit(texts[:2]).predict_proba(texts)
    print("FINISHED", flush=True)
    """
)


@pytest.mark.full
def test_a_killed_predict_proba_is_resumed_by_the_store(engine, datasets_dir, tmp_path):
    """A predict_proba over 400 texts in another process (its own engine),
    killed with SIGKILL once the store holds some batches: the store passes
    SQLite's integrity check, and the rerun here reads only the texts not
    stored, giving the numbers of a fresh read."""
    path = tmp_path / "reads.sqlite"
    n = 400
    code = KILLED.format(tests=str(ROOT / "tests"), data=str(datasets_dir / "sst2_dev.csv"), n=n, path=str(path))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def held() -> int:
        if not path.exists():
            return 0
        try:
            with sqlite3.connect(path, timeout=30) as connection:
                return connection.execute("SELECT COUNT(*) FROM reads").fetchone()[0]
        except sqlite3.OperationalError:  # the tables are not there yet
            return 0

    try:
        assert wait_until(lambda: held() >= 48 or child.poll() is not None, deadline_s=600, step_s=0.2)
    finally:
        child.send_signal(signal.SIGKILL)
        _, err = child.communicate(timeout=60)
    stored = held()
    assert 48 <= stored < n, err[-2000:]
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    import pandas as pd

    texts = [f"{i}. {t}" for i, t in enumerate(pd.read_csv(datasets_dir / "sst2_dev.csv")["text"])][:n]
    store = ReadStore(path)
    proba = make(path, batch_size=16).fit(texts[:2]).predict_proba(texts)
    assert (store.found, store.stored) == (stored, n - stored)  # the engine read only the rest
    np.testing.assert_allclose(proba, make(None).fit(texts[:2]).predict_proba(texts), atol=READ_TOLERANCE)


def test_store_info_and_clear_on_the_command_line(tmp_path, capsys):
    """``llm-label-clf store info`` reports the size, reads and models (also
    as JSON); ``store clear`` empties it; a foreign file or a missing one
    exits 2 naming it. No engine starts."""
    from llm_label_clf import cli

    path = tmp_path / "reads.sqlite"
    _filled(path, 1200)
    assert cli.main(["store", "info", str(path)]) == 0
    out = capsys.readouterr().out
    assert str(path) in out and "1,200 reads, 1 model(s)" in out and "m: 1,200 reads, 1 label set(s)" in out
    assert cli.main(["store", "info", "--json", str(path)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["reads"] == 1200 and info["bytes"] == path.stat().st_size and info["models"][0]["reads"] == 1200
    assert cli.main(["store", "clear", str(path)]) == 0
    assert "1,200 reads deleted" in capsys.readouterr().out
    assert ReadStore(path).info().reads == 0 and path.stat().st_size < 40_000
    foreign = tmp_path / "notes.txt"
    foreign.write_text("hello\n" * 100)
    for bad, what in ((foreign, "not a read store"), (tmp_path / "none.sqlite", "no such file")):
        assert cli.main(["store", "info", str(bad)]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and what in err
    assert not (tmp_path / "none.sqlite").exists()

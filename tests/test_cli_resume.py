"""``classify`` and ``evaluate`` stream and resume: outputs written chunk by
chunk and cut back to their last committed chunk (a torn last line goes),
the progress file's checks (settings, the input's first rows), no output
replaced without ``--overwrite``, the tab-separated ``.csv`` hint; then runs
interrupted after a chunk and resumed, in-process on the session's engine,
and (full tier) a 20,000-row job killed with SIGKILL five times.

The pure-file tests take ``no_engine`` or no fixture at all. The interrupted
runs are stopped with ``KeyboardInterrupt`` raised from ``Progress.save`` (a
test double: Ctrl-C at exactly the moment a chunk is written but not yet
committed, which a real Ctrl-C hits only by chance)."""

from __future__ import annotations

import io
import json
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llm_label_clf import cli
from llm_label_clf.cli.resume import Progress, RowDigest, check_targets, first_changed_row, progress_path
from llm_label_clf.cli.sinks import open_sink
from llm_label_clf.cli.tables import UsageError

FRAME = pd.DataFrame(
    {"id": range(7), "text": ["a, b", 'say "hi"', "two\nlines", "é ü", "", None, "last"], "p": np.linspace(0, 1, 7)}
)


def read_back(path: Path) -> pd.DataFrame:
    name = path.name
    if name.endswith(".parquet"):
        return pd.read_parquet(path)
    if ".jsonl" in name:
        return pd.read_json(path, lines=True, dtype=False)
    return pd.read_csv(path, sep="\t" if ".tsv" in name else ",", keep_default_na=False, na_values=[""])


@pytest.mark.parametrize("name", ["out.csv", "out.tsv", "out.jsonl", "out.csv.gz", "out.jsonl.bz2", "out.parquet"])
def test_a_sink_goes_back_to_its_committed_chunk(tmp_path, name):
    """Chunks appended, a third chunk written but not committed and a torn
    line after it (what a kill leaves), then ``begin(state)``: the output is
    the first two chunks again, and goes on to equal a one-shot write."""
    path = tmp_path / name
    fmt = "parquet" if name.endswith(".parquet") else "jsonl" if ".jsonl" in name else name.split(".")[1]
    sink = open_sink(str(path), fmt, None)
    sink.begin(None)
    for part in (FRAME.iloc[:3], FRAME.iloc[3:5]):
        sink.write(part.reset_index(drop=True))
    state = sink.state()
    sink.write(FRAME.iloc[5:].reset_index(drop=True))  # written, never committed
    if fmt == "parquet":
        (path / ".tmp-part-00000003.parquet").write_bytes(b"PAR1 half a part")
    else:
        with open(path, "ab") as torn:
            torn.write(b'99,"half a li')
    resumed = open_sink(str(path), fmt, None)
    resumed.begin(state)
    pd.testing.assert_frame_equal(read_back(path), read_back_whole(tmp_path, FRAME.iloc[:5], name))
    resumed.write(FRAME.iloc[5:].reset_index(drop=True))
    resumed.finish()
    assert resumed.state()["rows"] == len(FRAME)
    pd.testing.assert_frame_equal(read_back(path), read_back_whole(tmp_path, FRAME, name))


def read_back_whole(tmp_path: Path, frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """``frame`` written in one go in the same format, read back."""
    path = tmp_path / "whole" / name
    path.parent.mkdir(exist_ok=True)
    fmt = "parquet" if name.endswith(".parquet") else "jsonl" if ".jsonl" in name else name.split(".")[1]
    sink = open_sink(str(path), fmt, None)
    sink.begin(None)
    sink.write(frame.reset_index(drop=True))
    sink.finish()
    return read_back(path)


def test_a_sink_refuses_an_output_shorter_than_committed(tmp_path):
    path = tmp_path / "out.csv"
    sink = open_sink(str(path), "csv", None)
    sink.begin(None)
    sink.write(FRAME)
    state = sink.state()
    path.write_text("id,text\n")
    with pytest.raises(UsageError, match=r"out.csv: it holds 8 bytes where its progress file says \d+ .*--overwrite"):
        open_sink(str(path), "csv", None).begin(state)


def test_the_digest_follows_cells_and_rows_not_chunks():
    whole = RowDigest(["text"])
    whole.update(FRAME)
    chunked = RowDigest(["text"])
    for start in range(0, len(FRAME), 2):
        chunked.update(FRAME.iloc[start : start + 2])
    assert chunked.hexdigest() == whole.hexdigest()
    for changed in ("a,b", None, "None"):  # one cell changed, missing, or the text "None"
        other = FRAME.copy()
        other.loc[0, "text"] = changed
        digest = RowDigest(["text"])
        digest.update(other)
        assert digest.hexdigest() != whole.hexdigest(), changed
    missing, empty = RowDigest(["text"]), RowDigest(["text"])
    missing.update(FRAME.iloc[5:6])
    empty.update(FRAME.iloc[4:5])
    assert missing.hexdigest() != empty.hexdigest()  # a missing cell is not an empty text
    swapped = RowDigest(["text"])
    swapped.update(FRAME.iloc[[1, 0, 2, 3, 4, 5, 6]])
    assert swapped.hexdigest() != whole.hexdigest()  # order counts


def test_the_first_changed_row_is_named():
    other = FRAME.copy()
    other.loc[3, "text"] = "changed"
    written = FRAME.drop(index=[1]).reset_index(drop=True)  # row 1 was skipped, so not written
    assert first_changed_row(iter([other]), iter([written]), ["text"], 7, {1}) == 3
    assert first_changed_row(iter([FRAME]), iter([written]), ["text"], 7, {1}) is None
    assert first_changed_row(iter([FRAME.iloc[:2]]), iter([written]), ["text"], 7, {1}) == 2  # shorter input


def test_an_existing_output_is_not_replaced(tmp_path):
    out = tmp_path / "scored.csv"
    check_targets(str(out), resume=False, overwrite=False, fmt="csv")  # not there: fine
    out.write_text("id\n1\n")
    with pytest.raises(UsageError) as refused:
        check_targets(str(out), resume=False, overwrite=False, fmt="csv")
    assert str(out) in str(refused.value) and "--resume" in str(refused.value) and "--overwrite" in str(refused.value)
    check_targets(str(out), resume=True, overwrite=False, fmt="csv")
    check_targets(str(out), resume=False, overwrite=True, fmt="csv")
    for kwargs, said in [
        ({"resume": True, "overwrite": True, "fmt": "csv"}, "pass one of them"),
        ({"resume": True, "overwrite": False, "fmt": "json"}, "JSON Lines"),
    ]:
        with pytest.raises(UsageError, match=said):
            check_targets(str(out), **kwargs)
    with pytest.raises(UsageError, match="-o OUT"):
        check_targets(None, resume=True, overwrite=False, fmt=None)


@pytest.fixture
def no_engine(monkeypatch):
    import llm_label_clf.engines as engines

    def refuse(*args, **kwargs):
        pytest.fail("this test must stop before an engine starts")

    monkeypatch.setattr(engines, "get_engine", refuse)


def test_the_command_refuses_to_replace_or_resume_the_wrong_output(no_engine, tmp_path, capsys):
    source = tmp_path / "in.csv"
    FRAME.assign(text=FRAME["text"].fillna("x").replace("", "y")).to_csv(source, index=False)
    out = tmp_path / "out.csv"
    out.write_text("id,text\n0,a\n")
    argv = ["classify", str(source), "--labels", "a,b", "-o", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"{out} exists" in err and "--resume" in err and "--overwrite" in err
    assert out.read_text() == "id,text\n0,a\n"  # untouched
    assert cli.main([*argv, "--resume"]) == 2  # no progress file: cannot be checked
    assert f"no progress file {out}.progress.json" in capsys.readouterr().err

    settings = {"command": "classify", "labels": ["a", "b"]}
    Progress(str(source), 3, 1, "0" * 64, {"bytes": 12, "rows": 1}, settings).save(progress_path(str(out)))
    assert cli.main([*argv, "--resume", "--labels", "a,c"]) == 2
    assert "--labels: was ['a', 'b'], now ['a', 'c']" in capsys.readouterr().err
    progress_path(str(out)).write_text("{not json")
    assert cli.main([*argv, "--resume"]) == 2
    assert f"progress file {out}.progress.json is unreadable" in capsys.readouterr().err


def test_a_tab_separated_csv_says_use_sep_tab(no_engine, tmp_path, capsys):
    source = tmp_path / "reviews.csv"
    source.write_text("text\tlabel\ngood\tpositive\nfine, really\tpositive\n")
    assert cli.main(["classify", str(source), "--labels", "positive,negative"]) == 2
    err = capsys.readouterr().err
    assert "reviews.csv" in err and "line 3" in err and "--sep '\\t'" in err, err


# ------------------------------------------------------------------ interrupted and resumed (session engine)

PROMPT = "Review: {text}\nSentiment:"
LABELS = ["positive", "negative"]


@pytest.fixture(scope="module")
def rows(datasets_dir) -> pd.DataFrame:
    frame = pd.read_csv(datasets_dir / "sst2_dev.csv").iloc[:10].reset_index(drop=True)
    frame.insert(0, "id", np.arange(100, 110))
    return frame


def interrupt_at_save(monkeypatch, number: int) -> None:
    """``Progress.save`` raises KeyboardInterrupt on its ``number``-th call
    (1: the fresh file, 2: chunk 1's commit, ...): the chunk is in the output
    but not committed."""
    real, calls = Progress.save, {"n": 0}

    def save(self, path):
        calls["n"] += 1
        if calls["n"] == number:
            raise KeyboardInterrupt
        real(self, path)

    monkeypatch.setattr(Progress, "save", save)


@pytest.mark.parametrize("name", ["out.csv", "out.parquet"])
def test_classify_resumes_after_an_interrupt(engine, rows, tmp_path, capsys, monkeypatch, name):
    """Chunks of 3 rows; stopped as chunk 2 is written but not committed
    (a torn line added too): the resumed run reads only rows 3-9 and the
    output equals a one-shot run's."""
    source, target, whole = tmp_path / "in.csv", tmp_path / name, tmp_path / f"whole_{name}"
    rows.to_csv(source, index=False)
    argv = ["classify", str(source), "--labels", ",".join(LABELS), "--prompt", PROMPT, "--no-progress",
            "--chunk-rows", "3"]  # fmt: skip
    assert cli.main([*argv, "-o", str(whole)]) == 0
    capsys.readouterr()
    with monkeypatch.context() as patched:
        interrupt_at_save(patched, 3)
        assert cli.main([*argv, "-o", str(target)]) == 130
    assert json.loads(progress_path(str(target)).read_text())["rows"] == 3
    if name.endswith(".csv"):
        assert len(pd.read_csv(target)) == 6  # chunk 2 is there, not committed
        with open(target, "a") as torn:
            torn.write('999,"a torn li')
    capsys.readouterr()
    assert cli.main([*argv, "-o", str(target), "--resume"]) == 0
    err = capsys.readouterr().err
    assert "its first 3 of 10 input rows are done; classifying the remaining 7 texts" in err, err
    assert "(7 classified in this run)" in err
    read = pd.read_parquet if name.endswith(".parquet") else pd.read_csv
    done, expected = read(target), read(whole)
    assert done["id"].tolist() == rows["id"].tolist()
    np.testing.assert_allclose(done[["proba_positive", "proba_negative"]], expected[["proba_positive", "proba_negative"]],
                               atol=1e-6)
    pd.testing.assert_frame_equal(done.drop(columns=["proba_positive", "proba_negative"]),
                                  expected.drop(columns=["proba_positive", "proba_negative"]))
    assert cli.main([*argv, "-o", str(target), "--resume"]) == 0  # complete: nothing to read
    assert "(0 classified in this run)" in capsys.readouterr().err


@pytest.mark.parametrize(("stop", "done", "remaining"), [(3, 3, 6), (2, 0, 9)])  # row 4 is bad
def test_evaluate_reports_every_row_after_a_resume(engine, rows, tmp_path, capsys, monkeypatch, stop, done, remaining):
    """The report of a resumed evaluate covers the rows written before the
    interrupt (read back from OUT) and after it: the one-shot report's; also
    when the run stopped before its first chunk was committed (nothing to
    read back, and the input's first 0 rows must match)."""
    source = tmp_path / "in.csv"
    rows.assign(text=[t if i != 4 else "" for i, t in enumerate(rows["text"])]).to_csv(source, index=False)
    argv = ["evaluate", str(source), "--prompt", PROMPT, "--no-progress", "--chunk-rows", "3", "--bad-rows", "skip"]
    assert cli.main(argv) == 0
    one_shot = capsys.readouterr().out
    with monkeypatch.context() as patched:
        interrupt_at_save(patched, stop)
        assert cli.main([*argv, "-o", str(tmp_path / "out.jsonl")]) == 130
    capsys.readouterr()
    assert cli.main([*argv, "-o", str(tmp_path / "out.jsonl"), "--resume"]) == 0
    captured = capsys.readouterr()
    assert f"its first {done} of 10 input rows are done; classifying the remaining {remaining} texts" in captured.err
    assert captured.out == one_shot
    assert re.search(r"^accuracy \d\.\d{3}  log-loss", captured.out, re.MULTILINE)
    assert pd.read_csv(tmp_path / "out.skipped.csv")["row"].tolist() == [4]


# ------------------------------------------------------------------ killed with SIGKILL (full tier)

KILL_ROWS = 20_000
KILL_CHUNK = 500


@pytest.mark.full
@pytest.mark.timeout(5400)  # two passes over 20,000 texts and six engine starts: ~35 min at ~21 texts/s (2 cores)
def test_classify_killed_five_times_resumes_to_the_same_output(datasets_dir, tmp_path):
    """A 20,000-row job (SST-2 dev texts cycled, each made distinct by its
    number) killed with SIGKILL at five random points, each time once a
    random number of rows is committed plus a random fraction of a chunk's
    time (so most kills land mid-chunk, some mid-write), and resumed with
    ``--resume``: every resumed run reads only the rows not yet committed
    (its "remaining N texts" is 20,000 less the progress file's rows) and
    the final output equals an uninterrupted run's (rows, order, ids,
    probabilities to 1e-6). The reads of each resume are printed."""
    rng = random.Random(44)
    texts = pd.read_csv(datasets_dir / "sst2_dev.csv")["text"].tolist()
    frame = pd.DataFrame({"id": range(KILL_ROWS), "text": [f"{i}. {texts[i % len(texts)]}" for i in range(KILL_ROWS)]})
    source, target, whole = tmp_path / "in.csv", tmp_path / "out.csv", tmp_path / "whole.csv"
    frame.to_csv(source, index=False)
    argv = [sys.executable, "-m", "llm_label_clf", "classify", str(source), "--labels", ",".join(LABELS),
            "--prompt", PROMPT, "--no-progress", "--chunk-rows", str(KILL_CHUNK)]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run([*argv, "-o", str(whole)], capture_output=True, text=True, timeout=3600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    one_shot_s = time.perf_counter() - started
    targets = sorted(rng.sample(range(KILL_CHUNK, KILL_ROWS - KILL_CHUNK, KILL_CHUNK), 5))
    reads = []
    for k, at in enumerate(targets):
        before = committed(target)
        process = subprocess.Popen([*argv, "-o", str(target), *(["--resume"] if k else [])],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while committed(target) < at and process.poll() is None:
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 1) * one_shot_s / (KILL_ROWS / KILL_CHUNK))
        process.send_signal(signal.SIGKILL)
        err = process.communicate(timeout=120)[1]
        assert process.returncode == -signal.SIGKILL, err[-2000:]
        if k:
            reads.append(remaining(err))
            assert reads[-1] == KILL_ROWS - before, err[-2000:]
    before = committed(target)
    final = subprocess.run([*argv, "-o", str(target), "--resume"], capture_output=True, text=True, timeout=3600,
                           check=False)  # fmt: skip
    assert final.returncode == 0, final.stderr[-2000:]
    reads.append(remaining(final.stderr))
    assert reads[-1] == KILL_ROWS - before
    assert f"({KILL_ROWS - before} classified in this run)" in final.stderr
    print(f"kills after rows committed {targets}; texts read by each resumed run (at its start): {reads}")
    out, expected = pd.read_csv(target), pd.read_csv(whole)
    assert out["id"].tolist() == list(range(KILL_ROWS))  # none missing, none twice, in order
    assert out["text"].tolist() == frame["text"].tolist()
    np.testing.assert_allclose(out[["proba_positive", "proba_negative"]], expected[["proba_positive", "proba_negative"]],
                               atol=1e-6)
    assert out["predicted"].tolist() == expected["predicted"].tolist()


def committed(target: Path) -> int:
    """The input rows the progress file of ``target`` says are done (0 before it is there)."""
    try:
        return json.loads(progress_path(str(target)).read_text())["rows"]
    except (OSError, ValueError):
        return 0


def remaining(err: str) -> int:
    """The texts a resumed run said it would classify."""
    found = re.search(r"classifying the remaining (\d+) texts", err)
    assert found, err[-2000:]
    return int(found.group(1))


def test_stdout_output_streams_with_one_header(no_engine, tmp_path, capsys, monkeypatch):
    """No -o: the chunks go to stdout as one CSV (checked with the sink alone:
    no engine)."""
    sink = open_sink("-", None, None)
    sink.begin(None)
    for part in (FRAME.iloc[:3], FRAME.iloc[3:]):
        assert sink.write(part.reset_index(drop=True))
    out = pd.read_csv(io.StringIO(capsys.readouterr().out), keep_default_na=False, na_values=[""])
    pd.testing.assert_frame_equal(out, read_back_whole(tmp_path, FRAME, "out.csv"))


def test_the_model_hint_names_the_option(monkeypatch):
    """The library's model-unavailable error, as the command line prints it:
    ``--model``, never ``model=``."""
    from llm_label_clf.cli.hints import cli_hint
    from llm_label_clf.exceptions import ModelUnavailableError
    from llm_label_clf.models.source import check_model_source

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError) as unavailable:
        check_model_source("nobody-here/no-such-model-44")
    assert "give model= a local folder" in str(unavailable.value)  # the library speaks of its parameter
    hint = cli_hint(str(unavailable.value))
    assert "give --model a local folder" in hint and "model=" not in hint, hint

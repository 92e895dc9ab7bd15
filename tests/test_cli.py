"""The command line end to end: ``demo`` (the README's main job), ``classify``
and ``evaluate`` on CSV, Parquet and JSON Lines, exit codes and error messages."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llm_label_clf import LLMLabelClassifier, cli


def test_demo_prints_a_classification_report(datasets_dir):
    result = subprocess.run(
        [sys.executable, "-m", "llm_label_clf", "demo", "--data", str(datasets_dir / "sst2_dev.csv"), "--limit", "40"],
        check=False, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "Classifying 40 texts" in out
    for word in ("negative", "positive", "precision", "recall", "f1-score", "accuracy", "log-loss", "texts/s"):
        assert word in out


def test_demo_reports_an_unreadable_file(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "llm_label_clf", "demo", "--data", str(tmp_path / "missing.csv")],
        check=False, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert "cannot read" in result.stderr and "missing.csv" in result.stderr


def test_help_lists_the_commands():
    result = subprocess.run([sys.executable, "-m", "llm_label_clf", "--help"], check=False, capture_output=True, text=True)
    assert result.returncode == 0 and "demo" in result.stdout


# ------------------------------------------------------------------ classify / evaluate
# Most cases call cli.main in-process: they share the session's engine (the
# `engine` fixture), so only the subprocess tests start engines of their own.

PROMPT = "Review: {text}\nSentiment:"
LABELS = ["positive", "negative"]  # deliberately not sorted: the output keeps this order
N_ROWS = 10


@pytest.fixture(scope="module")
def sst2_rows(datasets_dir) -> pd.DataFrame:
    """Ten SST-2 dev rows with an id column, so that row order can be checked."""
    frame = pd.read_csv(datasets_dir / "sst2_dev.csv").iloc[:N_ROWS].reset_index(drop=True)
    frame.insert(0, "id", np.arange(100, 100 + N_ROWS))
    return frame


@pytest.fixture(scope="module")
def tables(sst2_rows, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tables")
    paths = {"csv": folder / "rows.csv", "parquet": folder / "rows.parquet", "jsonl": folder / "rows.jsonl"}
    sst2_rows.to_csv(paths["csv"], index=False)
    sst2_rows.to_parquet(paths["parquet"], index=False)
    sst2_rows.to_json(paths["jsonl"], orient="records", lines=True)
    return paths


@pytest.fixture(scope="module")
def reference_proba(engine, sst2_rows) -> np.ndarray:
    """The estimator's own probabilities for the ten rows, fitted on their true
    labels, columns in LABELS order: what the command line must reproduce."""
    clf = LLMLabelClassifier(prompt=PROMPT, progress=False, low_mass="ignore")
    clf.fit(sst2_rows["text"], sst2_rows["label"])
    proba = clf.predict_proba(sst2_rows["text"])
    return proba[:, [clf.classes_.tolist().index(label) for label in LABELS]]


def read_any(path: Path) -> pd.DataFrame:
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if path.suffix == ".jsonl":
        return pd.read_json(path, lines=True, dtype=False)
    return pd.read_csv(path)


def most_probable(proba: np.ndarray) -> list[str]:
    """The label of each row's largest probability (columns in LABELS order); an
    exact tie goes to the label first in sorted order, as in clf.predict."""
    by_name = sorted(LABELS)
    sorted_proba = proba[:, [LABELS.index(label) for label in by_name]]
    return [by_name[k] for k in sorted_proba.argmax(axis=1)]


def check_classified(out: pd.DataFrame, rows: pd.DataFrame, reference: np.ndarray) -> None:
    assert list(out.columns) == list(rows.columns) + ["proba_positive", "proba_negative", "predicted"]
    assert len(out) == len(rows)
    assert out["id"].tolist() == rows["id"].tolist()  # same rows, same order
    assert out["text"].tolist() == rows["text"].tolist()
    proba = out[["proba_positive", "proba_negative"]].to_numpy(dtype=float)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(proba, reference, atol=1e-6)
    assert out["predicted"].tolist() == most_probable(proba)


@pytest.mark.parametrize(
    ("source", "target"), [("csv", None), ("parquet", "out.jsonl"), ("jsonl", "out.parquet"), ("csv", "out.csv")]
)
def test_classify_each_format(engine, tables, sst2_rows, reference_proba, tmp_path, capsys, source, target):
    argv = ["classify", str(tables[source]), "--labels", ",".join(LABELS), "--prompt", PROMPT, "--no-progress"]
    if target is not None:
        argv += ["-o", str(tmp_path / target)]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert f"Classifying {N_ROWS} texts" in captured.err
    if target is None:  # CSV on stdout, status on stderr only
        out = pd.read_csv(io.StringIO(captured.out))
    else:
        assert captured.out == ""
        out = read_any(tmp_path / target)
    check_classified(out, sst2_rows, reference_proba)


def test_classify_other_text_column_and_prompt_fields(engine, sst2_rows, tmp_path, capsys):
    """--text-column fills {text}; any other prompt field reads the column of its name."""
    frame = sst2_rows.rename(columns={"text": "review"}).assign(source="SST-2")
    path = tmp_path / "renamed.csv"
    frame.to_csv(path, index=False)
    argv = ["classify", str(path), "--text-column", "review", "--labels", "negative,positive",
            "--prompt", "From {source}. Review: {text}\nSentiment:", "--no-progress"]
    assert cli.main(argv) == 0
    out = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(out.columns) == ["id", "review", "label", "source", "proba_negative", "proba_positive", "predicted"]
    np.testing.assert_allclose(out[["proba_negative", "proba_positive"]].sum(axis=1), 1.0, atol=1e-6)


@pytest.mark.parametrize("labels", [None, "positive,negative"])  # default: sorted; given: any order
def test_evaluate_prints_a_report(engine, tables, sst2_rows, reference_proba, capsys, labels):
    argv = ["evaluate", str(tables["parquet"]), "--prompt", PROMPT, "--no-progress"]
    assert cli.main(argv + (["--labels", labels] if labels else [])) == 0
    out = capsys.readouterr().out
    for word in ("negative", "positive", "precision", "recall", "f1-score", "support", "macro avg"):
        assert word in out
    match = re.search(r"^accuracy (\d\.\d{3})  log-loss (\d+\.\d{3})$", out, re.MULTILINE)
    assert match, out
    predicted = np.array(most_probable(reference_proba))
    assert float(match.group(1)) == pytest.approx(np.mean(predicted == sst2_rows["label"].to_numpy()), abs=1e-3)
    gold = np.array([LABELS.index(label) for label in sst2_rows["label"]])
    log_loss = -np.mean(np.log(reference_proba[np.arange(N_ROWS), gold]))
    assert float(match.group(2)) == pytest.approx(log_loss, abs=1e-3)


def test_evaluate_rejects_gold_labels_outside_labels(tables, capsys):
    assert cli.main(["evaluate", str(tables["csv"]), "--labels", "positive,neutral"]) == 2
    err = capsys.readouterr().err
    assert "'negative'" in err and "not in --labels" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["classify", "@csv", "--labels", "a,b", "--text-column", "body"], ["rows.csv", "has no column 'body'", "'text'"]),
        (["evaluate", "@csv", "--label-column", "gold"], ["rows.csv", "has no column 'gold'", "--label-column"]),
        (["classify", "@csv", "--labels", "a,b", "--prompt", "{title}: {text}\nLabel:"], ["rows.csv", "no column 'title'"]),
        (["classify", "@missing", "--labels", "a,b"], ["cannot read", "missing.csv", "no such file"]),
        (["classify", "@garbage", "--labels", "a,b"], ["cannot read", "garbage.parquet", "as Parquet"]),
        (["classify", "@folder", "--labels", "a,b"], ["cannot read", "folder.csv", "is a directory"]),
        (["classify", "@empty", "--labels", "a,b"], ["empty.csv", "is empty"]),
        (["classify", "@header_only", "--labels", "a,b"], ["header_only.csv", "has no rows"]),
        (["classify", "@empty_jsonl", "--labels", "a,b"], ["empty.jsonl", "has no rows"]),
        (["classify", "@holes", "--labels", "a,b"], ["holes.csv", "column 'text'", "rows 1, 3"]),
        (["classify", "@txt", "--labels", "a,b"], ["rows.txt", "unknown format", ".parquet"]),
        (["classify", "@csv", "--labels", "a,b", "-o", "@out_xlsx"], ["out.xlsx", "unknown format"]),
        (["classify", "@csv", "--labels", "a,b", "-o", "@out_nowhere"], ["cannot write", "does not exist"]),
        (["classify", "@csv", "--labels", "a,,b"], ["--labels", "empty label"]),
        (["classify", "@csv", "--labels", "a,b,a"], ["--labels", "repeats a"]),
        (["classify", "@csv", "--labels", "a"], ["--labels", "at least two"]),
        (["classify", "@csv", "--labels", "a,b", "--prompt", "{text.upper}"], ["--prompt", "{text.upper}"]),
    ],
)
def test_input_and_usage_errors_exit_2(tables, tmp_path, capsys, argv, expected):
    (tmp_path / "garbage.parquet").write_bytes(b"this is not a parquet file")
    (tmp_path / "empty.csv").write_bytes(b"")
    (tmp_path / "header_only.csv").write_text("text,label\n")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "holes.csv").write_text("text,label\ngood,positive\n,negative\nbad,negative\n,positive\n")
    (tmp_path / "rows.txt").write_text("text\nhello\n")
    (tmp_path / "folder.csv").mkdir()
    names = {
        "csv": tables["csv"], "missing": tmp_path / "missing.csv", "garbage": tmp_path / "garbage.parquet",
        "folder": tmp_path / "folder.csv", "empty": tmp_path / "empty.csv", "header_only": tmp_path / "header_only.csv",
        "empty_jsonl": tmp_path / "empty.jsonl", "holes": tmp_path / "holes.csv", "txt": tmp_path / "rows.txt",
        "out_xlsx": tmp_path / "out.xlsx", "out_nowhere": tmp_path / "no" / "such" / "out.csv",
    }
    argv = [str(names[a[1:]]) if a.startswith("@") else a for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"llm-label-clf {argv[0]}: error: "), err
    for part in expected:
        assert part in err, err


def test_engine_failure_exits_1(tmp_path, capsys):
    """A model folder vLLM cannot load: the engine does not start (exit 1), named in the message."""
    model = tmp_path / "not-a-model"
    model.mkdir()
    source = tmp_path / "rows.csv"
    source.write_text("text\ngreat film\n")
    assert cli.main(["classify", str(source), "--labels", "positive,negative", "--model", str(model)]) == 1
    err = capsys.readouterr().err
    assert "cannot start the engine" in err and "not-a-model" in err


def test_classify_subprocess_entry_point(tables, sst2_rows, reference_proba):
    """`python -m llm_label_clf classify` in a fresh process: CSV on stdout, exit 0.
    The prompt is passed as typed in a shell, backslash-n for the line break."""
    typed_prompt = PROMPT.replace("\n", "\\n")
    assert "\n" not in typed_prompt
    result = subprocess.run(
        [sys.executable, "-m", "llm_label_clf", "classify", str(tables["jsonl"]), "--labels", ",".join(LABELS),
         "--prompt", typed_prompt],
        check=False, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    check_classified(pd.read_csv(io.StringIO(result.stdout)), sst2_rows, reference_proba)


def test_console_script_reports_a_missing_column(tables):
    script = Path(sys.executable).with_name("llm-label-clf")
    result = subprocess.run(
        [str(script), "evaluate", str(tables["csv"]), "--text-column", "sentence"],
        check=False, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 2
    assert "has no column 'sentence'" in result.stderr and "rows.csv" in result.stderr
    assert result.stdout == ""


def test_help_lists_classify_and_evaluate():
    result = subprocess.run([sys.executable, "-m", "llm_label_clf", "--help"], check=False, capture_output=True, text=True)
    assert result.returncode == 0
    for word in ("classify", "evaluate", "Exit status"):
        assert word in result.stdout

"""The command line end to end: ``demo`` (the README's main job), ``classify``
and ``evaluate`` on CSV, TSV, Parquet and JSON Lines, exit codes and error
messages; engine options, few-shot and calibration from ``--train``, label
modes, ``--sep``, ``--bad-rows`` and hints in option syntax.

Tests that take the ``no_engine`` fixture stop before any engine starts (they
parse arguments, read small files, or call the command line's pure helpers);
the others run the session's engine through ``cli.main``."""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llm_label_clf import LLMLabelClassifier, LowLabelMassWarning, TiedPredictionWarning, TruncationWarning, cli
from llm_label_clf.cli.chunks import open_input, read_table, record_starts
from llm_label_clf.cli.commands import build_parser
from llm_label_clf.cli.hints import OPTION_OF, cli_hint, engine_hint
from llm_label_clf.cli.options import (
    LENGTH_NORMS,
    LOW_MASS,
    TOO_LONG,
    engine_options,
    estimator_params,
    needs_labels,
    parse_engine_option,
)
from llm_label_clf.cli.rows import Rows, announce_bad_rows, bad_row_reasons, survey, with_predictions
from llm_label_clf.cli.tables import UsageError, format_of, skipped_path, write_table
from llm_label_clf.fitting.calibration import CALIBRATIONS
from llm_label_clf.fitting.label_words import LABEL_WORDS
from llm_label_clf.fitting.params import LABEL_MODES, PARAMETERS, check_params


def test_demo_prints_a_classification_report(healthy_demo):
    result = healthy_demo
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
    """The estimator's own probabilities for the ten rows, fitted zero-shot on
    them as the command fits it (the default calibration, on the input's rows),
    columns in LABELS order: what the command line must reproduce."""
    clf = LLMLabelClassifier(prompt=PROMPT, labels=LABELS, progress=False, low_mass="ignore")
    clf.fit(sst2_rows["text"])
    proba = clf.predict_proba(sst2_rows["text"])
    return proba[:, [clf.classes_.tolist().index(label) for label in LABELS]]


@pytest.fixture
def no_engine(monkeypatch):
    """For tests that must stop before the engine: starting one fails the test
    (``pytest.fail`` is no Exception, so the command line cannot catch it)."""
    import llm_label_clf.engines as engines

    def refuse(*args, **kwargs):
        pytest.fail("this test must stop before an engine starts")

    monkeypatch.setattr(engines, "get_engine", refuse)


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
    argv = ["classify", str(tables[source]), "--labels", ",".join(LABELS), "--prompt", PROMPT]
    if target is not None:
        argv += ["-o", str(tmp_path / target), "--chunk-rows", "4"]
    assert cli.main(argv + (["--no-progress"] if target is None else [])) == 0
    captured = capsys.readouterr()
    assert f"Classifying {N_ROWS} texts" in captured.err
    if target is not None:  # the bar: one final line per run
        assert captured.err.count("100%|") == 1 and f"{N_ROWS}/{N_ROWS} [" in captured.err, captured.err
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


def test_evaluate_rejects_gold_labels_outside_labels(no_engine, tables, capsys):
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
        (["classify", "@holes", "--labels", "a,b"], ["holes.csv", "column 'text'", "rows 1, 3", "--bad-rows skip"]),
        (["classify", "@txt", "--labels", "a,b"], ["rows.txt", "unknown format", ".parquet"]),
        (["classify", "@csv", "--labels", "a,b", "-o", "@out_xlsx"], ["out.xlsx", "unknown format"]),
        (["classify", "@csv", "--labels", "a,b", "-o", "@out_nowhere"], ["cannot write", "does not exist"]),
        (["classify", "@csv", "--labels", "a,,b"], ["--labels", "empty label"]),
        (["classify", "@csv", "--labels", "a,b,a"], ["--labels", "repeats a"]),
        (["classify", "@csv", "--labels", "a"], ["--labels", "at least two"]),
        (["classify", "@csv", "--labels", "a,b", "--prompt", "{text.upper}"], ["--prompt", "{text.upper}"]),
        (["classify", "@csv", "--labels", "a,b", "--sep", ";"], ["rows.csv", "no column 'text'", "--sep"]),
        (["classify", "@tsv_as_csv", "--labels", "a,b"], ["tabs.csv", "no column 'text'", "--sep"]),
    ],
)
def test_input_and_usage_errors_exit_2(no_engine, tables, tmp_path, capsys, argv, expected):
    (tmp_path / "garbage.parquet").write_bytes(b"this is not a parquet file")
    (tmp_path / "empty.csv").write_bytes(b"")
    (tmp_path / "header_only.csv").write_text("text,label\n")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "holes.csv").write_text("text,label\ngood,positive\n,negative\nbad,negative\n,positive\n")
    (tmp_path / "rows.txt").write_text("text\nhello\n")
    (tmp_path / "folder.csv").mkdir()
    (tmp_path / "tabs.csv").write_text("text\tlabel\ngood\tpositive\n")
    names = {
        "csv": tables["csv"], "missing": tmp_path / "missing.csv", "garbage": tmp_path / "garbage.parquet",
        "folder": tmp_path / "folder.csv", "empty": tmp_path / "empty.csv", "header_only": tmp_path / "header_only.csv",
        "empty_jsonl": tmp_path / "empty.jsonl", "holes": tmp_path / "holes.csv", "txt": tmp_path / "rows.txt",
        "tsv_as_csv": tmp_path / "tabs.csv",
        "out_xlsx": tmp_path / "out.xlsx", "out_nowhere": tmp_path / "no" / "such" / "out.csv",
    }
    argv = [str(names[a[1:]]) if a.startswith("@") else a for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"llm-label-clf {argv[0]}: error: "), err
    for part in expected:
        assert part in err, err


def test_missing_model_path_is_a_usage_error(tmp_path, capsys):
    """A --model path that is not there is the user's to fix (exit 2, named),
    found before vLLM is imported, so no engine starts."""
    source = tmp_path / "rows.csv"
    source.write_text("text\ngreat film\n")
    model = tmp_path / "no_model"
    assert cli.main(["classify", str(source), "--labels", "positive,negative", "--model", str(model)]) == 2
    err = capsys.readouterr().err
    assert "llm-label-clf classify: error: --model: " in err and "no_model" in err, err


def test_engine_failure_exits_1(tmp_path, capsys):
    """A model folder vLLM cannot load: the engine does not start (exit 1), named in the message."""
    model = tmp_path / "not-a-model"
    model.mkdir()
    source = tmp_path / "rows.csv"
    source.write_text("text\ngreat film\n")
    assert cli.main(["classify", str(source), "--labels", "positive,negative", "--model", str(model)]) == 1
    err = capsys.readouterr().err
    assert "cannot start the engine" in err and "not-a-model" in err


@pytest.mark.full
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


# ------------------------------------------------------------------ options: parsing only (no engine)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize(
    ("item", "key", "value"),
    [
        ("max_model_len=2048", "max_model_len", 2048),
        ("enforce_eager=true", "enforce_eager", True),
        ("dtype=float32", "dtype", "float32"),
        ("gpu_memory_utilization=0.5", "gpu_memory_utilization", 0.5),
        ("quantization=null", "quantization", None),
        ('compilation_config={"level": 0}', "compilation_config", {"level": 0}),
        ("max-model-len=512", "max_model_len", 512),  # vLLM's flag spelling
        ("tokenizer_mode=", "tokenizer_mode", ""),
        ("served_model_name=a=b", "served_model_name", "a=b"),
    ],
)
def test_engine_option_values_are_json_else_text(item, key, value):
    assert parse_engine_option(item) == (key, value)


@pytest.mark.parametrize("suffix", [".toml", ".json", ".conf"])  # .conf: whichever parses (here TOML)
def test_engine_options_file_then_command_line(tmp_path, suffix):
    path = tmp_path / f"engine{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps({"max_model_len": 4096, "dtype": "bfloat16", "enforce-eager": True}))
    else:
        path.write_text('max_model_len = 4096\ndtype = "bfloat16"\nenforce-eager = true\n')
    args = parse(
        "classify", "in.csv", "--labels", "a,b", "--engine-options", str(path),
        "--engine-option", "max_model_len=1024", "--engine-option", "dtype=float16", "--engine-option", "dtype=float32",
    )  # fmt: skip
    options = engine_options(args)
    assert options == {"max_model_len": 1024, "dtype": "float32", "enforce_eager": True}
    assert estimator_params(args, options)["engine_options"] == options
    assert engine_options(parse("classify", "in.csv", "--labels", "a,b")) is None


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--engine-option", "max_model_len"], ["--engine-option 'max_model_len'", "KEY=VALUE"]),
        (["--engine-option", "=2048"], ["--engine-option '=2048'", "KEY=VALUE"]),
        (["--engine-option", "max model len=1"], ["--engine-option 'max model len=1'"]),
        (["--engine-options", "@missing"], ["--engine-options", "missing.toml", "no such file"]),
        (["--engine-options", "@folder"], ["--engine-options", "options.d", "directory"]),
        (["--engine-options", "@bad_json"], ["--engine-options", "bad.json", "not valid JSON"]),
        (["--engine-options", "@bad_toml"], ["--engine-options", "bad.toml", "not valid TOML"]),
        (["--engine-options", "@neither"], ["--engine-options", "engine.cfg", "not valid JSON", "not valid TOML"]),
        (["--engine-options", "@list"], ["--engine-options", "list.json", "holds a list", "mapping"]),
        (["--engine-options", "@binary"], ["--engine-options", "binary.toml", "cannot read"]),
    ],
)
def test_bad_engine_options_exit_2(no_engine, tables, tmp_path, capsys, extra, expected):
    files = {
        "missing": tmp_path / "missing.toml", "folder": tmp_path / "options.d", "bad_json": tmp_path / "bad.json",
        "bad_toml": tmp_path / "bad.toml", "neither": tmp_path / "engine.cfg", "list": tmp_path / "list.json",
        "binary": tmp_path / "binary.toml",
    }  # fmt: skip
    files["folder"].mkdir()
    files["bad_json"].write_text('{"max_model_len": }')
    files["bad_toml"].write_text("max_model_len = \n")
    files["neither"].write_text("max_model_len: 2048\n")
    files["list"].write_text('["max_model_len", 2048]')
    files["binary"].write_bytes(b"\xff\xfe\x00max")
    extra = [str(files[a[1:]]) if a.startswith("@") else a for a in extra]
    assert cli.main(["classify", str(tables["csv"]), "--labels", "a,b", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llm-label-clf classify: error: "), err
    for part in expected:
        assert part in err, err


def _docstring_choices(name: str) -> set:
    """The values LLMLabelClassifier's docstring lists for parameter ``name``."""
    match = re.search(rf"^\s*{name} : \{{([^}}]*)\}}", LLMLabelClassifier.__doc__, re.MULTILINE)
    assert match, f"no {{...}} choices for {name} in the docstring"
    return {None if v.strip() == "None" else v.strip().strip('"') for v in match.group(1).split(",")}


@pytest.mark.parametrize(
    ("name", "option", "values"),
    [
        ("label_mode", "--label-mode", LABEL_MODES),
        ("label_words", "--label-words", LABEL_WORDS),
        ("calibration", "--calibration", CALIBRATIONS),
        ("length_norm", "--length-norm", LENGTH_NORMS),
        ("low_mass", "--low-mass", LOW_MASS),
        ("too_long", "--too-long", TOO_LONG),
    ],
)
def test_choices_are_the_estimators(capsys, name, option, values):
    """Each option takes exactly the values the estimator documents and accepts
    (None typed as 'none'), and passes them through unchanged."""
    assert set(values) == _docstring_choices(name)
    for value in values:
        assert PARAMETERS[name](value) is None
        args = parse("classify", "in.csv", "--labels", "a,b", option, "none" if value is None else value)
        assert estimator_params(args, None)[name] == value
    with pytest.raises(SystemExit) as exit_info:
        parse("classify", "in.csv", "--labels", "a,b", option, "bogus")
    assert exit_info.value.code == 2
    assert option in capsys.readouterr().err


def test_defaults_are_the_estimators():
    args = parse("evaluate", "in.csv")
    params = estimator_params(args, engine_options(args))
    defaults = LLMLabelClassifier().get_params()
    assert params.pop("progress") is True
    assert params == {name: defaults[name] for name in params}
    assert needs_labels(args) == []


def test_options_reach_the_estimator():
    args = parse(
        "evaluate", "in.csv", "--train", "train.csv", "--few-shot", "2", "--calibration", "learned",
        "--label-mode", "full_sequence", "--length-norm", "char", "--prune-margin", "2.5", "--random-state", "7", "--too-long", "raise",
        "--low-mass", "ignore", "--low-mass-threshold", "0.01", "--chat", "auto", "--batch-size", "8",
        "--no-progress", "--model", "some/model", "--prompt", "Q: {text}\\nA:", "--instructions", "Be brief.",
        "--read-store", "reads.sqlite", "--label-words", "as_is",
    )  # fmt: skip
    params = estimator_params(args, {"max_model_len": 1024})
    assert params == {
        "model": "some/model", "engine_options": {"max_model_len": 1024}, "prompt": "Q: {text}\nA:",
        "instructions": "Be brief.", "chat": "auto", "label_mode": "full_sequence", "length_norm": "char", "prune_margin": 2.5,
        "few_shot": 2, "calibration": "learned", "random_state": 7, "batch_size": 8, "progress": False,
        "low_mass": "ignore", "low_mass_threshold": 0.01, "too_long": "raise", "read_store": "reads.sqlite",
        "label_words": "as_is",
    }  # fmt: skip
    check_params(LLMLabelClassifier(**params))  # every value valid for the estimator
    assert needs_labels(args) == ["--few-shot 2", "--calibration learned"]
    for calibration in ("none", "contextual", "batch"):  # these need no labelled rows
        assert needs_labels(parse("classify", "in.csv", "--labels", "a,b", "--calibration", calibration)) == []


@pytest.mark.parametrize(
    ("typed", "sep"), [(";", ";"), ("\\t", "\t"), ("\t", "\t"), ("tab", "\t"), ("|", "|")]
)
def test_sep_takes_one_character(typed, sep):
    assert parse("classify", "in.txt", "--labels", "a,b", "--sep", typed).sep == sep


@pytest.mark.parametrize("typed", [",,", "", '"', "\\n"])
def test_sep_refuses_anything_else(capsys, typed):
    with pytest.raises(SystemExit) as exit_info:
        parse("classify", "in.txt", "--labels", "a,b", "--sep", typed)
    assert exit_info.value.code == 2
    assert "--sep" in capsys.readouterr().err


def test_help_shows_every_option(no_engine, capsys):
    for command in ("classify", "evaluate"):
        with pytest.raises(SystemExit) as exit_info:
            cli.main([command, "--help"])
        assert exit_info.value.code == 0
        out = capsys.readouterr().out
        extra = ["--engine-options", "--train", "--sep", "--bad-rows", "--skipped", "--label-column"]
        for option in [*OPTION_OF.values(), *extra]:  # every option the hints may name exists
            assert option in out, option
        assert "{auto,none,contextual,batch,learned}" in out and "{error,skip,keep}" in out


# ------------------------------------------------------------------ labelled data: usage errors (no engine)


@pytest.mark.parametrize("command", ["classify", "evaluate"])
@pytest.mark.parametrize(
    "extra", [["--few-shot", "2"], ["--calibration", "learned"], ["--few-shot", "1", "--calibration", "learned"]]
)
def test_learning_without_train_exits_2(no_engine, tables, capsys, command, extra):
    argv = [command, str(tables["csv"]), *extra] + (["--labels", "positive,negative"] if command == "classify" else [])
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"llm-label-clf {command}: error: "), err
    assert f"{extra[0]} {extra[1]}" in err and "--train FILE" in err and "'text'" in err and "'label'" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["classify", "@csv"], ["--labels a,b,c", "--train FILE"]),
        (["classify", "@csv", "--train", "@neutral", "--labels", "positive,negative"], ["neutral.csv", "'neutral'", "not in --labels"]),
        (["classify", "@csv", "--train", "@positive"], ["positive.csv", "one class ('positive')"]),
        (["classify", "@csv", "--train", "@positive", "--labels", "positive,negative"], ["--train", "positive.csv", "no rows of class(es) 'negative'"]),
        (["evaluate", "@csv", "--train", "@positive", "--calibration", "learned"], ["positive.csv", "no rows of class(es) 'negative'"]),
        (["classify", "@csv", "--train", "@gold", "--labels", "positive,negative"], ["gold.csv", "has no column 'label'", "--label-column"]),
        (["classify", "@csv", "--train", "@holes", "--few-shot", "1"], ["train_holes.csv", "column 'text'", "rows 1, 2", "fill or drop"]),
        (["classify", "@csv", "--train", "@missing", "--few-shot", "1"], ["cannot read", "nowhere.csv", "no such file"]),
    ],
)
def test_train_usage_errors_exit_2(no_engine, tables, tmp_path, capsys, argv, expected):
    pd.DataFrame({"text": ["good", "bad", "so-so"], "label": ["positive", "negative", "neutral"]}).to_csv(
        tmp_path / "neutral.csv", index=False
    )
    pd.DataFrame({"text": ["good", "fine"], "label": ["positive", "positive"]}).to_csv(
        tmp_path / "positive.csv", index=False
    )
    pd.DataFrame({"text": ["good", "bad"], "gold": ["positive", "negative"]}).to_csv(tmp_path / "gold.csv", index=False)
    (tmp_path / "train_holes.csv").write_text('text,label\ngood,positive\n,negative\n"  ",positive\nbad,negative\n')
    names = {
        "csv": tables["csv"], "neutral": tmp_path / "neutral.csv", "positive": tmp_path / "positive.csv",
        "gold": tmp_path / "gold.csv", "holes": tmp_path / "train_holes.csv", "missing": tmp_path / "nowhere.csv",
    }  # fmt: skip
    argv = [str(names[a[1:]]) if a.startswith("@") else a for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"llm-label-clf {argv[0]}: error: "), err
    for part in expected:
        assert part in err, err


# ------------------------------------------------------------------ TSV, --sep and line numbers (no engine)

SEPARATED = pd.DataFrame({"id": [1, 2, 3], "text": ["a, b; c", 'she said "hi"', "two\nlines"], "label": ["x", "y", "x"]})


@pytest.mark.parametrize(
    ("name", "sep", "written_sep"),
    [("rows.tsv", None, "\t"), ("rows.tsv.gz", None, "\t"), ("rows.txt", ";", ";"), ("rows.csv", "|", "|"), ("rows.dat", "\t", "\t")],
)
def test_delimited_text_round_trips(tmp_path, name, sep, written_sep):
    path = tmp_path / name
    write_table(SEPARATED, str(path), sep=sep)
    if not name.endswith(".gz"):
        assert path.read_text().splitlines()[0] == written_sep.join(SEPARATED.columns)
    pd.testing.assert_frame_equal(read_table(str(path), ["text"], sep=sep), SEPARATED)
    with open_input(str(path), sep) as source:
        assert source.sep == written_sep
        assert list(source.lines()) == [2, 3, 4]  # the third row's quoted text spans lines 4 and 5


def test_unknown_extension_needs_sep(tmp_path):
    with pytest.raises(UsageError, match="--sep"):
        format_of(str(tmp_path / "rows.txt"), "input")
    assert format_of(str(tmp_path / "rows.txt"), "input", ";") == "csv"
    assert format_of(str(tmp_path / "rows.parquet"), "input", ";") == "parquet"  # --sep leaves other formats


def test_stdin_and_stdout_honour_sep(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(SEPARATED.to_csv(sep=";", index=False)))
    with open_input("-", ";") as source:
        frame = next(source.chunks(100, ["text"]))
        assert list(source.lines()) == [2, 3, 4]
    pd.testing.assert_frame_equal(frame, SEPARATED)
    write_table(frame, "-", sep="\t")
    assert capsys.readouterr().out.splitlines()[0] == "id\ttext\tlabel"


def test_row_lines_skip_blank_lines_and_follow_quoted_line_breaks(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text('id,text\n1,one\n\n2,"two\nlines"\n3,\r\n4,four\n')
    assert read_table(str(path), ["text"])["id"].tolist() == [1, 2, 3, 4]
    with open_input(str(path), None) as source:
        assert list(source.lines()) == [2, 4, 6, 7]
    assert list(record_starts(io.StringIO("a\n1\n2\n"), ",")) == [2, 3]
    parquet = tmp_path / "rows.parquet"
    SEPARATED.to_parquet(parquet, index=False)
    with open_input(str(parquet), None) as source:
        assert source.sep is None  # no lines in Parquet


def test_chunks_are_exact_and_agree_on_types(tmp_path):
    """Chunks hold exactly --chunk-rows rows whatever the reader gives (Parquet
    row groups of 3 re-cut into 4s), and a column whose type differs between
    chunks gets one type over the whole file from the survey."""
    frame = pd.DataFrame({"text": [f"t{i}" for i in range(10)], "n": [1, 2, 3, 4, 5, None, 7, 8, 9, 10]})
    frame.to_parquet(tmp_path / "rows.parquet", index=False, row_group_size=3)
    with open_input(str(tmp_path / "rows.parquet"), None) as source:
        assert [len(c) for c in source.chunks(4)] == [4, 4, 2]
    (tmp_path / "rows.csv").write_text("text,n\n" + "".join(f"t{i},{'' if i == 5 else i}\n" for i in range(10)))
    args = policy_args("error", input=str(tmp_path / "rows.csv"), text_column="text")
    with open_input(str(tmp_path / "rows.csv"), None) as source:
        assert [c["n"].dtype.kind for c in source.chunks(4)] == ["i", "f", "i"]
        found = survey(source, args, {"text": "text"}, chunk_rows=4, digest_rows=0, evaluate=False)
        assert {c["n"].dtype.kind for c in source.chunks(4, [], found.dtypes)} == {"f"}


# ------------------------------------------------------------------ bad rows: the policy (no engine)


def test_bad_row_reasons_name_missing_and_blank_cells():
    frame = pd.DataFrame(
        {"text": ["ok", None, "", "   ", np.nan, "fine", "x"], "label": ["a", "b", None, "a", "b", " ", 0]}
    )
    no_text, no_label = "no text in column 'text'", "no label in column 'label'"
    assert bad_row_reasons(frame, [("text", "text"), ("label", "label")]) == [
        "", no_text, f"{no_text}; {no_label}", no_text, no_text, no_label, "",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("output", "source", "expected"),
    [
        ("out.parquet", "in.csv", "out.skipped.csv"),
        ("dir/out.csv.gz", "in.csv", "dir/out.skipped.csv"),
        ("out.tsv", "in.csv", "out.skipped.csv"),
        ("run.2024.csv", "in.csv", "run.2024.skipped.csv"),
        ("out.txt", "in.csv", "out.txt.skipped.csv"),
        (None, "data/in.tsv", "data/in.skipped.csv"),
        ("-", "in.jsonl", "in.skipped.csv"),
        ("-", "-", None),
    ],
)
def test_skipped_path(output, source, expected):
    assert skipped_path(output, source) == expected


def policy_args(bad_rows: str, **more) -> argparse.Namespace:
    """The options the survey and the bad-row policy read, as the parser would set them."""
    return argparse.Namespace(
        **{"bad_rows": bad_rows, "input": "in.csv", "command": "classify", "sep": None, "text_column": "text",
           "label_column": "label", "output": None, **more}
    )  # fmt: skip


def test_bad_rows_policies_keep_the_input_order(tmp_path, capsys):
    frame = pd.DataFrame({"id": [10, 11, 12, 13, 14], "text": ["a", "", "c", None, "e"]})
    source_path = tmp_path / "in.jsonl"
    frame.to_json(source_path, orient="records", lines=True)
    cells = [("text", "text")]
    proba = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    predicted = np.array(["x", "y", "x"], dtype=object)
    reason = "no text in column 'text'"

    def surveyed(policy, chunk_rows=2):
        with open_input(str(source_path), None) as source:
            args = policy_args(policy, input=str(source_path))
            return survey(source, args, {"text": "text"}, chunk_rows=chunk_rows, digest_rows=0, evaluate=False)

    with pytest.raises(UsageError, match=r"in.jsonl: 2 row\(s\) have no text in column 'text' \(rows 1, 3,"):
        surveyed("error")
    found = surveyed("keep")
    assert (found.rows, found.bad, found.used) == (5, [1, 3], 3)
    assert found.sample["text"].tolist() == ["a", "c", "e"]  # the first good rows: the zero-shot fit's samples

    kept = Rows.of(frame, cells, keep=True)
    assert (kept.used, kept.bad, kept.keep) == ([0, 2, 4], [1, 3], True)
    out = with_predictions(frame, ["x", "y"], proba, predicted, kept)
    assert list(out.columns) == ["id", "text", "proba_x", "proba_y", "predicted", "error"]
    assert out["id"].tolist() == [10, 11, 12, 13, 14]
    np.testing.assert_allclose(out["proba_x"], [0.9, np.nan, 0.2, np.nan, 0.6])
    assert [v if isinstance(v, str) else None for v in out["predicted"]] == ["x", None, "y", None, "x"]
    assert [v if isinstance(v, str) else None for v in out["error"]] == [None, reason, None, reason, None]

    skipped = Rows.of(frame, cells, keep=False)
    out = with_predictions(frame, ["x", "y"], proba, predicted, skipped)
    assert list(out.columns) == ["id", "text", "proba_x", "proba_y", "predicted"]
    assert out["id"].tolist() == [10, 12, 14]
    np.testing.assert_allclose(out[["proba_x", "proba_y"]].to_numpy(), proba)

    frame.iloc[[1, 3]].to_json(source_path, orient="records", lines=True)
    with pytest.raises(UsageError, match="every row is bad"):
        surveyed("skip")


def test_skipped_rows_are_listed_with_lines_and_reasons(tmp_path, capsys):
    source = tmp_path / "in.csv"
    source.write_text('id,text,label\n1,"a\nb",x\n2,,y\n\n3,c,\n4,d,x\n')
    args = policy_args("skip", input=str(source), command="evaluate")
    listed = tmp_path / "skipped.csv"
    with open_input(str(source), None) as table:
        found = survey(table, args, {"text": "text"}, chunk_rows=2, digest_rows=0, evaluate=True)
    announce_bad_rows(found, args, str(listed))
    assert pd.read_csv(listed).to_dict("list") == {
        "row": [1, 2], "line": [4, 6], "reason": ["no text in column 'text'", "no label in column 'label'"],
    }  # fmt: skip
    assert f"skipped 2 bad row(s) (rows 1, 2); they are listed with the reason in {listed}" in capsys.readouterr().err

    source.write_text('id,text,label\n1,"a\nb",x\n4,d,x\n')
    with open_input(str(source), None) as table:
        clean = survey(table, args, {"text": "text"}, chunk_rows=2, digest_rows=0, evaluate=True)
    announce_bad_rows(clean, args, str(listed))  # rewritten, header only: no stale rows
    assert pd.read_csv(listed).empty and list(pd.read_csv(listed).columns) == ["row", "line", "reason"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--skipped", "@listed"], ["--skipped", "needs --bad-rows skip"]),
        (["--bad-rows", "skip", "--skipped", "@input"], ["--bad-rows skip", "reads or writes"]),
        (["--bad-rows", "skip", "--skipped", "@nowhere"], ["cannot write", "does not exist"]),
        (["--bad-rows", "skip"], ["every row is bad", "nothing to classify"]),
        (["--bad-rows", "keep"], ["every row is bad"]),
        ([], ["2 row(s) have no text", "rows 0, 1", "--bad-rows skip"]),
    ],
)
def test_bad_rows_usage_errors_exit_2(no_engine, tmp_path, capsys, argv, expected):
    source = tmp_path / "all_bad.csv"
    source.write_text('text,label\n,x\n"  ",y\n')
    names = {"listed": tmp_path / "listed.csv", "input": source, "nowhere": tmp_path / "no" / "listed.csv"}
    argv = [str(names[a[1:]]) if a.startswith("@") else a for a in argv]
    assert cli.main(["classify", str(source), "--labels", "x,y", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llm-label-clf classify: error: "), err
    for part in expected:
        assert part in err, err
    assert not (tmp_path / "all_bad.skipped.csv").exists()  # nothing written on a usage error


def test_skip_from_stdin_to_stdout_needs_skipped(no_engine, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("text\ngood\n\n"))
    assert cli.main(["classify", "-", "--labels", "x,y", "--bad-rows", "skip"]) == 2
    assert "--skipped FILE" in capsys.readouterr().err


# ------------------------------------------------------------------ hints in option syntax (no engine)
# The messages are the library's own, produced by its pure code paths, so a
# reworded hint there is checked here too.


class WordTokenizer:
    """A stand-in tokenizer: one token per word, token k decodes to "wk"."""

    def __call__(self, texts, add_special_tokens=True):
        return {"input_ids": [self.encode(t) for t in texts]}

    def encode(self, text, add_special_tokens=True):
        return list(range(len(text.split())))

    def decode(self, ids):
        return f"w{ids[0]}"


def library_messages() -> dict[str, str]:
    """Errors and warnings the estimator raises, by the parameter they hint at."""
    from llm_label_clf.fitting.calibration import Calibration, LearnedCalibrator
    from llm_label_clf.fitting.fitted import FittedOutput, check_label_mass
    from llm_label_clf.fitting.ties import warn_ties
    from llm_label_clf.reading.label_tokens import distinct_first_tokens
    from llm_label_clf.reading.plan import ClassReads
    from llm_label_clf.reading.prompts import PromptTemplate
    from llm_label_clf.reading.render import PromptLayout, warn_truncated

    messages = {}
    with pytest.warns(TruncationWarning) as truncated:
        warn_truncated(list(range(12)), 100)
    messages["truncated"] = str(truncated[0].message)
    reads = ClassReads(np.log(np.full((3, 2), 1e-6)), np.zeros((3, 2)), np.zeros(3, dtype=np.int64))
    output = FittedOutput(np.array(["a", "b"]), Calibration(None, np.log([0.5, 0.5])))
    with pytest.warns(LowLabelMassWarning) as low:
        check_label_mass([output], [reads], "warn", LLMLabelClassifier().low_mass_threshold)
    messages["low_mass"] = str(low[0].message)
    layout = PromptLayout(PromptTemplate.parse(PROMPT), chat=False, too_long="raise")
    with pytest.raises(ValueError) as too_long:
        layout.encode([{"text": "short"}, {"text": "far too many words here"}], WordTokenizer(), 5)
    messages["too_long"] = str(too_long.value)
    with pytest.raises(ValueError) as learned:
        LearnedCalibrator.fit(np.zeros((3, 2)), np.array([0, 0, 1]), 2, random_state=0)
    messages["learned"] = str(learned.value)
    with pytest.raises(ValueError) as first_token:
        distinct_first_tokens(WordTokenizer(), [[(5,)], [(5, 6)]], [[" good"], [" goodish"]], ["a", "b"])
    messages["label_mode"] = str(first_token.value)
    with pytest.raises(ValueError) as batch:
        check_params(LLMLabelClassifier(batch_size=0))
    messages["batch_size"] = str(batch.value)
    with pytest.warns(TiedPredictionWarning) as tie:
        warn_ties([np.array([False, False, True, False])], ["a", "b"])
    messages["ties"] = str(tie[0].message)
    return messages


def test_hints_name_options_and_input_rows():
    rows = [3, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16]  # X item k is input row rows[k]
    hints = {key: cli_hint(text, where="in.csv", rows=rows) for key, text in library_messages().items()}
    for key, hint in hints.items():
        for python in ("low_mass=", "too_long=", "engine_options[", "label_mode=", "few_shot", "calibration=",
                       "labels={", "batch_size", "X item", "LLMLabelClassifier:"):  # fmt: skip
            assert python not in hint, (key, hint)
    assert "rows [3, 5, 6, 8, 9, 10, 11, 12, 13, 14, ...] of in.csv" in hints["truncated"]
    assert "--too-long raise" in hints["truncated"]
    assert "(in.csv row 3:" in hints["low_mass"] and "--low-mass ignore" in hints["low_mass"]
    # one rule for both warnings: the tie's X item 2 is input row 6, and the fix gives the value
    assert "(in.csv row 6)" in hints["ties"] and "--engine-option dtype=float32 " in hints["ties"]
    assert hints["too_long"].startswith("in.csv row 5 is ")
    assert "--engine-option max_model_len=" in hints["too_long"] and "--too-long truncate" in hints["too_long"]
    assert "--calibration learned needs" in hints["learned"] and "--few-shot" not in hints["learned"]
    assert "--calibration batch or contextual" in hints["learned"] and "--train" in hints["learned"]
    assert "--label-mode full_sequence (or auto)" in hints["label_mode"] and "--labels" in hints["label_mode"]
    assert hints["batch_size"].startswith("--batch-size 0 must be")


def test_hints_rewrite_settings_left_as_python():
    """The settings in the library's other hints (few-shot, prompt, options mode, fit without y)."""
    assert cli_hint(
        "LLMLabelClassifier: few_shot=3 examples per class take 5000 tokens, leaving less than 64 of the "
        "model's 2048 for the text; lower few_shot or raise engine_options['max_model_len']"
    ) == (
        "--few-shot 3 examples per class take 5000 tokens, leaving less than 64 of the model's 2048 for the "
        "text; lower --few-shot or raise --engine-option max_model_len=..."
    )  # fmt: skip
    assert cli_hint("LLMLabelClassifier: prompt='Review: {text}' ends with a field").startswith(
        "--prompt 'Review: {text}' ends"
    )
    assert cli_hint("filled only with label_mode='options' (label_mode='auto')") == (
        "filled only with --label-mode options (--label-mode auto)"
    )
    assert cli_hint("calibration='learned' learns from labelled texts: fit needs y").endswith(
        "pass labelled rows with --train FILE"
    )
    assert cli_hint("X item 4 failed", where="train.csv") == "train.csv row 4 failed"  # no row map: as counted
    failed = "label reads failed for input item(s) [1, 2] (in the engine batch starting at item 0: item(s) [1, 2])"
    assert cli_hint(failed, where="in.csv", rows=[0, 4, 7]) == (
        "label reads failed for rows [4, 7] of in.csv (in the engine batch starting at item 0: item(s) [1, 2])"
    )


def test_engine_hints_name_engine_options():
    vllm = (
        "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
        "decreasing `max_model_len` when initializing the engine. Lower --gpu-memory-utilization=0.9 or "
        "--max-model-len (e.g. `--kv-cache-memory-bytes 1000000`)"
    )
    hint = engine_hint(vllm, ["--few-shot"])
    assert "`--engine-option gpu_memory_utilization=...`" in hint
    assert "`--engine-option max_model_len=...`" in hint
    assert "--engine-option gpu_memory_utilization=0.9" in hint and "--engine-option max_model_len=..." in hint
    assert "--engine-option kv_cache_memory_bytes=1000000" in hint
    assert "--gpu-memory-utilization" not in hint
    assert engine_hint("see --few-shot", ["--few-shot"]) == "see --few-shot"  # ours stay; nothing to add
    assert engine_hint("no such model folder") == "no such model folder"
    unknown = engine_hint("TypeError: AsyncEngineArgs.__init__() got an unexpected keyword argument 'max_len'")
    assert "max_len is not a vLLM engine argument" in unknown and "--engine-option" in unknown


# ------------------------------------------------------------------ the new options end to end (engine)


@pytest.fixture(scope="module")
def train_table(datasets_dir, tmp_path_factory) -> Path:
    """Forty labelled SST-2 dev rows after the ten classified ones, as --train."""
    frame = pd.read_csv(datasets_dir / "sst2_dev.csv").iloc[N_ROWS : N_ROWS + 40]
    path = tmp_path_factory.mktemp("train") / "train.csv"
    frame.to_csv(path, index=False)
    return path


def reference(rows: pd.DataFrame, labels: list[str], train: Path | None = None, **params) -> np.ndarray:
    """What the command line must reproduce: the estimator with ``params``,
    fitted as the command fits it (on --train, else zero-shot on the input's
    rows: at most 256, so all of these), columns in ``labels`` order."""
    clf = LLMLabelClassifier(
        prompt=PROMPT, progress=False, low_mass="ignore", labels={label: label for label in labels}, **params
    )
    X = pd.DataFrame({"text": rows["text"].tolist()})
    if train is None:
        clf.fit(X)
    else:
        frame = pd.read_csv(train)
        clf.fit(pd.DataFrame({"text": frame["text"].tolist()}), frame["label"].to_numpy(dtype=object))
    proba = clf.predict_proba(X)
    return proba[:, [clf.classes_.tolist().index(label) for label in labels]]


def classify_argv(source: Path | str, *extra: str) -> list[str]:
    return ["classify", str(source), "--labels", ",".join(LABELS), "--prompt", PROMPT, "--no-progress", *extra]


def test_engine_options_reach_the_estimator(engine, tables, sst2_rows, reference_proba, tmp_path, capsys, monkeypatch):
    """--engine-options FILE, then --engine-option over it, reach the estimator.
    On CPU, where the suite runs in float32, they resolve to the session
    engine's settings, so no engine starts."""
    import llm_label_clf.classifier as classifier

    seen = []
    real = classifier.engine_for

    def spy(model, base_url, engine_options, **kwargs):
        seen.append(engine_options)
        return real(model, base_url, engine_options, **kwargs)

    monkeypatch.setattr(classifier, "engine_for", spy)
    options = tmp_path / "engine.toml"
    options.write_text('enforce_eager = true\ndtype = "bfloat16"\n')
    argv = classify_argv(tables["csv"], "--engine-options", str(options), "--engine-option", "dtype=float32")
    assert cli.main(argv) == 0
    assert seen and all(o == {"enforce_eager": True, "dtype": "float32"} for o in seen)
    check_classified(pd.read_csv(io.StringIO(capsys.readouterr().out)), sst2_rows, reference_proba)


def test_unknown_engine_option_exits_1_naming_it(tmp_path, capsys):
    """vLLM refuses an engine argument it does not know before any process starts."""
    source = tmp_path / "rows.csv"
    source.write_text("text\ngreat film\n")
    argv = ["classify", str(source), "--labels", "positive,negative", "--engine-option", "no_such_argument=1"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "cannot start the engine" in err and "no_such_argument is not a vLLM engine argument" in err


def test_classify_few_shot_from_train(engine, tables, sst2_rows, train_table, capsys):
    argv = classify_argv(tables["csv"], "--train", str(train_table), "--few-shot", "1", "--random-state", "0")
    assert cli.main(argv) == 0
    expected = reference(sst2_rows, LABELS, train_table, few_shot=1, random_state=0)
    check_classified(pd.read_csv(io.StringIO(capsys.readouterr().out)), sst2_rows, expected)


def test_evaluate_learned_calibration_from_train(engine, tables, sst2_rows, train_table, capsys):
    argv = ["evaluate", str(tables["csv"]), "--prompt", PROMPT, "--no-progress", "--train", str(train_table),
            "--calibration", "learned", "--random-state", "0"]  # fmt: skip
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    match = re.search(r"^accuracy (\d\.\d{3})  log-loss (\d+\.\d{3})$", out, re.MULTILINE)
    assert match, out
    labels = ["negative", "positive"]  # evaluate's default: the label column's values, sorted
    expected = reference(sst2_rows, labels, train_table, calibration="learned", random_state=0)
    gold = np.array([labels.index(label) for label in sst2_rows["label"]])
    assert float(match.group(1)) == pytest.approx(np.mean(expected.argmax(axis=1) == gold), abs=1e-3)
    log_loss = -np.mean(np.log(expected[np.arange(N_ROWS), gold]))
    assert float(match.group(2)) == pytest.approx(log_loss, abs=1e-3)


@pytest.mark.parametrize(
    ("extra", "params"),
    [
        (["--label-mode", "full_sequence", "--length-norm", "char"], {"label_mode": "full_sequence", "length_norm": "char"}),
        (["--label-mode", "options"], {"label_mode": "options"}),
        (["--calibration", "contextual"], {"calibration": "contextual"}),
    ],
)
def test_zero_shot_reading_options(engine, tables, sst2_rows, capsys, extra, params):
    assert cli.main(classify_argv(tables["csv"], *extra)) == 0
    check_classified(pd.read_csv(io.StringIO(capsys.readouterr().out)), sst2_rows, reference(sst2_rows, LABELS, **params))


def test_classify_tsv_and_separated_stdin(engine, sst2_rows, reference_proba, tmp_path, capsys, monkeypatch):
    source, target = tmp_path / "rows.tsv", tmp_path / "out.tsv"
    sst2_rows.to_csv(source, sep="\t", index=False)
    assert cli.main(classify_argv(source, "-o", str(target))) == 0
    check_classified(pd.read_csv(target, sep="\t"), sst2_rows, reference_proba)
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO(sst2_rows.to_csv(sep=";", index=False)))
    assert cli.main(classify_argv("-", "--sep", ";")) == 0
    check_classified(pd.read_csv(io.StringIO(capsys.readouterr().out), sep=";"), sst2_rows, reference_proba)


def with_bad_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with three bad ones between them: at 2 no text, at 5 a blank
    text, at 12 (the last) a text without a label (bad only to evaluate)."""
    bad = pd.DataFrame({"id": [900, 901, 902], "text": [None, "   ", "a fine film"], "label": ["positive", "negative", None]})
    parts = [rows.iloc[:2], bad.iloc[[0]], rows.iloc[2:4], bad.iloc[[1]], rows.iloc[4:], bad.iloc[[2]]]
    return pd.concat(parts, ignore_index=True)


def test_classify_skips_bad_rows_into_a_side_file(engine, sst2_rows, reference_proba, tmp_path, capsys):
    frame = with_bad_rows(sst2_rows)
    source, target = tmp_path / "holey.csv", tmp_path / "out.parquet"
    frame.to_csv(source, index=False)
    assert cli.main(classify_argv(source, "--bad-rows", "skip", "-o", str(target))) == 0
    err = capsys.readouterr().err
    listed = tmp_path / "out.skipped.csv"
    assert f"Classifying {N_ROWS + 1} texts" in err
    assert f"skipped 2 bad row(s) (rows 2, 5); they are listed with the reason in {listed}" in err
    out = pd.read_parquet(target)
    assert out["id"].tolist() == [i for i in frame["id"] if i not in (900, 901)]  # input order, bad rows out
    proba = out[["proba_positive", "proba_negative"]].to_numpy(dtype=float)
    np.testing.assert_allclose(proba[:N_ROWS], reference_proba, atol=1e-6)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-6)
    assert pd.read_csv(listed).to_dict("list") == {
        "row": [2, 5], "line": [4, 7], "reason": ["no text in column 'text'"] * 2,
    }  # fmt: skip


def test_evaluate_keeps_bad_rows_in_place(engine, sst2_rows, reference_proba, tmp_path, capsys):
    frame = with_bad_rows(sst2_rows)
    source, target = tmp_path / "holey.csv", tmp_path / "out.csv"
    frame.to_csv(source, index=False)
    argv = ["evaluate", str(source), "--prompt", PROMPT, "--no-progress", "--bad-rows", "keep", "-o", str(target)]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert "3 bad row(s) (rows 2, 5, 12) left unclassified in place" in captured.err
    assert "the report leaves out the 3 bad row(s)" in captured.err
    out = pd.read_csv(target)
    assert out["id"].tolist() == frame["id"].tolist()  # every row, in place
    bad = out["id"].isin([900, 901, 902]).to_numpy()
    assert out.loc[bad, ["proba_negative", "proba_positive", "predicted"]].isna().all().all()
    assert out.loc[bad, "error"].tolist() == [
        "no text in column 'text'", "no text in column 'text'", "no label in column 'label'",
    ]  # fmt: skip
    assert out.loc[~bad, "error"].isna().all()
    np.testing.assert_allclose(out.loc[~bad, ["proba_positive", "proba_negative"]].to_numpy(), reference_proba, atol=1e-6)
    match = re.search(r"^accuracy (\d\.\d{3})", captured.out, re.MULTILINE)
    predicted = np.array(most_probable(reference_proba))
    assert float(match.group(1)) == pytest.approx(np.mean(predicted == sst2_rows["label"].to_numpy()), abs=1e-3)


def test_low_mass_hints_in_option_syntax(engine, tables, capsys):
    """Every text is below a threshold of 0.999999: the warning, then the error
    with --low-mass raise, say the option to set, not the parameter."""
    argv = classify_argv(tables["csv"], "--low-mass-threshold", "0.999999")
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "llm-label-clf classify: warning: " in err and "rows.csv row 0:" in err
    assert "--low-mass ignore" in err and "low_mass=" not in err
    assert cli.main([*argv, "--low-mass", "raise"]) == 2
    err = capsys.readouterr().err
    assert "llm-label-clf classify: error: " in err and "--low-mass ignore" in err and "low_mass=" not in err


def test_too_long_error_names_the_input_row(engine, tmp_path, capsys):
    """With a bad row skipped before it, the too-long text is X item 2 but input row 3."""
    frame = pd.DataFrame({"text": [None, "a fine film", "a dull film", "great " * (engine.max_model_len + 50)]})
    source = tmp_path / "long.csv"
    frame.to_csv(source, index=False)
    argv = classify_argv(source, "--bad-rows", "skip", "--too-long", "raise", "--skipped", str(tmp_path / "s.csv"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "long.csv row 3 is " in err, err
    assert "--engine-option max_model_len=" in err and "--too-long truncate" in err
    for python in ("X item", "engine_options[", "too_long="):
        assert python not in err

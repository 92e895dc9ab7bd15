"""The command line: ``llm-label-clf demo`` (the README's main job) end to end."""

from __future__ import annotations

import subprocess
import sys


def test_demo_prints_a_classification_report(datasets_dir):
    result = subprocess.run(
        [sys.executable, "-m", "llm_label_clf", "demo", "--data", str(datasets_dir / "sst2_dev.csv"), "--limit", "40"],
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "Classifying 40 texts" in out
    for word in ("negative", "positive", "precision", "recall", "f1-score", "accuracy", "log-loss", "texts/s"):
        assert word in out


def test_demo_reports_an_unreadable_file(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "llm_label_clf", "demo", "--data", str(tmp_path / "missing.csv")],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert "cannot read" in result.stderr and "missing.csv" in result.stderr


def test_help_lists_the_commands():
    result = subprocess.run([sys.executable, "-m", "llm_label_clf", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "demo" in result.stdout

"""The command line reads labels as the Python API does: identifier labels
(``card_arrival``) written as words by default (``--label-words``, Python's
``label_words``), kept as typed with ``--label-words as_is``; the same reads,
so the same probabilities. In-process runs on the session's engine."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from llm_label_clf import LLMLabelClassifier, cli
from llm_label_clf.reading.cache import ReadCache

PROMPT = "Query: {text}\nIntent:"
INTENTS = ["card_arrival", "exchange_rate", "lost_or_stolen_card", "top_up_failed", "pin_blocked"]


@pytest.fixture(scope="module")
def banking_rows(datasets_dir, tmp_path_factory):
    frame = pd.read_csv(datasets_dir / "banking77_test.csv")
    rows = frame[frame["label"].isin(INTENTS)].groupby("label").head(1).reset_index(drop=True)
    path = tmp_path_factory.mktemp("banking") / "rows.csv"
    rows[["text"]].to_csv(path, index=False)
    return rows, path


@pytest.mark.parametrize(("label_words", "label_mode"), [("auto", "constrained"), ("as_is", "full_sequence")])
def test_cli_reads_identifier_labels_as_python_does(engine, banking_rows, capsys, label_words, label_mode):
    rows, path = banking_rows
    argv = ["classify", str(path), "--labels", ",".join(INTENTS), "--prompt", PROMPT.replace("\n", "\\n"),
            "--label-mode", label_mode, "--low-mass", "ignore", "--no-progress"]
    if label_words != "auto":
        argv += ["--label-words", label_words]
    # the command's reads, kept: Python's estimator gets them back only where it
    # builds the same prompts and label tokens (anything else is read anew and differs)
    with ReadCache().active():
        assert cli.main(argv) == 0
        clf = LLMLabelClassifier(prompt=PROMPT, label_mode=label_mode, label_words=label_words, low_mass="ignore",
                                 progress=False, labels=INTENTS).fit(rows["text"])  # zero-shot, as the command fits
        want = clf.predict_proba(rows["text"])[:, [clf.classes_.tolist().index(i) for i in INTENTS]]
    out = pd.read_csv(io.StringIO(capsys.readouterr().out))
    got = out[[f"proba_{intent}" for intent in INTENTS]].to_numpy(dtype=float)
    spoken = [v[0].strip() for v in clf.verbalizers_]
    assert ("card arrival" in spoken) == (label_words == "auto")  # words unless kept as typed
    np.testing.assert_allclose(got, want, atol=1e-6)

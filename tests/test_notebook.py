"""notebooks/quickstart.ipynb runs end to end on the built-in model (on the
first QUICKSTART_N reviews of SST-2 dev) in a fresh Jupyter kernel, and its
outputs are what the notebook promises: no errors, metrics in range, plots.
Interrupting a kernel mid-predict leaves its engine usable."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import nbclient
import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"
SUBSET = 48


def _text(output) -> str:
    if output.output_type == "stream":
        return output.text
    if output.output_type in ("execute_result", "display_data"):
        return output.data.get("text/plain", "")
    return ""


@pytest.fixture(scope="module")
def executed(datasets_dir, tmp_path_factory):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in notebook.cells:  # run from a clean slate, not the committed outputs
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    with pytest.MonkeyPatch.context() as mp:  # the kernel inherits this environment
        mp.setenv("QUICKSTART_N", str(SUBSET))
        mp.setenv("LLM_LABEL_CLF_DATASETS", str(datasets_dir))
        client = nbclient.NotebookClient(
            notebook, timeout=600, kernel_name="python3",
            resources={"metadata": {"path": str(NOTEBOOK.parent)}},
        )
        client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
    nbformat.write(notebook, tmp_path_factory.mktemp("notebook") / "quickstart.ipynb")  # kept for inspection
    return notebook


def test_every_code_cell_ran_without_errors(executed):
    code = [c for c in executed.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    text = "\n".join(_text(o) for c in code for o in c.outputs)
    assert "Traceback" not in text


def test_reports_metrics_in_range(executed):
    text = "\n".join(_text(o) for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    assert f"{SUBSET} reviews:" in text  # QUICKSTART_N reached the kernel
    accuracy = float(re.search(r"^accuracy (\S+)$", text, re.MULTILINE).group(1))
    log_loss = float(re.search(r"^log-loss (\S+)$", text, re.MULTILINE).group(1))
    cv_accuracy = float(re.search(r"cross-validated accuracy (\S+)", text).group(1))
    assert 0.0 <= accuracy <= 1.0 and 0.0 <= cv_accuracy <= 1.0
    assert 0.0 < log_loss < 5.0
    assert accuracy > 0.5  # zero-shot sentiment beats a coin on SST-2 with this prompt
    for word in ("precision", "recall", "best prompt:", "calibrated"):
        assert word in text
    # classification_report sees every class and `support` sums to the subset
    supports = [int(m) for m in re.findall(r"^\s+(?:negative|positive)\s+\S+\s+\S+\s+\S+\s+(\d+)$", text, re.MULTILINE)]
    assert sum(supports) == SUBSET


def test_diagnose_and_search_tables_are_shown(executed):
    tables = [_text(o) for c in executed.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "execute_result" and "text/html" in o.data]
    assert any("label_mass" in t and "top_token_is_label" in t for t in tables)
    assert any("param_llmlabelclassifier__prompt" in t and "rank_test_score" in t for t in tables)


def test_plots_are_images(executed):
    images = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "display_data" and "image/png" in o.data]
    # confusion matrix, reliability diagram, reliability before/after calibration
    assert len(images) == 3
    assert all(len(o.data["image/png"]) > 1000 for o in images)


def test_committed_outputs_are_a_full_run():
    """The notebook as committed carries the outputs of one top-to-bottom run on all 872 reviews."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    text = "\n".join(_text(o) for c in code for o in c.outputs)
    assert "872 reviews:" in text and "test half: 436 reviews" in text


KERNEL_SETUP = """
import json, threading, time
from pathlib import Path
import pandas as pd
from llm_label_clf import LLMLabelClassifier
from llm_label_clf.engines.local import engine_count, get_engine

frame = pd.read_csv({csv!r})
X, y = frame["text"].tolist(), frame["label"].tolist()
# the long cell's ten copies of X go to the engine as one chunk: only an abort
# clears them from it within seconds
clf = LLMLabelClassifier(progress=False, low_mass="ignore", batch_size=10 * len(X)).fit(X[:40], y[:40])
before = clf.predict_proba(X[:8])
engine, starts = get_engine(), engine_count()

def mark_in_flight():  # tells the test when to press "interrupt"
    while engine.client.get_num_unfinished_requests() == 0:
        time.sleep(0.01)
    Path({marker!r}).touch()
"""

KERNEL_LONG_CELL = """
threading.Thread(target=mark_in_flight, daemon=True).start()
clf.predict_proba([f"{k}. {text}" for k in range(10) for text in X])  # minutes of work
"""

KERNEL_AFTER = """
deadline = time.monotonic() + 30
while engine.client.get_num_unfinished_requests() and time.monotonic() < deadline:
    time.sleep(0.05)
unfinished = engine.client.get_num_unfinished_requests()
after = clf.predict_proba(X[:8])
print(json.dumps({"unfinished": unfinished, "dead": engine.dead, "same_engine": get_engine() is engine,
                  "engine_starts": engine_count() - starts, "max_diff": float(abs(after - before).max())}))
"""


def test_interrupting_the_kernel_keeps_the_engine(datasets_dir, tmp_path):
    """Jupyter's "interrupt the kernel" during a long predict_proba (it sends
    SIGINT to the kernel's whole process group): the cell ends in
    KeyboardInterrupt, no request is left in the engine, and the next cell uses
    the same engine, with the same probabilities as before."""
    from jupyter_client.manager import start_new_kernel

    marker = tmp_path / "in_flight"
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        setup = kc.execute_interactive(
            KERNEL_SETUP.format(csv=str(datasets_dir / "sst2_dev.csv"), marker=str(marker)), timeout=600
        )
        assert setup["content"]["status"] == "ok", setup["content"]
        # stop_on_error=False: without it the kernel aborts any cell sent in the
        # moment after this one fails, and the next cell below is sent at once
        msg_id = kc.execute(KERNEL_LONG_CELL, stop_on_error=False)
        deadline = time.monotonic() + 300
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the long read never reached the engine"
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=300)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
        printed: list[str] = []

        def keep_stdout(msg) -> None:
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                printed.append(msg["content"]["text"])

        after = kc.execute_interactive(KERNEL_AFTER, timeout=300, output_hook=keep_stdout)
        assert after["content"]["status"] == "ok", after["content"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    result = json.loads("".join(printed))
    assert result["unfinished"] == 0
    assert not result["dead"] and result["same_engine"] and result["engine_starts"] == 0
    assert result["max_diff"] <= 1e-9

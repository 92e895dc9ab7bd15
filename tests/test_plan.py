"""The reading plan: plain picklable data that a fresh process, given an
engine, reads into exactly the estimator's probabilities; and the fitted
estimator's state around it (pickles of plain data, refits from nothing)."""

from __future__ import annotations

import io
import pickle
import pickletools
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from helpers import SST2_TEMPLATE, make_classifier
from llm_label_clf.reading.plan import ReadingPlan

FP32 = {"dtype": "float32"}

#: Reads a pickled plan on its own fp32 engine in a fresh interpreter and saves
#: the probabilities: what a distributed worker does with a fitted plan.
WORKER = textwrap.dedent(
    """
    import pickle, sys
    import numpy as np
    from llm_label_clf.engines import get_engine, shutdown_engines
    from llm_label_clf.reading.driver import read_plans

    if __name__ == "__main__":
        with open(sys.argv[1], "rb") as handle:
            plan, texts = pickle.load(handle)
        engine = get_engine(engine_options={"dtype": "float32"})
        reads = read_plans([plan], [{"text": t} for t in texts], engine, batch_size=512, progress=False)
        np.save(sys.argv[2], np.exp(reads[0].log_proba()))
        shutdown_engines()
    """
)


def _globals(blob: bytes) -> set[str]:
    """The modules of every class or function a pickle refers to."""
    modules = set()
    strings: list[str] = []
    for opcode, arg, _ in pickletools.genops(io.BytesIO(blob)):
        if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif opcode.name == "STACK_GLOBAL":
            modules.add(strings[-2])
        elif opcode.name == "GLOBAL":
            modules.add(arg.split(" ")[0])
    return modules


@pytest.fixture(scope="module")
def sst2(sst2_all):
    texts, labels = sst2_all
    return texts[200:224], labels[200:224]


@pytest.mark.full
def test_plan_read_in_a_fresh_process_equals_the_estimator(fp32_engine, sst2, tmp_path):
    X, y = sst2
    clf = make_classifier(engine_options=FP32).fit(X, y)
    (plan,) = clf.plans_
    assert isinstance(plan, ReadingPlan)
    # texts no other test reads: both engines compute them from a cold prefix cache
    texts = [f"(plan check) {t}" for t in X[:12]]
    expected = clf.predict_proba(texts)
    blob = tmp_path / "plan.pkl"
    blob.write_bytes(pickle.dumps((plan, texts)))
    out = tmp_path / "proba.npy"
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(blob), str(out)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.load(out)
    assert got.shape == expected.shape == (12, 2)
    assert np.array_equal(got, expected), np.abs(got - expected).max()


def test_fitted_pickles_hold_plain_data_only(engine, sst2):
    X, y = sst2
    for clf in (
        make_classifier(calibration="learned").fit(X, y),
        make_classifier(prompt=None).fit(pd.DataFrame({"text": X}), pd.DataFrame({"a": y, "b": y})),
    ):
        modules = _globals(pickle.dumps(clf))
        heavy = {m for m in modules if m.split(".")[0] in ("vllm", "torch", "transformers", "tokenizers", "httpx")}
        assert not heavy, heavy
        assert any(m.startswith("llm_label_clf.reading") for m in modules)


def test_refit_of_another_kind_leaves_no_stale_attributes(engine, sst2):
    X, y = sst2
    frame = pd.DataFrame({"text": X})
    two = pd.DataFrame({"a": y, "b": y})
    clf = make_classifier(prompt=None, multioutput_read="joint").fit(frame, two)
    assert "joint_token_ids_" in vars(clf)
    clf.set_params(multioutput_read="separate", prompt=SST2_TEMPLATE).fit(X, y)
    fitted = {a for a in vars(clf) if a.endswith("_")}
    assert not fitted & {"joint_token_ids_", "joint_regex_", "estimators_", "n_outputs_", "output_kind_"}
    assert clf.predict_proba(X[:3]).shape == (3, 2)


def test_zero_shot_fit_without_y_takes_the_classes_from_labels(engine, sst2):
    X, y = sst2
    labels = {"positive": "positive", "negative": "negative"}
    zero = make_classifier(labels=labels).fit(X[:4])
    supervised = make_classifier(labels=labels).fit(X, y)
    assert zero.classes_.tolist() == ["negative", "positive"]
    assert zero.plans_ == supervised.plans_
    with pytest.raises(ValueError, match=r"fit\(X\) without y needs labels"):
        make_classifier().fit(X)
    with pytest.raises(ValueError, match="few_shot=1 draws labelled examples: fit needs y"):
        make_classifier(labels=labels, few_shot=1).fit(X)

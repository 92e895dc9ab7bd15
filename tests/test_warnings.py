"""The package's warnings on the real engine: each points at the user's own
line (``warn_user``), however deep the call (``CalibratedClassifierCV.fit``,
an ``async`` caller), each category at most once per call, and the low-mass
warning measures the labels' first tokens; a text past the context is cut
or refused. Every estimator here reads on the session engine: no other
engine is started."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import warnings
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp
from sklearn.calibration import CalibratedClassifierCV

from helpers import SST2_TEMPLATE, make_classifier, read_label_logprobs
from llm_label_clf import InvalidInputError, LabelWordsWarning, LowLabelMassWarning, TruncationWarning

N_TEXTS = 8
#: A threshold every SST-2 text falls under, so that the low-mass warning fires.
HIGH_THRESHOLD = 0.99
CATEGORIES = (LabelWordsWarning, LowLabelMassWarning, TruncationWarning)


@pytest.fixture(scope="module")
def sst2(sst2_all):
    X, y = sst2_all
    return list(X[:N_TEXTS]), y[:N_TEXTS]


@pytest.fixture(scope="module")
def long_text(engine) -> str:
    return "great " * (engine.max_model_len + 500)


@pytest.fixture(scope="module")
def fitted(engine, sst2):
    X, y = sst2
    return make_classifier(low_mass_threshold=HIGH_THRESHOLD).fit(X, y)


def next_line() -> int:
    """The line after the caller's: where the call under test is written."""
    return inspect.currentframe().f_back.f_lineno + 1


@contextlib.contextmanager
def recorded() -> Iterator[list[warnings.WarningMessage]]:
    """Every warning of the block, repeats included."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def assert_at(caught: list[warnings.WarningMessage], category: type[Warning], line: int, count: int = 1) -> None:
    """``count`` warnings of ``category`` were caught, each at this file's ``line``."""
    found = [w for w in caught if issubclass(w.category, category)]
    listed = [f"{w.category.__name__} at {w.filename}:{w.lineno}" for w in caught]
    assert len(found) == count, listed
    assert [(w.filename, w.lineno) for w in found] == [(__file__, line)] * count, listed


def test_fit_warns_about_numbers_once_at_the_callers_line(engine, sst2):
    X, y = sst2
    with recorded() as caught:
        line = next_line()
        make_classifier().fit(X, (y == "positive").astype(np.int64))
    assert_at(caught, LabelWordsWarning, line)


def test_too_long_texts_are_cut_at_the_end_or_refused(engine, sst2, long_text):
    """A text past the context is cut at its end, keeping the answer cue, with a
    warning naming it; its batch-mates are untouched. too_long='raise' refuses it.
    (Here, not in test_classifier, beside this module's other reads of
    ``long_text``: the engine's prefix cache serves them the ~8,000-token
    read this test makes, ~40 s each on a 2-core AVX2 CPU in float32.)"""
    X, y = sst2
    fitted = make_classifier().fit(X, y)
    with pytest.warns(TruncationWarning, match=r"1 text\(s\) .* items \[1\]"):
        proba = fitted.predict_proba([X[0], long_text, X[1]])
    np.testing.assert_allclose(proba[[0, 2]], fitted.predict_proba([X[0], X[1]]), atol=1e-12)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
    encoded = fitted.plans_[0].encode([{"text": long_text}], engine.tokenizer, engine.max_model_len)
    assert encoded.truncated == [0]  # reported for the caller's one warning
    ids = encoded.ids[0]
    assert len(ids) <= engine.max_model_len - 1
    assert engine.tokenizer.decode(ids).endswith("great\nSentiment (positive or negative):")
    with pytest.raises(ValueError, match=r"X item 1 is \d+ tokens .* too_long='truncate'"):
        make_classifier(too_long="raise").fit(X, y).predict_proba([X[0], long_text])
    # texts are tokenized batch_size at a time: warnings and errors still name X's items, once
    chunked = [X[0], X[1], X[2], long_text, X[3], long_text]
    with pytest.warns(TruncationWarning, match=r"2 text\(s\) .* items \[3, 5\]") as caught:
        make_classifier(batch_size=2).fit(X, y).predict_proba(chunked)
    assert len([w for w in caught if issubclass(w.category, TruncationWarning)]) == 1
    with pytest.raises(InvalidInputError, match=r"X item 3 is \d+ tokens") as info:
        make_classifier(batch_size=2, too_long="raise").fit(X, y).predict_proba(chunked)
    assert info.value.items == (3,)  # X's index, across chunks


def test_predict_proba_warns_once_per_category_at_the_callers_line(sst2, fitted, long_text):
    X, _ = sst2
    with recorded() as caught:
        line = next_line()
        fitted.predict_proba([X[0], long_text, *X[1:], long_text])
    assert_at(caught, TruncationWarning, line)
    assert "2 text(s)" in str(next(w.message for w in caught if w.category is TruncationWarning))
    assert_at(caught, LowLabelMassWarning, line)


def test_several_outputs_warn_once_per_call(engine, sst2, long_text):
    X, y = sst2
    Y = pd.DataFrame({"sentiment": y, "length": np.where([len(t) > 100 for t in X], "long", "short")})
    clf = make_classifier(low_mass_threshold=HIGH_THRESHOLD).fit(X, Y)
    with recorded() as caught:
        line = next_line()
        clf.predict_proba([long_text, *X])
    for category in (TruncationWarning, LowLabelMassWarning):
        assert_at(caught, category, line)


def test_warnings_through_calibrated_classifier_cv_point_at_its_fit(engine, sst2, long_text):
    """Fits and predictions that scikit-learn makes for the user (the folds of
    a calibration) warn at the user's ``fit`` line."""
    X, y = sst2
    y_int = (np.asarray(y) == "positive").astype(np.int64)
    texts = [long_text if i in (0, 1) else t for i, t in enumerate(X)]
    calibrated = CalibratedClassifierCV(make_classifier(low_mass_threshold=HIGH_THRESHOLD), cv=2)
    with recorded() as caught:
        line = next_line()
        calibrated.fit(texts, y_int)
    ours = [w for w in caught if issubclass(w.category, CATEGORIES)]
    assert {w.category for w in ours} == set(CATEGORIES), [str(w.message) for w in ours]
    assert {(w.filename, w.lineno) for w in ours} == {(__file__, line)}
    for category in CATEGORIES:  # once per fold (each fold fits once and predicts once)
        assert len([w for w in ours if w.category is category]) <= 2


def test_async_callers_are_warned_at_their_await(sst2, fitted, long_text):
    X, _ = sst2
    lines = []

    async def main():
        with recorded() as caught:
            lines.append(next_line())
            await fitted.apredict_proba([long_text, X[0]])
        return caught

    caught = asyncio.run(main())
    assert_at(caught, TruncationWarning, lines[0])
    assert_at(caught, LowLabelMassWarning, lines[0])


def test_label_mass_is_the_probability_of_the_labels_first_tokens(engine, sst2):
    """With multi-token labels the mass is how much the model wants to start
    a label: the summed probability of the labels' distinct first tokens (
    " not" once for two labels), not the small probability of whole labels."""
    from llm_label_clf.reading.build import ReadingSettings, build_reading
    from llm_label_clf.reading.driver import read_plans

    X, _ = sst2
    records = [{"text": t} for t in X]
    settings = ReadingSettings(template=SST2_TEMPLATE, chat=False, instructions=None, label_mode="auto",
                               length_norm=None, few_shot=0, random_state=0, too_long="truncate")
    labels = [[" not good"], [" not bad"], [" great"]]
    reading = build_reading(settings, ["a", "b", "c"], labels, records, None, engine.tokenizer, engine.max_model_len)
    first = reading.plan.trie.reads[0].next_ids
    assert reading.label_mode == "full_sequence" and len(first) == 2
    reads = read_plans([reading.plan], records, engine, batch_size=32, progress=False)[0]
    prompts = [engine.tokenizer.encode(SST2_TEMPLATE.format(text=t)) for t in X]
    expected = np.exp(logsumexp(np.array(read_label_logprobs(engine, prompts, list(first))), axis=1))
    np.testing.assert_allclose(reads.label_mass(), expected, rtol=1e-6)
    whole = np.exp(logsumexp(reads.class_logprobs, axis=1))
    assert (reads.label_mass() > whole).all()
    pruned_plan = dataclasses.replace(reading.plan, prune_margin=0.0)  # the first read is made for every text
    pruned = read_plans([pruned_plan], records, engine, batch_size=32, progress=False)[0]
    np.testing.assert_allclose(pruned.label_mass(), reads.label_mass(), rtol=1e-6)

"""Ties in predict (``fitting.ties``): rows whose top probability is shared
exactly by two or more classes (bf16 reads round label logprobs to the same
value) go to the tied class with the largest class prior from fit, then the
first in ``classes_``, and every call that meets them warns with their count
and the fix. Arithmetic, plus one estimator whose recorded reads get a tie."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest

from helpers import make_classifier
from llm_label_clf import TiedPredictionWarning
from llm_label_clf.fitting.shaping import predicted_from
from llm_label_clf.fitting.ties import argmax_breaking_ties


def test_a_tie_goes_to_the_larger_prior_then_the_first_class():
    scores = np.log(np.array([[0.45, 0.45, 0.1], [0.2, 0.4, 0.4], [0.3, 0.3, 0.4], [0.1, 0.6, 0.3]]))
    index, tied = argmax_breaking_ties(scores)
    assert index.tolist() == [0, 1, 2, 1] and tied.tolist() == [True, True, False, False]
    prior = np.log(np.array([0.2, 0.3, 0.5]))
    index, tied = argmax_breaking_ties(scores, prior)
    assert index.tolist() == [1, 2, 2, 1] and tied.tolist() == [True, True, False, False]
    index, tied = argmax_breaking_ties(np.zeros((0, 3)), prior)
    assert index.shape == (0,) and tied.shape == (0,)


def test_predict_warns_with_the_count_and_the_fix():
    classes = np.array(["negative", "positive"])
    result = np.log(np.array([[0.5, 0.5], [0.3, 0.7], [0.5, 0.5]]))
    with pytest.warns(TiedPredictionWarning, match=r"2 of 3 texts .*tied.*\(item 0\).*'dtype': 'float32'"):
        got = predicted_from("single", result, classes, priors=[np.log([0.4, 0.6])])
    assert got.tolist() == ["positive", "positive", "positive"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert predicted_from("single", result[1:2], classes).tolist() == ["positive"]
        # multi-label thresholds are not an argmax: nothing to break
        predicted_from("multilabel", np.log([[0.5, 0.5]]), classes)
    outputs = [np.array(["a", "b"]), np.array([1, 2, 3])]
    several = [np.log([[0.5, 0.5], [0.9, 0.1]]), np.log([[0.1, 0.2, 0.7], [0.4, 0.4, 0.2]])]
    with pytest.warns(TiedPredictionWarning, match="2 of 2 texts"):
        got = predicted_from("multioutput", several, outputs)
    assert got.tolist() == [["a", 3], ["a", 1]]


def test_estimator_breaks_an_injected_tie_by_the_prior_and_warns(engine, sst2_all):
    """Reads recorded from the engine, a tie injected into one row: predict
    follows the fitted prior (positive, the majority of y), predict_proba is
    unchanged, and the warning says how many rows tied."""
    X, y = sst2_all[0][:8], np.array(["positive"] * 6 + ["negative"] * 2)
    clf = make_classifier().fit(X, y)
    assert list(clf.classes_) == ["negative", "positive"]
    reads = clf._read(X[:3])
    tied = reads[0].scores.copy()
    tied[1] = tied[1].max()
    recorded = [replace(reads[0], scores=tied, class_logprobs=tied)]
    clf._read = lambda _X: recorded  # the recorded reads answer, no engine
    with pytest.warns(TiedPredictionWarning, match=r"1 of 3 texts .*\(item 1\)"):
        predicted = clf.predict(X[:3])
    assert predicted[1] == "positive"
    np.testing.assert_allclose(clf.predict_proba(X[:3])[1], [0.5, 0.5])

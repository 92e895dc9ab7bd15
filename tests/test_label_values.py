"""Class values that are not words, on the real engine and built-in model:
numbers and booleans (the warning, and predictions in ``y``'s dtype), labels
given as a list, identifiers written as words, and the refusal of one class.
``test_label_words.py`` checks the same logic without an engine."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import make_classifier
from llm_label_clf import LabelWordsWarning

N_TEXTS = 16
SST2_LABELS = {"negative": "negative", "positive": "positive"}


@pytest.fixture(scope="module")
def sst2(sst2_all):
    X, y = sst2_all
    return X[:N_TEXTS], y[:N_TEXTS]


@pytest.fixture(scope="module")
def named(engine, sst2):
    """The reference: classes that are the words themselves."""
    return make_classifier(low_mass="ignore").fit(*sst2)


def make(**params):
    params.setdefault("low_mass", "ignore")
    return make_classifier(**params)


def test_int_classes_warn_and_predict_ints(sst2, named):
    X, y = sst2
    y_int = (y == "positive").astype(np.int64)
    placeholders = r"labels=\{0: '<word for 0>', 1: '<word for 1>'\}"  # nothing says what 0 and 1 mean
    with pytest.warns(LabelWordsWarning, match=r"asked to write ' 0' and ' 1'.*" + placeholders):
        digits = make().fit(X, y_int)
    assert digits.verbalizers_ == [[" 0"], [" 1"]]
    pred = digits.predict(X)
    assert pred.dtype == np.int64 and set(pred.tolist()) <= {0, 1}
    worded = make(labels={0: "negative", 1: "positive"}).fit(X, y_int)  # no warning: warnings are errors here
    np.testing.assert_allclose(worded.predict_proba(X), named.predict_proba(X), atol=1e-12)
    np.testing.assert_array_equal(worded.predict(X), (named.predict(X) == "positive").astype(np.int64))
    assert worded.predict(X).dtype == np.int64
    assert worded.score(X, y_int) == pytest.approx(named.score(X, y))


def test_bool_classes_warn_and_predict_bools(sst2, named):
    X, y = sst2
    y_bool = y == "positive"
    with pytest.warns(LabelWordsWarning, match=r"\[False, True\] are booleans"):
        assert make().fit(X, y_bool).verbalizers_ == [[" False"], [" True"]]
    worded = make(labels={False: "negative", True: "positive"}).fit(X, y_bool)
    pred = worded.predict(X)
    assert pred.dtype == bool
    np.testing.assert_array_equal(pred, named.predict(X) == "positive")
    np.testing.assert_allclose(worded.predict_proba(X), named.predict_proba(X), atol=1e-12)


def test_labels_list_follows_classes_order(sst2, named):
    X, y = sst2
    y_int = (y == "positive").astype(np.int64)
    listed = make(labels=["negative", "positive"]).fit(X, y_int)
    np.testing.assert_allclose(listed.predict_proba(X), named.predict_proba(X), atol=1e-12)
    zero_shot = make(labels=["positive", "negative"]).fit(X[:4])
    assert zero_shot.classes_.tolist() == ["negative", "positive"]
    assert zero_shot.plans_ == named.plans_
    np.testing.assert_array_equal(zero_shot.predict(X), named.predict(X))
    with pytest.raises(ValueError, match=r"labels is a list of 3 names but y has 2 classes"):
        make(labels=["negative", "positive", "neutral"]).fit(X, y_int)


def test_one_class_is_refused(sst2):
    X, _ = sst2
    with pytest.raises(ValueError, match=r"needs samples of at least 2 classes in the data, but the data contains "
                                         r"only one class: 'positive'"):
        make().fit(X, ["positive"] * len(X))
    with pytest.raises(ValueError, match=r"labels names only one class: 'positive'"):
        make(labels={"positive": "positive"}).fit(X)


def test_identifier_classes_are_read_as_words(sst2, named):
    X, y = sst2
    ids = np.where(y == "positive", "positive_review", "negative_review").astype(object)
    words = make().fit(X, ids)
    assert words.verbalizers_ == [[" negative review"], [" positive review"]]
    explicit = make(labels={"negative_review": "negative review", "positive_review": "positive review"}).fit(X, ids)
    np.testing.assert_allclose(words.predict_proba(X), explicit.predict_proba(X), atol=1e-12)
    pred = words.predict(X)
    assert set(pred.tolist()) <= {"negative_review", "positive_review"} and pred.dtype == object
    as_is = make(label_words="as_is").fit(X, ids)
    assert as_is.verbalizers_ == [[" negative_review"], [" positive_review"]]
    camel = make().fit(X, np.where(y == "positive", "PositiveReview", "NegativeReview"))
    assert camel.verbalizers_ == words.verbalizers_
    np.testing.assert_allclose(camel.predict_proba(X), words.predict_proba(X), atol=1e-12)

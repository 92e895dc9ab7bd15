"""``set_output(transform="pandas")``: ``transform`` returns a DataFrame whose
columns are ``get_feature_names_out()``, with one output and with several,
and a pipeline passes the names on. A real fit on a few SST-2 texts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from llm_label_clf import LLMLabelClassifier

PROMPT = "Review: {text}\nSentiment:"


@pytest.fixture(scope="module")
def reviews(sst2_all, engine):
    texts, labels = sst2_all
    return pd.Series(texts[:12], index=range(100, 112)), pd.Series(labels[:12], index=range(100, 112))


def test_transform_as_a_dataframe(reviews):
    X, y = reviews
    clf = LLMLabelClassifier(prompt=PROMPT, progress=False).fit(X, y)
    plain = clf.transform(X)
    frame = clf.set_output(transform="pandas").transform(X)
    assert isinstance(plain, np.ndarray)
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == ["logprob_negative", "logprob_positive"] == list(clf.get_feature_names_out())
    assert frame.index.equals(X.index)  # the texts' index is kept
    assert np.array_equal(frame.to_numpy(), plain)
    assert isinstance(clf.set_output(transform="default").transform(X), np.ndarray)


def test_several_outputs_name_every_column(reviews):
    X, y = reviews
    length = np.where(X.str.len() > 60, "long", "short")
    Y = pd.DataFrame({"sentiment": y.to_numpy(), "length": length}, index=X.index)
    clf = LLMLabelClassifier(prompt=[PROMPT, "Review: {text}\nLength:"], progress=False).fit(X, Y)
    frame = clf.set_output(transform="pandas").transform(X)
    assert list(frame.columns) == [
        "logprob_0_negative", "logprob_0_positive", "logprob_1_long", "logprob_1_short",
    ]
    assert frame.shape == (len(X), 4) and np.isfinite(frame.to_numpy()).all()


def test_a_pipeline_passes_the_names_on(reviews):
    X, y = reviews
    stacked = make_pipeline(LLMLabelClassifier(prompt=PROMPT, progress=False), LogisticRegression())
    stacked.set_output(transform="pandas").fit(X, y)
    assert list(stacked[-1].feature_names_in_) == ["logprob_negative", "logprob_positive"]
    assert stacked.predict_proba(X).shape == (len(X), 2)

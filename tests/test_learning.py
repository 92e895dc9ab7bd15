"""Learning from the training set on the real engine: few-shot prompts laid
out as a shared prefix, the three calibrations, and the label-logprob
features of ``transform``."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp, softmax
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.pipeline import make_pipeline

from helpers import SST2_TEMPLATE, make_classifier, read_label_logprobs
from llm_label_clf.fitting.calibration import (
    BATCH_PRIOR_ROWS,
    CONTENT_FREE_INPUTS,
    MIN_BATCH,
    domain_context_records,
    fit_calibration,
    tempered,
    texts_prior,
)
from llm_label_clf.reading.build import plan_showing
from llm_label_clf.reading.driver import read_plans

N_TEXTS = 24


@pytest.fixture(scope="module")
def sst2(sst2_all):
    X, y = sst2_all
    return X[:N_TEXTS], y[:N_TEXTS]


@pytest.fixture(scope="module")
def plain(engine, sst2):
    X, y = sst2
    return make_classifier(low_mass="ignore").fit(X, y)


def debiased(log_proba, bias):
    shifted = log_proba - bias
    return shifted - logsumexp(shifted, axis=1, keepdims=True)


def mean_log(log_proba):
    return np.log(np.exp(log_proba).mean(axis=0))


def test_few_shot_examples_form_a_shared_prefix(fp32_engine, sst2):
    """Checked on the fp32 engine: in bf16 a long prompt's logprobs can move by
    ~0.1 nats with its batch-mates and the cache state; in fp32 by ~2e-5."""
    X, y = sst2
    engine = fp32_engine
    clf = make_classifier(few_shot=2, random_state=0, engine_options={"dtype": "float32"}).fit(X, y)
    rows = clf.few_shot_rows_
    assert len(rows) == 4 and sorted(y[rows].tolist()) == ["negative", "negative", "positive", "positive"]
    assert y[rows[0]] != y[rows[1]] and y[rows[2]] != y[rows[3]]  # class after class
    prefix = "".join(SST2_TEMPLATE.format(text=X[r]) + " " + y[r] + "\n\n" for r in rows)
    assert clf.few_shot_prefix_ == prefix
    tok = engine.tokenizer
    prompts = [tok.encode(prefix + SST2_TEMPLATE.format(text=t)) for t in X[:4]]
    ids = [i[0] for i in clf.label_token_ids_]
    expected = softmax(np.array(read_label_logprobs(engine, prompts, ids)), axis=1)
    np.testing.assert_allclose(clf.predict_proba(X[:4]), expected, atol=1e-4)
    again = make_classifier(few_shot=2, random_state=0).fit(X, y)
    assert again.few_shot_rows_ == rows
    others = {tuple(make_classifier(few_shot=2, random_state=s).fit(X, y).few_shot_rows_) for s in (1, 2, 3)}
    assert others != {tuple(rows)}


def test_few_shot_that_fills_the_context_is_a_clear_error(engine):
    X = ["very good " * 1500, "very bad " * 1500, "fine " * 1500, "awful " * 1500]
    y = ["positive", "negative", "positive", "negative"]
    with pytest.raises(ValueError, match=r"few_shot=2 examples per class take \d+ tokens.*lower few_shot"):
        make_classifier(few_shot=2).fit(X, y)


def test_contextual_calibration_divides_by_content_free_probabilities(plain, sst2):
    """Content-free inputs are mapped to the training labels' class prior
    (``calibration_prior="y"``, smoothed by one text per class)."""
    X, y = sst2
    clf = make_classifier(calibration="contextual", low_mass="ignore").fit(X, y)
    counts = np.array([(y == c).sum() + 1 for c in clf.classes_])
    np.testing.assert_allclose(clf.class_prior_, counts / counts.sum())
    bias = mean_log(plain.predict_log_proba(list(CONTENT_FREE_INPUTS))) - np.log(clf.class_prior_)
    np.testing.assert_allclose(clf.calibration_bias_, bias, atol=1e-9)
    np.testing.assert_allclose(clf.predict_log_proba(X), debiased(plain.predict_log_proba(X), bias), atol=1e-9)


def test_batch_calibration_uses_the_call_or_the_training_texts(plain, sst2):
    X, y = sst2
    clf = make_classifier(calibration="batch", low_mass="ignore").fit(X, y)
    log_prior = np.log(clf.class_prior_)
    base = plain.predict_log_proba(X)
    got = clf.predict_log_proba(X)
    np.testing.assert_allclose(got, debiased(base, mean_log(base) - log_prior), atol=1e-9)
    np.testing.assert_allclose(np.exp(got).mean(axis=0), clf.class_prior_, atol=0.1)  # the batch gets the prior
    small = clf.predict_log_proba(X[:3])  # fewer than 16 texts: the bias from fit's texts
    np.testing.assert_allclose(small, debiased(base[:3], mean_log(base) - log_prior), atol=1e-9)


def test_learned_calibration_is_cross_fitted(plain, sst2):
    X, y = sst2
    clf = make_classifier(calibration="learned", few_shot=1, random_state=0, low_mass="ignore").fit(X, y)
    assert len(clf.calibrator_.models) == 5
    assert all(m.n_features_in_ == 2 for m in clf.calibrator_.models)  # one log-probability per class
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-9)
    zero = make_classifier(calibration="learned", random_state=0, low_mass="ignore").fit(X, y)
    assert log_loss(y, zero.predict_proba(X), labels=zero.classes_) < log_loss(y, plain.predict_proba(X))
    # on the logits, a regression over two classes is Platt scaling: monotone in the log-odds the model read
    features = plain.transform(X)
    order = np.argsort(features[:, 1] - features[:, 0])
    steps = np.diff(zero.predict_proba(X)[order, 1])
    assert np.all(steps >= -1e-12) or np.all(steps <= 1e-12)
    with pytest.raises(ValueError, match="needs at least 2 training texts of every class"):
        make_classifier(calibration="learned").fit(X[:3], ["positive", "negative", "positive"])


def test_transform_returns_label_logprob_features(plain, sst2):
    X, y = sst2
    features = plain.transform(X)
    assert features.shape == (len(X), 2)
    assert np.all(features < 0)
    np.testing.assert_allclose(softmax(features, axis=1), plain.predict_proba(X), atol=1e-9)
    assert plain.get_feature_names_out().tolist() == ["logprob_negative", "logprob_positive"]
    stacked = make_pipeline(make_classifier(low_mass="ignore"), LogisticRegression()).fit(X, y)
    assert stacked.predict(X).shape == (len(X),)
    assert set(stacked.predict(X)) <= set(y)


def test_batch_calibration_reads_each_example_text_without_itself(engine, sst2):
    """Every training text is an example (2 per class, few_shot=2): the batch
    bias is still the training texts' own, each read under the fitted prompt
    with itself left out (its class has no other text to swap in), not the
    content-free fallback; read under the prompt that shows it, a text reads
    otherwise."""
    X, y = sst2
    rows = [*np.flatnonzero(y == "negative")[:2], *np.flatnonzero(y == "positive")[:2]]
    texts, labels = [X[i] for i in rows], y[rows]
    few = dict(few_shot=2, random_state=0, low_mass="ignore")
    batch = make_classifier(calibration="batch", **few).fit(texts, labels)
    shown = list(batch.few_shot_rows_)
    assert sorted(shown) == [0, 1, 2, 3]  # every training text is an example
    records = [{"text": t} for t in texts]
    y_index = np.searchsorted(batch.classes_, labels)
    alone = [
        read_plans([plan_showing(batch.plans_[0], batch.verbalizers_, records, y_index, [r for r in shown if r != i],
                                 few_shot=2, tokenizer=engine.tokenizer, max_model_len=engine.max_model_len)],
                   [records[i]], engine, batch_size=1, progress=False)[0].log_proba()[0]
        for i in range(4)
    ]
    np.testing.assert_allclose(batch.calibration_bias_, mean_log(np.array(alone)) - np.log(batch.class_prior_),
                               atol=1e-4)
    contextual = make_classifier(calibration="contextual", **few).fit(texts, labels)
    assert np.abs(batch.calibration_bias_ - contextual.calibration_bias_).max() > 1e-3
    shown_reads = make_classifier(calibration=None, **few).fit(texts, labels).predict_log_proba(texts)
    assert np.abs(np.array(alone) - shown_reads).max() > 1e-3


def test_auto_calibration_without_labels_aims_at_the_prior_the_texts_show(plain, sst2):
    """The zero-shot default, from the uncalibrated estimator's reads of the
    same prompt: tempered, domain-context inputs (random words of the fit
    texts, drawn by random_state) give the texts' prior, and the fit texts'
    mean is aimed at it; a text's probabilities do not depend on its
    batch-mates."""
    X, _ = sst2
    clf = make_classifier(labels=["negative", "positive"], calibration="auto", random_state=0, low_mass="ignore")
    clf.fit(X)
    texts = tempered(plain.predict_log_proba(X))
    domain = [r["text"] for r in domain_context_records([{"text": x} for x in X], ["text"], 0)]
    prior = texts_prior(texts, tempered(plain.predict_log_proba(domain)))
    np.testing.assert_allclose(np.log(clf.class_prior_), prior, atol=1e-9)
    assert abs(clf.class_prior_[0] - 0.5) > 1e-3  # estimated, not uniform
    np.testing.assert_allclose(clf.calibration_bias_, mean_log(texts) - prior, atol=1e-9)
    np.testing.assert_allclose(clf.predict_log_proba(X), debiased(texts, clf.calibration_bias_), atol=1e-9)
    np.testing.assert_allclose(clf.predict_log_proba(X[:1]), clf.predict_log_proba(X)[:1], atol=1e-12)


def test_auto_calibration_with_labels_aims_at_their_prior_and_falls_back_on_few_texts(plain, sst2):
    """With y, the fit texts' tempered mean is aimed at the labels' smoothed
    frequencies; with fewer than MIN_BATCH texts, the content-free inputs'."""
    X, y = sst2
    clf = make_classifier(calibration="auto", low_mass="ignore").fit(X, y)
    counts = np.array([(y == c).sum() + 1 for c in clf.classes_])
    np.testing.assert_allclose(clf.class_prior_, counts / counts.sum())
    texts = tempered(plain.predict_log_proba(X))
    np.testing.assert_allclose(clf.calibration_bias_, mean_log(texts) - np.log(clf.class_prior_), atol=1e-9)
    few = make_classifier(labels=["negative", "positive"], calibration="auto", low_mass="ignore").fit(X[:MIN_BATCH - 1])
    content_free = tempered(plain.predict_log_proba(list(CONTENT_FREE_INPUTS)))
    np.testing.assert_allclose(few.class_prior_, [0.5, 0.5])
    np.testing.assert_allclose(few.calibration_bias_, mean_log(content_free) - np.log(0.5), atol=1e-9)
    assert make_classifier(calibration=None).fit(X, y).calibration_bias_ is None  # None: the exact reads


def test_a_calibration_draws_the_same_texts_in_every_process_when_random_state_is_none():
    """With ``random_state=None`` the texts a calibration reads (at most
    ``BATCH_PRIOR_ROWS`` of the fit's, and the domain-context inputs) are drawn
    alike in every call, as in a new process: a rerun reads what the first fit
    stored. Arithmetic only: the stand-in reads below record which rows were
    asked for (no engine)."""
    n_classes, rows = 3, np.arange(3 * BATCH_PRIOR_ROWS)
    asked: list[np.ndarray] = []

    def log_proba_of(chosen: np.ndarray) -> np.ndarray:
        asked.append(np.asarray(chosen).copy())
        return np.log(np.full((len(chosen), n_classes), 1 / n_classes))

    for _ in range(2):
        fit_calibration("auto", log_proba_of, lambda: np.zeros((3, n_classes)), rows, None,
                        np.log(np.full(n_classes, 1 / n_classes)), random_state=None)
    assert len(asked) == 2 and len(asked[0]) == BATCH_PRIOR_ROWS
    np.testing.assert_array_equal(asked[0], asked[1])
    texts = [{"text": f"word{i} other{i}"} for i in range(50)]
    assert domain_context_records(texts, ["text"], None) == domain_context_records(texts, ["text"], None)

"""Several outputs per text (a 2-D ``y``) and multi-label ``y`` on the real
engine: each output's probabilities equal a single-output estimator's on the
same prompt, shapes and ``classes_`` follow scikit-learn's multi-output
conventions, and malformed targets get clear errors."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from helpers import make_classifier
from llm_label_clf.reading.cache import ReadCache

TREC_PROMPTS = ["Question: {text}\nAnswer type:", "Question: {text}\nFine answer type:"]
YES_NO_PROMPT = "Article: {text}\nQuestion: is this article about {label}?\nAnswer:"
N_TEXTS = 10
#: float32 reads of the same prompt in another batch or prefix-cache state differ
#: by ~1e-6 (7.5e-7 seen in CI, stop 39); a wrong column or label is off by far more
READ_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def trec(datasets_dir):
    frame = pd.read_csv(datasets_dir / "trec_test.csv").head(N_TEXTS)
    return frame["text"].tolist(), frame[["label", "fine_label"]]


@pytest.fixture(scope="module")
def multi(engine, trec):
    X, Y = trec
    return make_classifier(prompt=TREC_PROMPTS, low_mass="ignore").fit(X, Y)


@pytest.fixture(scope="module")
def tagged(datasets_dir):
    """AG News texts with label sets: each text's topic, and "Business" added
    to the Sci/Tech ones (a second label on some rows)."""
    frame = pd.read_csv(datasets_dir / "agnews_test.csv").groupby("label").head(2)
    sets = [{t} | ({"Business"} if t == "Sci/Tech" else set()) for t in frame["label"]]
    return frame["text"].tolist(), sets


def test_each_output_equals_its_own_single_output_estimator(multi, trec):
    X, Y = trec
    assert multi.n_outputs_ == 2 and multi.output_kind_ == "multioutput"
    assert [list(c) for c in multi.classes_] == [sorted(set(Y[col])) for col in Y.columns]
    probas = multi.predict_proba(X)
    assert isinstance(probas, list) and len(probas) == 2
    for j, col in enumerate(Y.columns):
        single = make_classifier(prompt=TREC_PROMPTS[j], low_mass="ignore").fit(X, Y[col])
        assert probas[j].shape == (len(X), len(single.classes_))
        np.testing.assert_allclose(probas[j], single.predict_proba(X), atol=READ_TOLERANCE)
    assert multi.estimators_[1].label_mode_ == "full_sequence"  # "NUM:dist" is several tokens


def test_predict_is_two_dimensional_and_score_counts_whole_rows(multi, trec):
    X, Y = trec
    with ReadCache().active():  # one read of each prompt: the methods are arithmetic on the same reads
        pred = multi.predict(X)
        probas = multi.predict_proba(X)
        score = multi.score(X, Y)
        logs = multi.predict_log_proba(X)
    assert pred.shape == (len(X), 2)
    for j in range(2):
        np.testing.assert_array_equal(pred[:, j], multi.classes_[j][probas[j].argmax(axis=1)])
    assert score == pytest.approx(np.mean(np.all(pred == Y.to_numpy(), axis=1)))
    np.testing.assert_allclose(np.exp(logs[0]), probas[0], atol=READ_TOLERANCE)


def test_default_prompts_name_the_dataframe_columns(engine, trec):
    X, Y = trec
    clf = make_classifier(prompt=None, low_mass="ignore").fit(X, Y)
    assert [e.prompt for e in clf.estimators_] == ["Text: {text}\nlabel:", "Text: {text}\nfine_label:"]
    assert clf.prompt is None  # the parameter itself is untouched


def test_multi_output_estimator_clones_and_pickles(multi, trec):
    X, _ = trec
    assert clone(multi).get_params()["prompt"] == TREC_PROMPTS
    restored = pickle.loads(pickle.dumps(multi))
    np.testing.assert_allclose(restored.predict_proba(X[:3])[1], multi.predict_proba(X[:3])[1], atol=READ_TOLERANCE)


def test_multilabel_reads_one_yes_no_question_per_label(engine, tagged):
    X, sets = tagged
    clf = make_classifier(prompt=YES_NO_PROMPT).fit(X, sets)
    assert clf.output_kind_ == "multilabel"
    assert list(clf.classes_) == ["Business", "Sci/Tech", "Sports", "World"]
    proba = clf.predict_proba(X)
    assert proba.shape == (len(X), 4)
    assert np.all((proba > 0) & (proba < 1))
    question = YES_NO_PROMPT.replace("{label}", "Sports")
    single = make_classifier(prompt=question, labels={0: "no", 1: "yes"}).fit(X, [0, 1] * (len(X) // 2))
    np.testing.assert_allclose(proba[:, 2], single.predict_proba(X)[:, 1], atol=READ_TOLERANCE)
    np.testing.assert_array_equal(clf.predict(X), (proba >= 0.5).astype(int))
    strict = clone(clf).set_params(threshold=0.9).fit(X, sets)
    assert strict.predict(X).sum() <= clf.predict(X).sum()
    np.testing.assert_array_equal(strict.predict(X), (proba >= 0.9).astype(int))


def test_multilabel_default_reads_every_label_at_once_and_fits_its_threshold(engine, datasets_dir):
    """The default multi-label read: one read of the labels listed (the
    single-label zero-shot read over the labels' texts), each label's share
    of it as (does not apply, applies), tempered and aimed at that label's
    frequency; the threshold maximises the expected micro-F1 over the
    training texts."""
    from llm_label_clf.fitting.calibration import class_prior, debias, mean_bias, tempered
    from llm_label_clf.fitting.threshold import micro_f1_threshold

    frame = pd.read_csv(datasets_dir / "agnews_test.csv").groupby("label").head(5)  # 20 texts: enough to calibrate
    X = frame["text"].tolist()
    sets = [{t} | ({"Business"} if t == "Sci/Tech" else set()) for t in frame["label"]]
    clf = make_classifier(prompt=None, calibration="auto").fit(X, sets)
    assert len(clf.plans_) == 1 and clf.n_outputs_ == 4  # one read per text serves the four labels
    y = np.array([[int(n in s) for n in clf.classes_] for s in sets])
    names = [str(c) for c in clf.classes_]
    reader = make_classifier(prompt=None, labels=names).fit(X)  # the same read, zero-shot, exact
    shares = reader.predict_log_proba(X)
    proba = clf.predict_proba(X)
    for j in range(y.shape[1]):
        share = np.minimum(shares[:, j], -1e-12)
        reads = tempered(np.stack([np.log(-np.expm1(share)), share], axis=1))
        expected = debias(reads, mean_bias(reads, class_prior(y[:, j], 2)))
        np.testing.assert_allclose(proba[:, j], np.exp(expected[:, 1]), atol=1e-6)
    assert clf.threshold_ == pytest.approx(micro_f1_threshold(proba))
    predicted = clf.predict(X)
    np.testing.assert_array_equal(predicted, (proba >= clf.threshold_).astype(int))
    assert predicted.sum() > 0
    assert clf.set_params(threshold=0.99).predict(X).sum() <= predicted.sum()  # a number applies without a refit
    with pytest.raises(ValueError, match=r"remove \{label\}"):
        make_classifier(prompt=YES_NO_PROMPT, multilabel_read="choice").fit(X, sets)


def test_indicator_matrix_equals_label_sets(engine, tagged):
    X, sets = tagged
    names = ["Business", "Sci/Tech", "Sports", "World"]
    indicator = pd.DataFrame([[int(n in s) for n in names] for s in sets], columns=names)
    from_sets = make_classifier(prompt=YES_NO_PROMPT).fit(X, sets)
    from_matrix = make_classifier(prompt=YES_NO_PROMPT).fit(X, indicator)
    np.testing.assert_allclose(from_matrix.predict_proba(X), from_sets.predict_proba(X), atol=READ_TOLERANCE)
    pred = from_sets.predict(X)
    assert from_sets.score(X, sets) == pytest.approx(np.mean(np.all(pred == indicator.to_numpy(), axis=1)))


def test_target_errors_are_clear(engine, trec, tagged):
    X, Y = trec
    with pytest.raises(ValueError, match="list of 3 templates but y has 2 outputs"):
        make_classifier(prompt=[*TREC_PROMPTS, "x {text}\nA:"]).fit(X, Y)
    with pytest.raises(ValueError, match="list of 2 templates but y has one output"):
        make_classifier(prompt=TREC_PROMPTS).fit(X, Y["label"])
    with pytest.raises(ValueError, match=r"y column fine_label item 2 is missing"):
        broken = Y.copy()
        broken.loc[2, "fine_label"] = None
        make_classifier(prompt=TREC_PROMPTS).fit(X, broken)
    with pytest.raises(ValueError, match=r"y has shape \(10, 2, 1\)"):
        make_classifier().fit(X, np.zeros((len(X), 2, 1)))
    T, sets = tagged
    with pytest.raises(ValueError, match=r"has no \{label\} field"):
        make_classifier(prompt="Article: {text}\nAnswer:", multilabel_read="yes_no").fit(T, sets)
    with pytest.raises(ValueError, match="without column names needs labels"):
        make_classifier(prompt=YES_NO_PROMPT).fit(T, np.eye(len(T), 3, dtype=int))
    with pytest.raises(ValueError, match="diagnose reads one output"):
        make_classifier(prompt=TREC_PROMPTS, low_mass="ignore").fit(X, Y).diagnose(X)

"""LLMLabelClassifier inside scikit-learn: clone, params, pickling, tags, the
data-free estimator checks, pipelines, search, cross-validation, calibration
and metrics, all on the real engine (one per process)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import joblib
import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone, is_classifier
from sklearn.calibration import CalibratedClassifierCV
from sklearn.metrics import classification_report, log_loss, roc_auc_score
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils import estimator_checks as checks

from helpers import SST2_TEMPLATE, make_classifier
from llm_label_clf import LLMLabelClassifier
from llm_label_clf.engines.local import engine_count
from llm_label_clf.reading.cache import ReadCache

N_TEXTS = 40


@pytest.fixture(scope="module")
def sst2(sst2_all):
    X, y = sst2_all
    return X[:N_TEXTS], y[:N_TEXTS]


def make(**params) -> LLMLabelClassifier:
    params.setdefault("low_mass", "ignore")
    return make_classifier(**params)


@pytest.fixture(scope="module")
def fitted(engine, sst2):
    return make().fit(*sst2)


def test_clone_and_params_roundtrip():
    clf = make(labels={"a": ["x", "y"]}, engine_options={"dtype": "bfloat16"})
    params = clf.get_params()
    assert params["labels"] == {"a": ["x", "y"]} and params["engine_options"] == {"dtype": "bfloat16"}
    cloned = clone(clf)
    assert cloned.get_params() == params and cloned is not clf
    cloned.set_params(prompt="Q: {text}\nA:", batch_size=3)
    assert cloned.prompt == "Q: {text}\nA:" and cloned.batch_size == 3
    assert clf.prompt == SST2_TEMPLATE
    assert is_classifier(clf)


def test_clone_of_fitted_estimator_refits_on_the_same_engine(sst2, fitted):
    starts = engine_count()
    cloned = clone(fitted).fit(*sst2)
    np.testing.assert_allclose(cloned.predict_proba(sst2[0]), fitted.predict_proba(sst2[0]), atol=1e-12)
    assert engine_count() == starts
    assert not hasattr(clone(fitted), "classes_")


def test_pickle_and_joblib_roundtrip(tmp_path, sst2, fitted):
    X, _ = sst2
    expected = fitted.predict_proba(X)
    blob = pickle.dumps(fitted)
    assert b"AsyncLLM" not in blob and b"Engine" not in blob
    np.testing.assert_allclose(pickle.loads(blob).predict_proba(X), expected, atol=1e-12)
    path = tmp_path / "clf.joblib"
    joblib.dump(fitted, path)
    np.testing.assert_allclose(joblib.load(path).predict_proba(X), expected, atol=1e-12)


@pytest.mark.full
def test_fresh_process_loading_the_pickle_gives_the_same_probabilities(tmp_path, sst2, fitted):
    X, _ = sst2
    X = X[:8]
    (tmp_path / "clf.pkl").write_bytes(pickle.dumps(fitted))
    pd.Series(X).to_json(tmp_path / "texts.json")
    script = textwrap.dedent(
        f"""
        import pickle, numpy as np, pandas as pd
        if __name__ == "__main__":
            clf = pickle.loads(open({str(tmp_path / "clf.pkl")!r}, "rb").read())
            texts = pd.read_json({str(tmp_path / "texts.json")!r}, typ="series").tolist()
            np.save({str(tmp_path / "proba.npy")!r}, clf.predict_proba(texts))
        """
    )
    (tmp_path / "load.py").write_text(script)
    subprocess.run([sys.executable, str(tmp_path / "load.py")], check=True, timeout=600, capture_output=True)
    np.testing.assert_allclose(np.load(tmp_path / "proba.npy"), fitted.predict_proba(X), atol=1e-9)


def test_tags_declare_text_input():
    tags = make().__sklearn_tags__()
    assert tags.input_tags.string and tags.input_tags.one_d_array and not tags.input_tags.two_d_array
    assert tags.estimator_type == "classifier"


# The data-free checks apply to a text estimator. The other checks in
# sklearn.utils.estimator_checks feed random numeric 2-D arrays, which are not
# texts (``check_estimator`` itself skips them for string input).
DATA_FREE_CHECKS = [
    checks.check_no_attributes_set_in_init,
    checks.check_do_not_raise_errors_in_init_or_set_params,
    checks.check_get_params_invariance,
    checks.check_set_params,
    checks.check_parameters_default_constructible,
    checks.check_estimator_repr,
    checks.check_mixin_order,
    checks.check_estimators_unfitted,
]


@pytest.mark.parametrize("check", DATA_FREE_CHECKS, ids=lambda c: c.__name__)
def test_data_free_estimator_checks(check):
    check(type(make()).__name__, make())


def test_check_estimator_skips_numeric_checks_for_text_input():
    """check_estimator runs only the clone check for string input and says so."""
    from sklearn.exceptions import SkipTestWarning

    with pytest.warns(SkipTestWarning, match="requires input"):
        checks.check_estimator(make())


def test_pipeline_with_text_preprocessing(sst2, fitted):
    X, y = sst2
    shouted = [t.upper() for t in X]
    pipe = make_pipeline(FunctionTransformer(lambda texts: [t.lower() for t in texts]), make())
    pipe.fit(shouted, y)
    np.testing.assert_allclose(pipe.predict_proba(shouted), fitted.predict_proba([t.lower() for t in X]), atol=1e-12)
    assert pipe.score(shouted, y) == pytest.approx(fitted.score(X, y))


def test_grid_search_over_prompt_and_labels_shares_one_engine(sst2):
    X, y = sst2
    starts = engine_count()
    grid = GridSearchCV(
        make(),
        {
            "prompt": [SST2_TEMPLATE, "Text: {text}\nSentiment:"],
            "labels": [None, {"positive": ["positive", "good"], "negative": ["negative", "bad"]}],
        },
        cv=StratifiedKFold(2),
        scoring="neg_log_loss",
    ).fit(X, y)
    assert engine_count() == starts
    scores = grid.cv_results_["mean_test_score"]
    assert len(scores) == 4 and np.isfinite(scores).all() and len(set(np.round(scores, 9))) == 4
    assert grid.best_estimator_.prompt in (SST2_TEMPLATE, "Text: {text}\nSentiment:")


def test_cross_validation_with_five_folds_starts_no_engine(sst2):
    X, y = sst2
    starts = engine_count()
    with ReadCache().active():  # each fold's texts read once for both calls and both scorers
        scores = cross_val_score(make(), X, y, cv=5)
        result = cross_validate(make(), X, y, cv=5, scoring=["accuracy", "neg_log_loss"])
    assert engine_count() == starts
    assert scores.shape == (5,) and ((0 <= scores) & (scores <= 1)).all()
    assert result["test_neg_log_loss"].shape == (5,) and (result["test_neg_log_loss"] < 0).all()


def test_calibrated_classifier_cv_around_it(sst2, fitted):
    X, y = sst2
    with ReadCache().active():  # the three fold estimators read each text once between them
        calibrated = CalibratedClassifierCV(make(), cv=3, method="sigmoid").fit(X, y)
        proba = calibrated.predict_proba(X)
        raw = fitted.predict_proba(X)
    assert proba.shape == (len(X), 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-9)
    np.testing.assert_array_equal(calibrated.classes_, fitted.classes_)
    assert not np.allclose(proba, raw)


def test_metrics_on_its_output(sst2, fitted):
    X, y = sst2
    proba = fitted.predict_proba(X)
    report = classification_report(y, fitted.predict(X), output_dict=True)
    assert set(report) >= {"negative", "positive", "accuracy"}
    auc = roc_auc_score(y == fitted.classes_[1], proba[:, 1])
    assert 0 <= auc <= 1
    # Log-odds rank texts as proba does; bf16 logprobs are coarse, so ties that
    # rounding breaks differently can move the AUC by a pair or two.
    assert roc_auc_score(y, fitted.decision_function(X)) == pytest.approx(auc, abs=2 / (N_TEXTS**2 / 4))
    assert log_loss(y, proba, labels=fitted.classes_) == pytest.approx(
        -np.mean(np.log(proba[np.arange(len(y)), np.searchsorted(fitted.classes_, y)]))
    )

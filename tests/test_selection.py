"""Cross-validated selection (``LLMLabelClassifierCV``) on the real engine:
each way of reading is read once per training text, every candidate's fold
scores equal what fitting that candidate on the fold would give, the refit
reads nothing new, the choice follows its rule (``rules``, also checked on
hand-built score tables), the temperature and the held-out estimate are
arithmetic on the folds, and the ``*CV`` conventions of scikit-learn hold.
Plus the class-prior-aware calibrations and the learned calibration's class
weights."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.special import softmax
from sklearn.base import BaseEstimator, clone
from sklearn.pipeline import Pipeline

from helpers import SST2_TEMPLATE, make_classifier
from llm_label_clf import LLMLabelClassifier, LLMLabelClassifierCV
from llm_label_clf.fitting.calibration import class_prior
from llm_label_clf.reading.build import FewShotTooLongError
from llm_label_clf.reading.cache import ReadCache
from llm_label_clf.reading.unshown import swapped_examples
from llm_label_clf.selection.budget import passes, readers_within
from llm_label_clf.selection.candidates import Candidate
from llm_label_clf.selection.estimate import bootstrap_sem, nested_choices, pair_splits
from llm_label_clf.selection.folds import (
    fallback_candidate,
    too_small_for_examples,
    usable_few_shots,
    warn_left_out,
)
from llm_label_clf.selection.plans import fitted_plans
from llm_label_clf.selection.reads import read_reader
from llm_label_clf.selection.rules import choose, complexity_of
from llm_label_clf.selection.scores import ReaderReads, StackingHead, fold_model
from llm_label_clf.selection.temperature import SHRINK_TEXTS, fit_temperature, shrunk

N_TEXTS = 48
PROMPTS = [SST2_TEMPLATE, {"prompt": "Text: {text}\nIs it {labels}?\nAnswer:", "instructions": None}]
READ_TOLERANCE = 1e-6  # float32 reads of the same prompt in other batches
#: float32 reads of a long few-shot prompt move by up to ~2e-5 between a prefix
#: cache hit and a miss (conftest), so repeated predictions agree to this
CACHE_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def sst2(sst2_all):
    X, y = sst2_all
    return X[:N_TEXTS], y[:N_TEXTS]


@pytest.fixture(scope="module")
def recorded(engine):
    """Every engine read the ``selected`` fit made (an enclosing ReadCache:
    the fit's own cost is counted as without it). Tests that re-read those
    prompts take them from here, ``ReadCache(parent=recorded)``: arithmetic
    on reads may use reads recorded from that engine earlier in the session."""
    return ReadCache()


@pytest.fixture
def reads_once(recorded):
    """The test's reads through a cache over ``recorded``: each prompt is read
    once, and not at all where the ``selected`` fit read it (calibrations
    are arithmetic on those reads)."""
    with ReadCache(parent=recorded).active() as cache:
        yield cache


@pytest.fixture(scope="module")
def selected(engine, sst2, recorded):
    X, y = sst2
    base = make_classifier(random_state=0, low_mass="ignore")
    cv = LLMLabelClassifierCV(
        base, prompts=PROMPTS, few_shots=(0, 1), cv=3, scoring=["neg_log_loss", "accuracy", "f1_macro"],
        refit="neg_log_loss", rule="one_se", recalibrate="temperature",
    )
    with recorded.active():
        return cv.fit(X, y)


def test_every_candidate_is_scored_in_grid_search_layout(selected):
    results = selected.cv_results_
    frame = pd.DataFrame(results)
    # 4 readers x (auto, None, contextual, batch, learned x 2 class weights) + 2 stacked
    assert len(frame) == 4 * 6 + 2
    for metric in ("neg_log_loss", "accuracy", "f1_macro"):
        splits = np.column_stack([results[f"split{k}_test_{metric}"] for k in range(3)])
        np.testing.assert_allclose(results[f"mean_test_{metric}"], splits.mean(axis=1))
        assert np.all(np.isfinite(splits))
    best = selected.best_index_
    means, sems = results["mean_test_neg_log_loss"], results["sem_test_neg_log_loss"]
    # rule one_se: the simplest candidate within one standard error of the highest mean
    assert best == choose(means, sems, results["complexity"], "one_se")
    assert means[best] >= means.max() - sems[np.argmax(means)]
    assert selected.best_score_ == means[best]
    assert selected.best_params_ == results["params"][best]
    assert set(frame["param_calibration"].dropna()) == {"auto", "contextual", "batch", "learned"}
    assert selected.n_splits_ == 3


def test_each_way_of_reading_is_read_once_and_the_refit_reads_nothing(selected, sst2):
    """Single-token labels: one read per text per reader (an example text
    under its own swapped prompt), plus its three content-free inputs;
    calibrations, folds and the refit add none."""
    X, _ = sst2
    cost = selected.fit_cost_
    assert cost["engine_reads"] == 4 * (len(X) + 3)
    assert cost["texts"] == len(X)
    assert cost["zero_shot_passes"] == pytest.approx(4 * (len(X) + 3) / len(X))


def test_fold_scores_equal_fitting_the_candidate_on_the_fold(selected, sst2, engine, recorded):
    """Zero-shot candidates of the first prompt: the held-out log-probabilities
    the selection computed from its reads equal an LLMLabelClassifier with
    those parameters fitted on the fold's training rows and predicting its
    test rows (its reads answered by the ones the selection recorded)."""
    with ReadCache(parent=recorded).active():
        X, y = sst2
        X_arr = np.array(X, dtype=object)
        base = make_classifier(random_state=0, low_mass="ignore")
        reader = clone(base).fit(X, y)
        reads = reader._read(X)[0]
        free = reader._read(["N/A", "", "[MASK]"])[0].log_proba()
        readers = [ReaderReads(reads, free)]
        classes = reader.classes_
        y_index = np.searchsorted(classes, y)
        rng = np.random.RandomState(3)
        test = np.sort(rng.choice(len(X), 12, replace=False))
        train = np.setdiff1d(np.arange(len(X)), test)
        for params in (
            {"calibration": None},
            {"calibration": "contextual", "calibration_prior": "y"},
            {"calibration": "batch", "calibration_prior": "uniform"},
            {"calibration": "learned", "class_weight": "balanced"},
        ):
            got = fold_model(Candidate(0, params), readers, y_index, classes, train, 0)(test)  # base's random_state
            fitted = clone(base).set_params(**params).fit(list(X_arr[train]), y[train])
            want = fitted.predict_log_proba(list(X_arr[test]))
            np.testing.assert_allclose(got, want, atol=READ_TOLERANCE, err_msg=str(params))


def test_refit_is_the_best_candidate_on_every_text(selected, sst2, recorded):
    X, y = sst2
    best = selected.best_estimator_
    if isinstance(best, Pipeline):
        assert selected.best_params_["stack"] is True
    else:
        assert isinstance(best, LLMLabelClassifier)
        for key, value in selected.best_params_.items():
            assert best.get_params()[key] == value
    with ReadCache(parent=recorded).active():  # the fit's reads: only the temperature differs
        proba = selected.predict_proba(X)
        best_proba = best.predict_proba(X)
        predicted = selected.predict(X)
        accuracy = selected.score(X, y)
    assert selected.temperature_ > 0
    tempered = softmax(np.log(np.clip(best_proba, 1e-300, None)) / selected.temperature_, axis=1)
    np.testing.assert_allclose(proba, tempered, atol=1e-9, rtol=0)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(predicted, selected.classes_[np.argmax(proba, axis=1)])  # no argmax moved
    np.testing.assert_array_equal(selected.classes_, np.unique(y))
    assert predicted.dtype == y.dtype
    assert accuracy == np.mean(predicted == y)


def test_standard_errors_complexity_and_held_out_estimate_are_arithmetic_on_the_folds(selected):
    """sem_test_* is std over sqrt(folds); complexity follows the candidates;
    the held-out estimate is the rule applied without each split in turn."""
    results = selected.cv_results_
    for metric in ("neg_log_loss", "accuracy", "f1_macro"):
        splits = np.column_stack([results[f"split{k}_test_{metric}"] for k in range(3)])
        np.testing.assert_allclose(results[f"sem_test_{metric}"], splits.std(axis=1) / np.sqrt(3))
    levels = [complexity_of(Candidate(None if p.get("stack") else 0, p)) for p in results["params"]]
    np.testing.assert_array_equal(results["complexity"], levels)
    np.testing.assert_array_equal(results["complexity"], [complexity_of(p) for p in results["params"]])
    assert set(levels) == {0, 1, 2, 3}  # every level is a candidate (few_shots=(0, 1), stack)
    splits = np.column_stack([results[f"split{k}_test_neg_log_loss"] for k in range(3)])
    chosen = selected.held_out_choices_
    assert chosen.shape == (3,) and (chosen >= 0).all()
    assert selected.held_out_score_ == pytest.approx(np.mean([splits[c, k] for k, c in enumerate(chosen)]), rel=1e-12)
    assert np.isfinite(selected.held_out_score_) and selected.held_out_score_sem_ > 0
    assert selected.n_folds_ == selected.n_splits_ == 3


def test_stacked_candidate_refits_as_a_pipeline_with_a_head_fitted_on_the_scorings_reads(selected, sst2, recorded):
    """The stacked model: a FeatureUnion of every reader (fitted on every
    text: plans, no reads) and a logistic regression fitted on the reads the
    scoring made, each text under a prompt that does not show it (as
    StackingClassifier fits on out-of-fold predictions); refitting it reads
    nothing."""
    X, y = sst2
    base = make_classifier(random_state=0, low_mass="ignore")
    y_index = np.searchsorted(selected.classes_, y)
    records = [{"text": t} for t in X]
    fitted = [clone(base).set_params(**p, calibration=None).fit(X, y) for p in selected.readers_]
    with ReadCache(parent=recorded).active():  # the scoring's reads, as it recorded them
        reads = [read_reader(r, records, y_index, "test") for r in fitted]
    stacked = next(i for i, p in enumerate(selected.cv_results_["params"]) if p.get("stack"))
    cache = ReadCache()
    with cache.active():
        model = selected._refit(base, selected.readers_, Candidate(None, selected.cv_results_["params"][stacked]),
                                X, y, reads)
    assert cache.reads == 0
    assert isinstance(model, Pipeline)
    assert len(model.named_steps["features"].transformer_list) == 4
    head = model.named_steps["head"]
    scored = np.hstack([r.reads.class_logprobs for r in reads])
    alone = StackingHead(head.class_weight, head.random_state).fit(scored, y)
    np.testing.assert_allclose(head.predict_proba(scored), alone.predict_proba(scored), atol=1e-12)
    proba = model.predict_proba(X[:8])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert model.predict(X[:8]).dtype == y.dtype
    # the pipeline's own few-shot readers show some training texts: their reads of those differ from the scoring's
    with ReadCache(parent=recorded).active():
        features = model.named_steps["features"].transform(X)
    assert np.abs(features - scored).max() > 1e-3


def test_every_text_is_read_under_a_prompt_that_does_not_show_it(selected, sst2, recorded):
    """A few-shot reader reads every text under the refit's prompt (the reads
    equal the refit estimator's), but an example text under that prompt with
    itself swapped, at its place, for an unshown text of its class: every
    text is scored, none by a prompt that shows it."""
    X, y = sst2
    base = make_classifier(random_state=0, low_mass="ignore")
    y_index = np.searchsorted(selected.classes_, y)
    params = next(p for p in selected.readers_ if p["few_shot"])
    reader = clone(base).set_params(**params, calibration=None).fit(X, y)
    shown = list(reader.few_shot_rows_)
    with ReadCache(parent=recorded).active():  # the shown texts' own reads are not recorded: read here
        reads = read_reader(reader, [{"text": t} for t in X], y_index, "test").reads.log_proba()
        whole = reader.predict_log_proba(X)
    rest = np.setdiff1d(np.arange(len(X)), shown)
    np.testing.assert_allclose(reads[rest], whole[rest], atol=CACHE_TOLERANCE)
    assert np.abs(reads[shown] - whole[shown]).max() > 1e-3  # read under the prompt that shows them, they differ
    for row, swapped in zip(shown, swapped_examples(shown, y_index, 0), strict=True):
        assert row not in swapped and len(swapped) == len(shown)
        (place,) = [i for i, r in enumerate(shown) if r == row]
        new = swapped[place]
        assert y_index[new] == y_index[row] and new not in shown
        assert swapped[:place] + swapped[place + 1:] == shown[:place] + shown[place + 1:]
    # a class with no unshown text left: its example is dropped, not replaced
    assert swapped_examples([0, 1], np.array([0, 1, 1]), 0) == [[1], [0, 2]]


def test_a_few_shot_refit_calibrates_on_the_reads_the_folds_scored(selected, sst2, recorded):
    """A few-shot fit calibrates on every training text, an example text read
    with itself swapped out: the refit of a learned few-shot candidate is
    the fold model fitted on every row of the scoring's reads. Before
    2026-12-07 it calibrated on the texts outside its examples only, a model
    no fold scored (the AG News misses of issue 54). A class of 2 texts, both
    examples (few_shot=2), now fits too."""
    X, y = sst2
    base = make_classifier(random_state=0, low_mass="ignore")
    classes = selected.classes_
    y_index = np.searchsorted(classes, y)
    params = {**next(p for p in selected.readers_ if p["few_shot"]), "calibration": "learned", "class_weight": None}
    reader = clone(base).set_params(**{**params, "calibration": None}).fit(X, y)
    rest = np.setdiff1d(np.arange(len(X)), reader.few_shot_rows_)
    with ReadCache(parent=recorded).active():
        reads = read_reader(reader, [{"text": t} for t in X], y_index, "test")
        refit = clone(base).set_params(**params).fit(X, y)
        got = refit.predict_log_proba([X[i] for i in rest])
    every = np.arange(len(X))
    want = fold_model(Candidate(0, params), [reads], y_index, classes, every, 0)(rest)
    np.testing.assert_allclose(got, want, atol=CACHE_TOLERANCE)
    rare = np.flatnonzero(y == classes[1])[:2]
    keep = np.concatenate([np.flatnonzero(y == classes[0]), rare])
    small = clone(base).set_params(**{**params, "few_shot": 2}).fit([X[i] for i in keep], y[keep])
    assert sorted(set(rare.tolist()) & {int(keep[r]) for r in small.few_shot_rows_}) == sorted(rare.tolist())
    assert np.isfinite(small.predict_log_proba(X[:4])).all()


def test_clone_and_pickle(selected, sst2):
    X, _ = sst2
    fresh = clone(selected)
    assert fresh.get_params()["prompts"] == selected.prompts
    assert not hasattr(fresh, "best_estimator_")
    again = pickle.loads(pickle.dumps(selected))
    np.testing.assert_allclose(again.predict_proba(X[:6]), selected.predict_proba(X[:6]), atol=CACHE_TOLERANCE)


def test_single_scorer_is_named_score_and_refit_must_name_one_of_several(engine, sst2, recorded):
    X, y = sst2
    small = dict(prompts=[SST2_TEMPLATE], few_shots=[0], calibrations=[None, "batch"], stack=False, cv=3)
    with ReadCache(parent=recorded).active():  # the first prompt's zero-shot reads, as ``selected`` made them
        one = LLMLabelClassifierCV(make_classifier(low_mass="ignore"), rule="best", **small).fit(X, y)
    assert "mean_test_score" in one.cv_results_ and len(one.cv_results_["params"]) == 2
    assert one.best_index_ == np.argmax(one.cv_results_["mean_test_score"])  # "best": the highest mean
    assert one.cv_results_["rank_test_score"][one.best_index_] == 1
    assert one.scorer_ is not None and one.best_params_["calibration"] in (None, "batch")
    assert one.best_score_ == pytest.approx(
        np.mean([one.cv_results_[f"split{k}_test_score"][one.best_index_] for k in range(3)])
    )
    with pytest.raises(ValueError, match="refit must name the one that chooses"):
        LLMLabelClassifierCV(make_classifier(low_mass="ignore"), scoring=["accuracy", "neg_log_loss"], **small).fit(X, y)


def test_few_labelled_texts_lower_the_fold_count_and_few_shot_with_a_warning(engine, sst2, recorded):
    """Nine texts, three positive: three or two examples per class would leave
    fewer than two positives to score, so few_shot=3 is lowered to 1; five
    texts are too few for any examples, so few_shot is left out there. The
    five folds stay (the three positives are tested in three of them). With
    ``small_data="search"`` the choice is among those candidates. Nine texts
    are also too few for 3 examples per class overall (9 < 2 x 3 x 2), so by
    default the choice is the unscored fallback, few_shot=3 with batch
    calibration, last in ``cv_results_``, the estimator that fitting it alone
    gives. One warning per fit says what was left out, with the class
    counts, and which of the two was taken."""
    X, y = sst2
    rows = np.concatenate([np.flatnonzero(y == "negative")[:6], np.flatnonzero(y == "positive")[:3]])
    texts, labels = [X[i] for i in rows], y[rows]
    small = dict(prompts=[SST2_TEMPLATE], few_shots=[0, 3], calibrations=[None, "batch"], stack=False)
    base = make_classifier(random_state=0, low_mass="ignore")  # both fits draw the same examples
    # read each prompt once; the zero-shot reads are those ``selected`` made
    with ReadCache(parent=recorded).active(), pytest.warns(UserWarning) as caught:
        cv = LLMLabelClassifierCV(base, small_data="search", **small).fit(texts, labels)
        default = LLMLabelClassifierCV(base, **small).fit(texts, labels)
        scored = clone(default).set_params(scoring=["neg_log_loss", "accuracy"], refit="accuracy",
                                           recalibrate="temperature").fit(texts, labels)
    said = [str(w.message) for w in caught]
    left_out = [m for m in said if "few_shot=3 lowered to 1" in m]
    assert len(left_out) == 3, said  # one per fit
    assert all("with 9 training texts in 2 classes ('negative' 6, 'positive' 3), few_shot=3 lowered to 1" in m
               for m in left_out)
    assert "the choice is among them" in left_out[0] and "fallback" not in left_out[0]  # small_data="search"
    fell_back = "9 texts are fewer than 2 x few_shot=3 x 2 classes, so best_estimator_ is the fallback (small_data="
    assert all(fell_back in m for m in left_out[1:])  # the default's fits, not the search's
    assert not any("stratified folds" in m or "least populated class" in m for m in said)
    assert cv.n_splits_ == 5 and len(cv.cv_results_["split4_test_score"]) == 4
    assert {p["few_shot"] for p in cv.cv_results_["params"]} == {0, 1}
    assert cv.best_params_["few_shot"] in (0, 1) and np.isfinite(cv.best_score_)
    # the default: the search's rows, then the fallback's, unscored and chosen
    assert len(default.cv_results_["params"]) == 5 and default.best_index_ == 4
    for key in ("mean_test_score", *(f"split{k}_test_score" for k in range(5))):
        np.testing.assert_array_equal(default.cv_results_[key][:4], cv.cv_results_[key])
        assert np.isnan(default.cv_results_[key][4])
    assert default.best_params_ == {"prompt": SST2_TEMPLATE, "few_shot": 3, "label_mode": "auto", "length_norm": None,
                                    "labels": None, "calibration": "batch", "calibration_prior": "y"}
    assert np.isnan(default.best_score_) and np.isnan(default.held_out_score_) and default.temperature_ == 1.0
    # several scorers, a temperature asked for: the same fallback row, NaN in every metric, no temperature to fit
    assert scored.get_params()["small_data"] == "fallback" and scored.best_index_ == 4
    assert scored.best_params_ == default.best_params_ and scored.temperature_ == 1.0
    for metric in ("neg_log_loss", "accuracy"):
        assert np.isnan(scored.cv_results_[f"mean_test_{metric}"][4])
        assert scored.cv_results_[f"rank_test_{metric}"][4] == 5  # ranks last, as GridSearchCV's NaN
    np.testing.assert_array_equal(scored.cv_results_["mean_test_neg_log_loss"][:4], cv.cv_results_["mean_test_score"])
    alone = clone(base).set_params(**default.best_params_).fit(texts, labels)
    assert alone.few_shot_rows_ == default.best_estimator_.few_shot_rows_ and len(alone.few_shot_rows_) == 6
    np.testing.assert_allclose(default.predict_proba(X[-4:]), alone.predict_proba(X[-4:]), atol=CACHE_TOLERANCE)
    assert not np.allclose(default.predict_proba(X[-4:]), cv.predict_proba(X[-4:]), atol=CACHE_TOLERANCE)
    five = [X[i] for i in rows[[0, 1, 2, 6, 7]]], y[rows[[0, 1, 2, 6, 7]]]  # 3 negative, 2 positive
    with pytest.warns(UserWarning) as caught:
        few = LLMLabelClassifierCV(make_classifier(low_mass="ignore"), small_data="search", **small).fit(*five)
    assert "few_shot=3 left out" in " | ".join(str(w.message) for w in caught)
    assert {p["few_shot"] for p in few.cv_results_["params"]} == {0} and np.isfinite(few.held_out_score_)
    with pytest.warns(UserWarning) as caught:
        two = LLMLabelClassifierCV(make_classifier(low_mass="ignore"), small_data="search", cv=2, **small).fit(*five)
    said = " | ".join(str(w.message) for w in caught)
    assert "held_out_score_ is NaN: a nested estimate needs at least 3 folds per repeat (this cv gives 2)" in said
    assert np.isnan(two.held_out_score_) and np.isnan(two.held_out_score_sem_) and np.isfinite(two.best_score_)
    with pytest.raises(ValueError, match=r"5 training texts in 2 classes: every few-shot count in few_shots=\[3\]"):
        LLMLabelClassifierCV(make_classifier(low_mass="ignore"), **{**small, "few_shots": [3]}).fit(*five)


def test_a_class_missing_from_a_held_out_fold_is_still_scored(engine, sst2):
    """One text of a third class: it sits in one held-out fold only. The
    default log-loss is computed over every class on the other folds too, and
    the learned calibration, which cannot fit a class seen once, scores NaN
    there and ranks last (GridSearchCV's error_score=nan) instead of failing
    the whole fit."""
    X, y = sst2
    rows = np.concatenate([np.flatnonzero(y == "negative")[:6], np.flatnonzero(y == "positive")[:5]])
    texts, labels = [X[i] for i in rows], np.append(y[rows[:-1]], "neutral")
    small = dict(prompts=[SST2_TEMPLATE], few_shots=[0], calibrations=[None, "batch", "learned"],
                 class_weights=[None], stack=False)
    with pytest.warns(UserWarning) as caught:
        cv = LLMLabelClassifierCV(make_classifier(low_mass="ignore"), **small).fit(texts, labels)
    said = " | ".join(str(w.message) for w in caught)
    assert "could not be fitted on some folds" in said and "'learned'" in said
    assert "least populated class" not in said  # scikit-learn's own warning is not repeated
    assert cv.n_splits_ == 5 and list(cv.classes_) == ["negative", "neutral", "positive"]
    calibrations = [p["calibration"] for p in cv.cv_results_["params"]]
    learned = calibrations.index("learned")
    for i, calibration in enumerate(calibrations):
        split_scores = [cv.cv_results_[f"split{k}_test_score"][i] for k in range(5)]
        if calibration == "learned":
            assert np.isnan(split_scores).any()
        else:
            assert np.all(np.isfinite(split_scores)) and max(split_scores) < 0
    assert cv.cv_results_["rank_test_score"][learned] == len(calibrations)
    assert cv.best_params_["calibration"] in (None, "batch")
    # one example per class: the only "neutral" text is still scored, under the prompt of its fold, which
    # draws its examples from the other folds (no "neutral" example there)
    with pytest.warns(UserWarning):
        shot = LLMLabelClassifierCV(make_classifier(low_mass="ignore"), **{**small, "few_shots": [0, 1]}).fit(
            texts, labels
        )
    few = next(i for i, p in enumerate(shot.cv_results_["params"]) if p["few_shot"] and p["calibration"] is None)
    assert all(np.isfinite(shot.cv_results_[f"split{k}_test_score"][few]) for k in range(5))


def test_imbalanced_59_to_5_scores_what_it_can(engine, sst2_all):
    """Issue 54: 64 texts, 59 negative and 5 positive, the default
    candidates. Four examples per class would leave one positive to score
    by, so few_shot=4 is lowered to 3 (two positives left); every zero-shot
    candidate and every few_shot=3 one is scored on all 64 texts, the choice
    is among them, and its score and estimate are finite. One warning says
    what was left out, with the class counts, and no unscored fallback is
    taken (it used to be, with NaN scores, after a warning that the count
    was lowered)."""
    X, y = sst2_all
    rows = np.concatenate([np.flatnonzero(y == "negative")[:59], np.flatnonzero(y == "positive")[:5]])
    texts, labels = [X[i] for i in rows], y[rows]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cv = LLMLabelClassifierCV(LLMLabelClassifier(random_state=0, progress=False)).fit(texts, labels)
    said = [str(w.message) for w in caught]
    left_out = [w for w in caught if "few_shot=" in str(w.message)]
    assert len(left_out) == 1 and issubclass(left_out[0].category, UserWarning), said
    message = str(left_out[0].message)
    assert "64 training texts in 2 classes ('negative' 59, 'positive' 5), few_shot=4 lowered to 3" in message
    assert not any("fallback" in m or "unscored" in m for m in said), said
    assert np.isfinite(cv.best_score_) and np.isfinite(cv.held_out_score_) and np.isfinite(cv.held_out_score_sem_)
    params = cv.cv_results_["params"]
    assert {p["few_shot"] for p in params if not p.get("stack")} == {0, 3}  # few_shot=4 is not a row
    assert cv.best_params_ == params[cv.best_index_] and cv.best_params_.get("few_shot", 0) in (0, 3)
    chosen = [cv.cv_results_[f"split{k}_test_score"][cv.best_index_] for k in range(cv.n_splits_)]
    assert np.all(np.isfinite(chosen)) and cv.best_score_ == pytest.approx(np.mean(chosen))
    assert cv.n_splits_ == 5 and (cv.held_out_choices_ >= 0).all()
    assert isinstance(cv.best_estimator_, LLMLabelClassifier | Pipeline)


def test_bad_candidates_and_targets_are_named(engine, sst2):
    X, y = sst2
    with pytest.raises(ValueError, match=r"candidate .*'calibration': 'sideways'.*calibration='sideways'"):
        LLMLabelClassifierCV(calibrations=[None, "sideways"], prompts=[None], few_shots=[0]).fit(X, y)
    with pytest.raises(ValueError, match=r"prompts\[1\] is a int"):
        LLMLabelClassifierCV(prompts=[None, 3]).fit(X, y)
    with pytest.raises(ValueError, match="few_shots must be a non-empty list"):
        LLMLabelClassifierCV(few_shots=[]).fit(X, y)
    with pytest.raises(ValueError, match=r"candidate .*'few_shot': -1.*few_shot=-1 must be a non-negative integer"):
        LLMLabelClassifierCV(few_shots=[0, -1], prompts=[None]).fit(X, y)  # named, not "left out" as too large
    with pytest.raises(ValueError, match="chooses for one output"):
        LLMLabelClassifierCV().fit(X, np.column_stack([y, y]))
    with pytest.raises(ValueError, match="estimator must be an LLMLabelClassifier"):
        LLMLabelClassifierCV(estimator="gpt").fit(X, y)
    from sklearn.model_selection import StratifiedKFold

    with pytest.raises(ValueError, match=r"n_repeats=2 repeats the folds of an int cv, and cv=StratifiedKFold"):
        LLMLabelClassifierCV(n_repeats=2, cv=StratifiedKFold(3)).fit(X, y)
    with pytest.raises(ValueError, match=r"n_repeats must be an int of at least 1; got n_repeats=0"):
        LLMLabelClassifierCV(n_repeats=0).fit(X, y)
    with pytest.raises(ValueError, match=r"rule must be one of \['best', 'guarded', 'one_se'\]; got rule='min'"):
        LLMLabelClassifierCV(rule="min").fit(X, y)
    with pytest.raises(ValueError, match=r"max_passes must be None .* of at least 1 .*; got max_passes=0.5"):
        LLMLabelClassifierCV(max_passes=0.5).fit(X, y)
    with pytest.raises(ValueError, match="recalibrate must be 'temperature' or None; got recalibrate='platt'"):
        LLMLabelClassifierCV(recalibrate="platt").fit(X, y)
    with pytest.raises(ValueError, match=r"small_data must be one of \['fallback', 'search'\]; got small_data='drop'"):
        LLMLabelClassifierCV(small_data="drop").fit(X, y)


def test_repeats_and_an_enclosing_cache_read_nothing_more(engine, sst2):
    """Repeated folds are arithmetic on the same reads: twice the split
    columns, the same reads. A second fit inside an enclosing ReadCache takes
    every read from it (the engine reads nothing) yet reports what it would
    read alone. recalibrate=None leaves best_estimator_'s probabilities."""
    X, y = sst2[0][:24], sst2[1][:24]
    small = dict(prompts=[SST2_TEMPLATE], few_shots=[0], calibrations=[None, "batch"], stack=False, cv=3)
    outer = ReadCache()
    with outer.active():
        once = LLMLabelClassifierCV(make_classifier(random_state=0, low_mass="ignore"), **small).fit(X, y)
        engine_reads = outer.reads
        twice = LLMLabelClassifierCV(
            make_classifier(random_state=0, low_mass="ignore"), n_repeats=2, recalibrate=None, **small
        ).fit(X, y)
        proba, best_proba = twice.predict_proba(X[:6]), twice.best_estimator_.predict_proba(X[:6])
    assert engine_reads == outer.reads == len(X) + 3  # the second fit and the predictions: all from the cache
    assert once.fit_cost_["engine_reads"] == twice.fit_cost_["engine_reads"] == engine_reads
    assert once.fit_cost_["seconds"] > 0 and twice.fit_cost_["seconds"] > 0
    assert (once.n_splits_, once.n_folds_, twice.n_splits_, twice.n_folds_) == (3, 3, 6, 3)
    assert "split5_test_score" in twice.cv_results_ and "split3_test_score" not in once.cv_results_
    splits = np.column_stack([twice.cv_results_[f"split{k}_test_score"] for k in range(6)])
    np.testing.assert_allclose(twice.cv_results_["sem_test_score"], splits.std(axis=1) / np.sqrt(3))
    chosen = twice.held_out_choices_  # each split's nested choice, from its own repeat's other folds
    assert chosen.shape == (6,) and (chosen >= 0).all()
    assert twice.held_out_score_ == pytest.approx(np.mean([splits[c, k] for k, c in enumerate(chosen)]), rel=1e-12)
    assert twice.held_out_score_sem_ > 0
    assert twice.temperature_ == 1.0
    np.testing.assert_array_equal(proba, best_proba)


def test_a_fit_says_each_warning_once_at_the_users_line(engine, sst2):
    """Integer labels: every reader and the refit fit an estimator that would
    warn that the numbers are written as the labels; the search says it once,
    pointing at this file."""
    import warnings

    from llm_label_clf import LabelWordsWarning

    X, y = sst2[0][:24], np.where(sst2[1][:24] == "positive", 1, 0)
    small = dict(prompts=PROMPTS, few_shots=(0, 1), calibrations=[None, "batch"], stack=False, cv=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        LLMLabelClassifierCV(make_classifier(random_state=0, low_mass="ignore"), **small).fit(X, y)
    words = [w for w in caught if issubclass(w.category, LabelWordsWarning)]
    assert len(words) == 1, [str(w.message)[:80] for w in words]
    assert words[0].filename == __file__
    assert len({(w.category, str(w.message)) for w in caught}) == len(caught)  # nothing said twice


def test_max_passes_leaves_out_the_costliest_readers_before_reading(engine, sst2, recorded):
    """Four readers of one read per text would cost 4 x 27 / 24 = 4.5 passes
    over 24 texts (3 content-free inputs each); max_passes=2.5 leaves out the
    few-shot readers, the later first, and never the first reader. fit reads
    exactly what the budget counted, warns naming what it left out, and
    stacks the readers it kept. Labels of several tokens (emotion's under the
    chat template: 5 reads per text) cost a reader more, on the same rule."""
    X, y = sst2[0][:24], sst2[1][:24]
    small = dict(prompts=PROMPTS, few_shots=(0, 1), calibrations=[None], cv=3, max_passes=2.5)
    warned = pytest.warns(UserWarning, match=r"exceed max_passes=2.5 .* left out: .*'few_shot': 1.*'few_shot': 1")
    with warned, ReadCache(parent=recorded).active():  # the zero-shot reads ``selected`` made: counted all the same
        cv = LLMLabelClassifierCV(make_classifier(random_state=0, low_mass="ignore"), **small).fit(X, y)
    assert [r["few_shot"] for r in cv.readers_] == [0, 0] and [r["few_shot"] for r in cv.skipped_readers_] == [1, 1]
    assert [r["prompt"] for r in cv.readers_] == [PROMPTS[0], PROMPTS[1]["prompt"]]
    assert cv.fit_cost_["engine_reads"] == 2 * (24 + 3)
    assert cv.fit_cost_["zero_shot_passes"] == pytest.approx(passes([1, 1], 24, 3)) == 2.25
    assert [p.get("stack", False) for p in cv.cv_results_["params"]] == [False, False, True, True]
    assert not any(p.get("few_shot") for p in cv.cv_results_["params"])
    # emotion at 64 texts: the default prompt and the instruction line read once per text, the chat turn 5 times
    costs, few_shots = [1, 1, 1, 1, 5, 5], [0, 4, 0, 4, 0, 4]
    assert readers_within(costs, few_shots, 64, 3, 10.0) == [0, 1, 2, 3, 4]
    assert passes(costs, 64, 3) > 10 >= passes(costs[:5], 64, 3)
    assert readers_within(costs, few_shots, 64, 3, None) == list(range(6))
    assert readers_within([5, 1, 1], [0, 0, 4], 64, 3, 1.0) == [0]  # the first reader is always kept


def test_a_prompt_whose_examples_overflow_the_context_is_left_out_not_the_search(engine, sst2):
    """A prompt of ~1/8 of the model's context (a long preamble: each
    few-shot example is written in the prompt's format, so it makes the
    examples long as long texts do, while the zero-shot reads share it as one
    cached prefix): 4 examples of each of 2 classes overflow the context. The
    search leaves that reader out before reading, says so once with the
    tokens and the context, and chooses among the zero-shot candidates; the
    estimator alone, and a search with no prompt that fits, raise the
    estimator's error. 12 texts, read once each (plus 3 content-free)."""
    import warnings

    X, y = sst2
    rows = np.concatenate([np.flatnonzero(y == "negative")[:6], np.flatnonzero(y == "positive")[:6]])
    texts, labels = [X[i] for i in rows], y[rows]
    sentence = "Read the movie review below and say whether its author liked the film. "
    repeats = engine.max_model_len // 8 // len(engine.tokenizer.encode(sentence, add_special_tokens=False)) + 2
    long_prompt = sentence * repeats + "\n" + SST2_TEMPLATE
    small = dict(prompts=[long_prompt], few_shots=(0, 4), calibrations=[None, "batch"], stack=False, cv=3)
    base = make_classifier(random_state=0, low_mass="ignore")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cv = LLMLabelClassifierCV(base, **small).fit(texts, labels)
    said = [str(w.message) for w in caught if "few-shot prompt(s) are left out" in str(w.message)]
    assert len(said) == 1, [str(w.message)[:120] for w in caught]
    assert "'few_shot': 4" in said[0] and f"of the model's {engine.max_model_len} tokens" in said[0]
    assert "(few_shot=4: " in said[0] and "Pass smaller few_shots" in said[0]
    assert [r["few_shot"] for r in cv.readers_] == [0] and [r["few_shot"] for r in cv.skipped_readers_] == [4]
    assert [p["few_shot"] for p in cv.cv_results_["params"]] == [0, 0]
    assert cv.best_params_["few_shot"] == 0 and cv.best_estimator_.few_shot == 0
    assert np.isfinite(cv.best_score_) and np.isfinite(cv.held_out_score_)
    assert cv.fit_cost_["engine_reads"] == len(texts) + 3  # the left-out reader read nothing
    with pytest.raises(FewShotTooLongError, match=r"LLMLabelClassifier: few_shot=4 examples per class take \d+ "):
        clone(base).set_params(prompt=long_prompt, few_shot=4).fit(texts, labels)
    with pytest.raises(FewShotTooLongError, match=r"few_shot=4 examples per class take \d+ tokens, leaving less"):
        LLMLabelClassifierCV(base, **{**small, "few_shots": [4]}).fit(texts, labels)


# --- the selection rules, on hand-built score tables (no engine) --------------


def test_one_warning_names_what_cannot_be_scored_and_the_class_counts():
    """59 texts of one class and 5 of the other: 4 examples per class would
    leave one text of the rarer class to score by, so few_shot=4 is lowered
    to 3 (2 left). One warning names the count, its replacement and both
    classes' counts. Nothing is said when nothing is left out."""
    y = np.array(["negative"] * 59 + ["positive"] * 5)
    few_shots, lowered = usable_few_shots((0, 4), y)
    assert few_shots == [0, 3] and lowered == ["few_shot=4 lowered to 3"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_left_out(y, lowered)
        warn_left_out(y, [])
    assert len(caught) == 1 and issubclass(caught[0].category, UserWarning)
    message = str(caught[0].message)
    assert "64 training texts in 2 classes ('negative' 59, 'positive' 5), few_shot=4 lowered to 3" in message
    assert "not in cv_results_" in message and "fallback" not in message
    # three classes, one of 1 text: few_shot=4 lowered to 1
    y3 = np.array(["a"] * 12 + ["b"] * 3 + ["c"])
    few_shots, lowered = usable_few_shots([0, 4], y3)
    assert few_shots == [0, 1]
    with pytest.warns(UserWarning) as caught:
        warn_left_out(y3, lowered)
    assert len(caught) == 1
    assert "('a' 12, 'b' 3, 'c' 1), few_shot=4 lowered to 1: " in str(caught[0].message)


def test_texts_too_few_for_the_examples_overall_is_twice_the_examples():
    """``small_data``'s rule: the texts are too few for the largest few-shot
    count when its examples would take more than half of them, n < 2 x count
    x classes. 16 texts in 2 classes with few_shot=4 are not, 15 are; 64
    texts of 59 and 5 are not (the search scores them, issue 54), however
    short the rarer class; 16 texts in 6 classes are; no examples, never."""
    assert not too_small_for_examples(16, 2, [0, 4])
    assert too_small_for_examples(15, 2, [0, 4])
    y = np.array(["ham"] * 59 + ["spam"] * 5)
    assert not too_small_for_examples(len(y), len(np.unique(y)), (0, 4))
    assert usable_few_shots((0, 4), y)[0] == [0, 3]  # lowered, yet not too small: no fallback
    assert too_small_for_examples(16, 6, (0, 4)) and too_small_for_examples(9, 2, [0, 3])
    assert not too_small_for_examples(1, 2, [0]) and not too_small_for_examples(1, 2, [])
    # the search takes the fallback where the largest count was lowered and the texts are too small (no engine)
    readers = [{"prompt": SST2_TEMPLATE, "few_shot": 0}]
    assert fallback_candidate(readers, (0, 4), [0, 3], y, "fallback") is None  # 59/5: lowered, but scored
    nine = np.array(["negative"] * 6 + ["positive"] * 3)
    fallback = fallback_candidate(readers, (0, 4), [0, 1], nine, "fallback")
    assert fallback.params == {"prompt": SST2_TEMPLATE, "few_shot": 4, "calibration": "batch", "calibration_prior": "y"}
    assert fallback_candidate(readers, (0, 4), [0, 4], np.array(["a"] * 8 + ["b"] * 7), "fallback") is None
    assert fallback_candidate(readers, (0, 4), [0, 1], nine, "search") is None
    with pytest.warns(UserWarning, match=r"9 texts are fewer than 2 x few_shot=4 x 2 classes, so best_estimator_ is "
                                         r"the fallback \(small_data='fallback'\)"):
        warn_left_out(nine, ["few_shot=4 lowered to 1"], fallback=4)


class _Reader(BaseEstimator):
    """A stand-in reader whose few-shot block overflows from ``too_long`` examples per class."""

    def __init__(self, prompt=None, few_shot=0, calibration=None, calibration_prior="y", too_long=4):
        self.prompt, self.few_shot, self.calibration = prompt, few_shot, calibration
        self.calibration_prior, self.too_long = calibration_prior, too_long

    def fit(self, X, y):
        if self.few_shot >= self.too_long:
            raise FewShotTooLongError("LLMLabelClassifier", self.few_shot, 8000 + self.few_shot, 8192)
        return self


def test_readers_and_a_fallback_whose_examples_overflow_are_left_out_with_one_warning():
    """Two prompts x few_shot (0, 4), with the small_data fallback (few_shot=8):
    the 4-shot readers and the fallback are left out, named in one warning
    with their tokens and the context; their candidates go, the stacked one
    stays over the zero-shot readers. With none that fits, the first
    reader's own error; the error pickles (a joblib worker's comes back)."""
    readers = [{"prompt": p, "few_shot": k} for p in ("a", "b") for k in (0, 4)]
    found = [Candidate(r, {**params, "calibration": None}) for r, params in enumerate(readers)]
    found.append(Candidate(None, {"stack": True, "class_weight": None}))
    fallback = Candidate(0, {"prompt": "a", "few_shot": 8, "calibration": "batch", "calibration_prior": "y"})
    with pytest.warns(UserWarning) as caught:
        kept, kept_found, fitted, left_fallback, left = fitted_plans(_Reader(), readers, found, fallback, ["t"] * 4,
                                                                     np.array(["x"] * 4), "LLMLabelClassifierCV")
    assert len(caught) == 1
    said = str(caught[0].message)
    assert said.startswith("LLMLabelClassifierCV: the candidates of 3 few-shot prompt(s) are left out, unread")
    assert "of the model's 8192 tokens" in said and "(few_shot=4: 8004 tokens)" in said
    assert "the small_data fallback {'prompt': 'a', 'few_shot': 8, 'calibration': 'batch'" in said
    assert kept == [readers[0], readers[2]] and left == [readers[1], readers[3]] and left_fallback is None
    assert [c.reader for c in kept_found] == [0, 1, None] and len(fitted) == 2
    assert fitted_plans(_Reader(too_long=9), readers, found, fallback, [], np.array([]), "X")[3] is fallback
    with pytest.raises(FewShotTooLongError, match="few_shot=0 examples per class take 8000 tokens") as raised:
        fitted_plans(_Reader(too_long=0), readers, found, None, [], np.array([]), "X")
    again = pickle.loads(pickle.dumps(raised.value))
    assert str(again) == str(raised.value) and again.n_tokens == 8000 and isinstance(again, ValueError)


def test_one_se_takes_the_simplest_within_one_standard_error_and_best_the_highest():
    means = np.array([-0.50, -0.45, -0.40, -0.38, -0.42, np.nan])
    sems = np.array([0.01, 1.00, 0.02, 0.05, 0.02, 0.0])
    levels = np.array([0, 1, 2, 3, 2, 0])
    # within -0.38 - 0.05: the candidates 2 (-0.40), 3 (-0.38) and 4 (-0.42); the simplest level is
    # few-shot (2), and the higher of its two; candidate 1's wide SEM does not count, the NaN is never taken
    assert choose(means, sems, levels, "one_se") == 2
    assert choose(means, sems, levels, "best") == 3
    assert choose(means, np.where(np.arange(6) == 3, 0.2, sems), levels, "one_se") == 0  # SEM 0.2 reaches -0.50
    assert choose(means, sems, np.zeros(6, dtype=int), "one_se") == 3  # one level: the highest mean
    with pytest.raises(ValueError, match="every mean is NaN"):
        choose(np.array([np.nan, np.nan]), np.zeros(2), np.zeros(2, dtype=int), "best")
    with pytest.raises(ValueError, match=r"rule must be one of \['best', 'guarded', 'one_se'\]"):
        choose(means, sems, levels, "lowest")


def test_guarded_keeps_the_best_only_where_it_beats_the_simple_reading_by_its_error():
    """Candidate 0 is the simple reading (complexity 0). Candidate 2 has the
    highest mean; its paired gain over 0 is 0.05 per split, with no spread:
    kept. Where its gain is as large on average but swings (+0.5, -0.4,
    +0.05), its standard error exceeds it: the simple reading is taken."""
    levels = np.array([0, 1, 2])
    steady = np.array([[-0.60, -0.50, -0.70], [-0.62, -0.55, -0.70], [-0.55, -0.45, -0.65]])
    assert choose(steady.mean(axis=1), np.zeros(3), levels, "guarded", steady, 3) == 2
    swinging = np.array([[-0.60, -0.50, -0.70], [-0.62, -0.55, -0.72], [-0.10, -0.90, -0.65]])
    gain = swinging[2] - swinging[0]
    assert gain.mean() > 0 and gain.mean() <= gain.std() / np.sqrt(3)
    assert choose(swinging.mean(axis=1), np.zeros(3), levels, "guarded", swinging, 3) == 0
    assert choose(swinging.mean(axis=1), np.zeros(3), levels, "best", swinging, 3) == 2
    # no simple reading among the candidates, or no split scores: as "best"
    assert choose(swinging.mean(axis=1), np.zeros(3), np.array([1, 1, 2]), "guarded", swinging, 3) == 2
    assert choose(swinging.mean(axis=1), np.zeros(3), levels, "guarded") == 2


def test_the_nested_choice_never_uses_the_split_it_is_scored_on():
    """Three folds, two candidates. Candidate 1 is lucky on split 0 only
    (outer score 10): a choice that saw split 0 would take it there. The
    nested choice for split 0 reads only the inner scores of models fitted
    without split 0 (pairs (0, 1) and (0, 2)), where candidate 0 wins; for
    splits 1 and 2 the inner scores favour candidate 1. Inner splits train on
    the rows outside both folds, and each repeat chooses only from itself."""
    folds = [(np.array([2, 3, 4, 5]), np.array([0, 1])), (np.array([0, 1, 4, 5]), np.array([2, 3])),
             (np.array([0, 1, 2, 3]), np.array([4, 5]))]
    pairs = pair_splits(folds, 3)
    assert [(s, j) for s, j, _, _ in pairs] == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    for s, j, train, test in pairs:
        np.testing.assert_array_equal(test, folds[j][1])
        assert not set(train) & (set(folds[s][1]) | set(folds[j][1])) and len(train) == 2
    outer = np.array([[0.0, 0.0, 0.0], [10.0, -1.0, -1.0]])
    inner = np.full((2, 3, 3), np.nan)
    inner[0] = [[np.nan, 0.0, 0.0], [-1.0, np.nan, -1.0], [-1.0, -1.0, np.nan]]
    inner[1] = [[np.nan, -1.0, -1.0], [0.0, np.nan, 0.0], [0.0, 0.0, np.nan]]
    np.testing.assert_array_equal(nested_choices(outer, inner, np.array([0, 0]), "best", 3), [0, 1, 1])
    # a candidate with no outer score on a split is never its choice; none left: -1
    gone = outer.copy()
    gone[1, 1] = np.nan
    np.testing.assert_array_equal(nested_choices(gone, inner, np.array([0, 0]), "best", 3), [0, 0, 1])
    gone[0, 1] = np.nan
    assert nested_choices(gone, inner, np.array([0, 0]), "best", 3)[1] == -1
    with pytest.raises(ValueError, match="must be at least 2 and divide the 3 splits"):
        pair_splits(folds, 2)


def test_the_bootstrap_error_follows_the_texts_losses():
    """One split's log-loss: the bootstrap standard error over texts is the
    per-text losses' standard deviation over sqrt(n), to a few percent, and
    grows when two texts carry a large loss (a tail 5 fold means miss)."""
    rng = np.random.default_rng(1)
    n = 200
    log_proba = np.log(softmax(rng.normal(size=(n, 2)), axis=1))
    y_index = rng.integers(0, 2, n)
    folds = [(np.arange(0), np.arange(n))]

    def loss(lp: np.ndarray, y: np.ndarray) -> float:
        return float(-lp[np.arange(len(y)), y].mean())

    per_text = -log_proba[np.arange(n), y_index]
    sem = bootstrap_sem([log_proba], folds, y_index, loss, 0, draws=1000)
    assert sem == pytest.approx(per_text.std() / np.sqrt(n), rel=0.08)
    tail = log_proba.copy()
    tail[:2, y_index[:2]] = -12.0
    assert bootstrap_sem([tail], folds, y_index, loss, 0, draws=1000) > 2 * sem
    assert np.isnan(bootstrap_sem([None], folds, y_index, loss, 0))


def test_the_temperature_is_fitted_then_shrunk_by_the_texts_it_saw():
    """Labels drawn from softmax(logits / 2) ask for T near 2 on many rows;
    the applied T keeps m / (m + 64) of log T: none of it with no rows,
    half at 64, nearly all at 6400, and never crosses 1."""
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=3.0, size=(4000, 3))
    log_proba = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    y_index = np.array([rng.choice(3, p=row) for row in softmax(logits / 2.0, axis=1)])
    fitted = fit_temperature(log_proba, y_index)
    assert 1.8 < fitted < 2.2
    assert shrunk(fitted, 0) == 1.0 and fit_temperature(log_proba[:0], y_index[:0]) == 1.0
    assert shrunk(fitted, SHRINK_TEXTS) == pytest.approx(np.sqrt(fitted))
    steps = [shrunk(fitted, m) for m in (8, 56, 120, 6400)]
    assert all(1.0 < a < b < fitted for a, b in zip(steps, steps[1:]))
    assert 1 / fitted < shrunk(1 / fitted, 56) < 1.0  # a sharpening T is shrunk toward 1 too

# --- calibrations under class imbalance ---------------------------------------


@pytest.fixture(scope="module")
def imbalanced(sst2_all):
    """40 negative and 8 positive SST-2 reviews (17% positive), in dataset order."""
    X, y = sst2_all
    neg = np.flatnonzero(y == "negative")[:40]
    pos = np.flatnonzero(y == "positive")[:8]
    rows = np.sort(np.concatenate([neg, pos]))
    return [X[i] for i in rows], y[rows]


def test_batch_calibration_aims_at_the_training_prior(engine, imbalanced, reads_once):
    """With the prior from y, the calibrated batch's mean probability lands
    near the (smoothed) class frequency (debiasing renormalises each text, so
    not exactly on it); with a uniform prior near 1/2 each."""
    X, y = imbalanced
    clf = make_classifier(calibration="batch", low_mass="ignore").fit(X, y)
    prior = np.exp(class_prior(np.searchsorted(clf.classes_, y), 2))
    np.testing.assert_allclose(clf.class_prior_, prior)
    np.testing.assert_allclose(clf.class_prior_, [41 / 50, 9 / 50])
    with_prior = clf.predict_proba(X).mean(axis=0)
    uniform = make_classifier(calibration="batch", calibration_prior="uniform", low_mass="ignore").fit(X, y)
    balanced = uniform.predict_proba(X).mean(axis=0)
    np.testing.assert_allclose(with_prior, prior, atol=0.06)
    np.testing.assert_allclose(balanced, 0.5, atol=0.06)
    assert (clf.predict(X) == "negative").sum() > (uniform.predict(X) == "negative").sum()


def test_contextual_bias_includes_the_prior(engine, imbalanced):
    X, y = imbalanced
    with_prior = make_classifier(calibration="contextual", low_mass="ignore").fit(X, y)
    uniform = make_classifier(calibration="contextual", calibration_prior="uniform", low_mass="ignore").fit(X, y)
    np.testing.assert_allclose(
        with_prior.calibration_bias_, uniform.calibration_bias_ + np.log(0.5) - np.log(with_prior.class_prior_),
        atol=1e-12,
    )


def test_balanced_class_weight_keeps_the_rare_class(engine, imbalanced, reads_once):
    """The learned calibration with balanced weights gives the rare class more
    probability than unweighted, and its regularisation was chosen."""
    X, y = imbalanced
    plain = make_classifier(calibration="learned", random_state=0, low_mass="ignore").fit(X, y)
    balanced = make_classifier(
        calibration="learned", class_weight="balanced", random_state=0, low_mass="ignore"
    ).fit(X, y)
    assert plain.calibrator_.C in (0.01, 0.1, 1.0, 10.0, 100.0)
    rare = list(plain.classes_).index("positive")
    assert balanced.predict_proba(X)[:, rare].mean() > plain.predict_proba(X)[:, rare].mean()
    weighted = make_classifier(
        calibration="learned", class_weight={"positive": 4.0}, random_state=0, low_mass="ignore"
    ).fit(X, y)
    assert weighted.calibrator_.class_weight == {0: 1.0, 1: 4.0}
    with pytest.raises(ValueError, match="class_weight names 'neutral', which is not a class"):
        make_classifier(calibration="learned", class_weight={"neutral": 2.0}).fit(X, y)
    with pytest.raises(ValueError, match="class_weight='heavy' must be None, 'balanced' or a mapping"):
        make_classifier(class_weight="heavy").fit(X, y)


# --- against scikit-learn's own search and nesting -----------------------------


def test_cv_results_equal_a_plain_grid_search_at_a_fraction_of_the_reads(engine, sst2, monkeypatch, recorded):
    """GridSearchCV over the same candidates, folds and scorer fits and
    predicts every candidate on every fold, reading each time; the selection
    gets the same scores from one read per text. The engine reads are counted
    by a pass-through wrapper around the read (it changes no result)."""
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    import llm_label_clf.reading.plan as plan_module

    X, y = sst2[0][:24], sst2[1][:24]
    folds = StratifiedKFold(3)
    base = make_classifier(random_state=0, low_mass="ignore")
    with ReadCache(parent=recorded).active():  # the reads ``selected`` made (GridSearchCV's below: the engine's)
        ours = LLMLabelClassifierCV(
            base, prompts=[SST2_TEMPLATE], few_shots=[0], calibrations=[None, "contextual", "batch", "learned"],
            class_weights=[None], stack=False, cv=folds,
        ).fit(X, y)
    grid = [{name: [value] for name, value in params.items()} for params in ours.cv_results_["params"]]
    counted: list[int] = []
    read = plan_module.read_sequence_logprobs

    async def counting(engine, prompts, trie, **kwargs):
        counted.append(len(prompts) * len(trie.reads))
        return await read(engine, prompts, trie, **kwargs)

    monkeypatch.setattr(plan_module, "read_sequence_logprobs", counting)
    search = GridSearchCV(base, grid, cv=folds, scoring="neg_log_loss", refit=False).fit(X, y)
    assert len(search.cv_results_["params"]) == len(ours.cv_results_["params"]) == 4
    for key in ["mean_test_score", "split0_test_score", "split1_test_score", "split2_test_score"]:
        np.testing.assert_allclose(ours.cv_results_[key], search.cv_results_[key], atol=1e-5, err_msg=key)
    np.testing.assert_array_equal(ours.cv_results_["rank_test_score"], search.cv_results_["rank_test_score"])
    assert ours.fit_cost_["engine_reads"] == len(X) + 3
    assert sum(counted) >= 4 * ours.fit_cost_["engine_reads"]


def test_nested_in_cross_val_score_inside_a_pipeline(engine, sst2, recorded):
    """An outer cross_val_score over a Pipeline holding the selection scores
    each outer fold as fitting the selection on that fold would."""
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    X, y = np.array(sst2[0][:24], dtype=object), sst2[1][:24]
    selection = LLMLabelClassifierCV(
        make_classifier(random_state=0, low_mass="ignore"), prompts=[SST2_TEMPLATE], few_shots=[0],
        calibrations=[None, "batch"], stack=False, cv=3,
    )
    strip = FunctionTransformer(lambda texts: [str(t).strip() for t in texts])
    outer = StratifiedKFold(2)
    with ReadCache(parent=recorded).active():  # both sides' reads: those ``selected`` made (strip changes no text)
        scores = cross_val_score(make_pipeline(strip, selection), X, y, cv=outer, scoring="accuracy")
        expected = [
            clone(selection).fit([str(t).strip() for t in X[train]], y[train]).score(
                [str(t).strip() for t in X[test]], y[test]
            )
            for train, test in outer.split(X, y)
        ]
    np.testing.assert_allclose(scores, expected)
    assert 0.0 <= scores.min() and scores.max() <= 1.0

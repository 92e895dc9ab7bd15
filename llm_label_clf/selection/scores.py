"""Scoring ``LLMLabelClassifierCV``'s candidates from reads already made.

Every candidate's held-out probabilities on a fold are computed from its
reader's reads of the training texts, by the same functions the fitted
estimator uses (``calibration``): nothing here reads. The scores come from
scikit-learn's scorers, run on a stand-in estimator that returns those
probabilities, so any ``scoring`` a ``GridSearchCV`` takes works here."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone

from ..exceptions import warn_user
from ..fitting.calibration import (
    LearnedCalibrator,
    class_prior,
    fit_calibration,
    index_weights,
    learned_seed,
)
from ..reading.plan import ClassReads
from .candidates import Candidate

__all__ = [
    "FoldProbabilities",
    "ReaderReads",
    "StackingHead",
    "fold_model",
    "score_candidates",
    "score_fold",
]


@dataclass(frozen=True)
class ReaderReads:
    """One reader's reads of every training text (``reads``), each under a
    prompt that does not show it (``reads.read_reader``), and of the
    content-free inputs (``content_free``, log-probabilities)."""

    reads: ClassReads
    content_free: np.ndarray


class StackingHead(ClassifierMixin, BaseEstimator):
    """The stacked candidate's model: the learned calibration's regression
    (standardised features, ``C`` chosen by cross-fitted log-loss, averaged
    over the folds) on every reader's label logprobs side by side."""

    def __init__(self, class_weight: Any = None, random_state: int | None = None) -> None:
        self.class_weight = class_weight
        self.random_state = random_state

    def fit(self, X: np.ndarray, y: np.ndarray) -> StackingHead:
        """Fits on every row of ``X``: the readers' reads of the training
        texts, each under a prompt that does not show it."""
        self.classes_ = np.unique(y)
        y_index = np.searchsorted(self.classes_, np.asarray(y))
        weights = index_weights(self.class_weight, self.classes_.tolist())
        self.calibrator_ = LearnedCalibrator.fit(
            np.asarray(X, dtype=np.float64), y_index, len(self.classes_),
            random_state=self.random_state, class_weight=weights,
        )
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return np.exp(self.calibrator_.log_proba(np.asarray(X, dtype=np.float64), len(self.classes_)))

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


def fold_model(
    candidate: Candidate,
    readers: Sequence[ReaderReads],
    y_index: np.ndarray,
    classes: np.ndarray,
    train: np.ndarray,
    random_state: Any,
) -> Callable[[np.ndarray], np.ndarray]:
    """``candidate`` fitted on the ``train`` rows' reads and labels, as a
    function of test rows (one batch: batch calibration debiases by its
    mean) to their log-probabilities: as ``fit`` on those rows then
    ``predict_log_proba`` would give them, from the reads alone (the same
    ``fit_calibration``); ``random_state`` is the estimator's."""
    n_classes = len(classes)
    if candidate.reader is None:
        features = np.hstack([r.reads.class_logprobs for r in readers])
        head = StackingHead(candidate.params["class_weight"], learned_seed(random_state))
        head.fit(features[train], classes[y_index[train]])
        return lambda test: np.log(np.clip(head.predict_proba(features[np.asarray(test)]), 1e-300, None))
    reader = readers[candidate.reader]
    params = candidate.params
    log_proba = reader.reads.log_proba()
    calibration = fit_calibration(
        params["calibration"],
        lambda rows: log_proba[rows],
        lambda: reader.content_free,
        np.asarray(train),
        y_index,
        class_prior(y_index[train], n_classes, params.get("calibration_prior", "y")),
        class_weight=params.get("class_weight"),
        classes=classes.tolist(),
        random_state=random_state,
    )
    return lambda test: calibration.apply(log_proba[np.asarray(test)])


class FoldProbabilities(ClassifierMixin, BaseEstimator):
    """A stand-in fitted classifier for scikit-learn's scorers: its "texts"
    are row numbers, its probabilities those computed for the rows."""

    def __init__(self, classes: np.ndarray, proba: np.ndarray) -> None:
        self.classes = classes
        self.proba = proba

    def fit(self, X: Any, y: Any = None) -> FoldProbabilities:
        self.classes_ = np.asarray(self.classes)
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        return self.proba[np.asarray(X, dtype=np.int64).ravel()]

    def predict_log_proba(self, X: Any) -> np.ndarray:
        return np.log(np.clip(self.predict_proba(X), 1e-300, None))

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


def score_fold(
    scorer: Callable[..., Any], log_proba: np.ndarray, classes: np.ndarray, y_test: np.ndarray
) -> dict[str, float]:
    """The scores of one candidate on one fold, by scorer name ("score" for a
    single scorer)."""
    stand_in = FoldProbabilities(classes, np.exp(log_proba)).fit(None)
    rows = np.arange(len(y_test)).reshape(-1, 1)
    result = scorer(stand_in, rows, y_test)
    if isinstance(result, dict):
        return {name: float(value) for name, value in result.items()}
    return {"score": float(result)}


def _fold_scorer(
    candidate: Candidate, reads: Sequence[ReaderReads], y_index: np.ndarray, classes: np.ndarray, random_state: Any
) -> Callable[[np.ndarray, np.ndarray, Any], tuple[np.ndarray, dict[str, float]]]:
    """``(train, test, scorer) -> (log_proba, scores)`` for ``candidate``,
    fitting once per distinct ``train`` (inner splits (s, j) and (j, s) train
    on the same rows); raises the fit's ValueError each time it is asked."""
    models: dict[bytes, Any] = {}

    def scored(train: np.ndarray, test: np.ndarray, scorer: Any) -> tuple[np.ndarray, dict[str, float]]:
        key = train.tobytes()
        if key not in models:
            try:
                models[key] = fold_model(candidate, reads, y_index, classes, train, clone(random_state, safe=False))
            except ValueError as exc:
                models[key] = exc
        if isinstance(models[key], ValueError):
            raise models[key]
        log_proba = models[key](test)
        return log_proba, score_fold(scorer, log_proba, classes, classes[y_index[test]])

    return scored


def score_candidates(
    found: Iterable[Candidate],
    reads: Sequence[ReaderReads],
    y_index: np.ndarray,
    classes: np.ndarray,
    folds: Sequence[tuple[np.ndarray, np.ndarray]],
    pairs: Sequence[tuple[int, int, np.ndarray, np.ndarray]],
    scorers: tuple[Any, Any],
    random_state: Any,
) -> tuple[list[list[dict[str, float] | None]], list[dict[tuple[int, int], dict[str, float] | None]],
           list[list[np.ndarray | None]], list[str]]:
    """Every candidate's scores on every split (by ``scorers[0]``), on every
    inner split ``(s, j)`` of ``pairs`` (by ``scorers[1]``, the metric that
    chooses), its held-out log-probabilities per split, and what could not be
    fitted. A candidate that cannot be fitted on a fold scores None there
    (``GridSearchCV``'s ``error_score=nan``), warned once; ValueError when no
    candidate could be scored on any fold. Each fold fits from a clone of
    ``random_state``, as the refit draws."""
    per_split: list[list[dict[str, float] | None]] = []
    inner: list[dict[tuple[int, int], dict[str, float] | None]] = []
    held_out: list[list[np.ndarray | None]] = []
    failures: list[str] = []
    for c in found:
        scored = _fold_scorer(c, reads, y_index, classes, random_state)
        scores: list[dict[str, float] | None] = []
        held_out.append([])
        for k, (train, test) in enumerate(folds):
            try:
                log_proba, score = scored(train, test, scorers[0])
            except ValueError as exc:
                if not any(s is None for s in scores):
                    failures.append(f"candidate {c.params} on fold {k}: {exc}")
                scores.append(None)
                held_out[-1].append(None)
                continue
            held_out[-1].append(log_proba)
            scores.append(score)
        per_split.append(scores)
        inner.append({})
        for s, j, train, test in pairs:
            try:  # as on an outer fold: None there, and this candidate is not chosen for s
                inner[-1][s, j] = scored(train, test, scorers[1])[1]
            except ValueError:
                inner[-1][s, j] = None
    if all(s is None for scores in per_split for s in scores):
        raise ValueError("LLMLabelClassifierCV: no candidate could be scored on any fold; " + "; ".join(failures))
    if failures:
        warn_user(
            f"LLMLabelClassifierCV: {len(failures)} candidate(s) could not be fitted on some folds; their score "
            f"there is NaN and they rank last (as GridSearchCV's error_score=nan). First: {failures[0]}",
            UserWarning,
        )
    return per_split, inner, held_out, failures

"""``LLMLabelClassifierCV``: lets the labels choose the prompt, the few-shot
count and the calibration, as ``LogisticRegressionCV`` lets them choose ``C``.

``fit`` reads every training text once per distinct way of reading (a
*reader*: prompt, few-shot count, label mode, labels), then scores every
candidate on stratified folds from those reads alone (calibrations, length
norms, class weights, the stacked model are arithmetic on the reads) and
refits the best, again from the same reads (``ReadCache``). Few-shot examples
are drawn once from the whole training set, as the refit draws them; those
rows are in every fold's training part and never scored."""

from __future__ import annotations

import numbers
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import rankdata
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.metrics import check_scoring, log_loss, make_scorer
from sklearn.model_selection import check_cv
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._candidates import Candidate, candidates
from ._cv_scores import ReaderReads, StackingHead, fold_log_proba, score_fold
from ._inputs import as_records
from ._params import check_params
from ._sklearn import drop_fitted, text_classifier_tags
from ._targets import as_target
from .calibration import CALIBRATIONS, content_free_records
from .classifier import LLMLabelClassifier
from .reading.cache import ReadCache
from .reading.driver import read_plans, reads_per_text
from .reading.prompts import LABELS_FIELD, OPTIONS_FIELD

__all__ = ["LLMLabelClassifierCV"]


class LLMLabelClassifierCV(ClassifierMixin, BaseEstimator):
    """``LLMLabelClassifier`` with its way of reading and its calibration
    chosen by cross-validation on the training data.

    As ``LogisticRegressionCV`` chooses ``C``: every candidate (prompt x
    few-shot count x calibration x ..., and a stacked logistic regression) is
    scored on stratified folds of the labelled texts, and the best is refitted
    on all of them.

    Each candidate list below is searched as a grid (as ``GridSearchCV``'s
    ``param_grid``); parameters not searched come from ``estimator``. Cheap by
    construction: each distinct prompt is read once per training text (plus
    three content-free inputs), and every calibration, length norm, class
    weight and fold is computed from those reads; few-shot prompts share their
    prefix through vLLM's prefix cache. ``fit_cost_`` reports what fit read.

    Parameters
    ----------
    estimator : LLMLabelClassifier or None, default=None
        The parameters not searched (model, engine, labels, ...). None: the
        default ``LLMLabelClassifier()``.
    prompts : list or None, default=None
        Prompt candidates: a template string, None (the default template), or
        a dict with ``prompt``, ``instructions`` and ``chat``. None tries the
        default template, one naming the labels in an instruction line
        (``"Classify the text as {labels}.\\nText: {text}\\nLabel:"``) and that
        one as a chat turn.
    few_shots : list of int, default=(0, 4)
        Few-shot counts (examples per class). The examples are drawn from the
        training data as ``few_shot`` draws them and are never scored. A
        count that would leave fewer than 4 texts, or fewer than 2 classes
        with 2 texts, to score by is lowered to the largest count that leaves enough (or left out
        when none does), with a warning.
    calibrations : list, default=(None, "contextual", "batch", "learned")
        The calibrations to try (``LLMLabelClassifier``'s ``calibration``).
    calibration_priors : list, default=("y",)
        For "contextual" and "batch": the class priors to try ("y", "uniform").
    class_weights : list, default=(None, "balanced")
        For "learned" and the stacked candidate.
    label_modes, length_norms, label_sets : list or None, default=None
        Label modes, length norms and ``labels`` values (mappings with
        aliases, say) to try; None keeps the estimator's own.
    stack : bool, default=True
        Also try a logistic regression over every prompt's label logprobs
        (``transform`` features side by side); if it wins, ``best_estimator_``
        is a pipeline of a ``FeatureUnion`` of the readers and that model.
    scoring : str, callable, list, dict or None, default="neg_log_loss"
        As ``GridSearchCV``'s. Several metrics: ``refit`` names the one that
        chooses; ``cv_results_`` holds them all. "neg_log_loss" is told every
        class, so a fold whose held-out part lacks a rare class is still
        scored (``GridSearchCV`` fails such a fold).
    cv : int, cross-validation generator or iterable, default=5
        Folds of the training texts not shown as few-shot examples
        (stratified for an int). An int larger than the smallest class's
        count is lowered to that count (at least 2), with a warning, so a
        handful of labelled texts still cross-validates.
    refit : bool or str, default=True
        Refit the best candidate on all training texts (from the same reads).

    Attributes
    ----------
    cv_results_ : dict of numpy arrays
        ``params``, ``param_<name>``, ``split<k>_test_<score>``,
        ``mean_test_<score>``, ``std_test_<score>``, ``rank_test_<score>``
        (``<score>`` is "score" for one scorer); ``pandas.DataFrame(cv_results_)``
        reads it as ``GridSearchCV``'s.
    best_index_ : int
        The best candidate's row in ``cv_results_``.
    best_params_ : dict
        The best candidate's parameters (estimator parameters, or
        ``{"stack": True, "class_weight": ...}`` for the stacked candidate).
    best_score_ : float
        The best candidate's mean cross-validated score (negated log-loss by
        default).
    best_estimator_ : LLMLabelClassifier or Pipeline
        The best candidate refitted on every training text (with ``refit``):
        what ``predict_proba`` and ``predict`` use.
    readers_ : list of dict
        The distinct ways of reading tried, as estimator parameters.
    example_rows_ : list of int
        Training rows some reader shows as few-shot examples: in every fold's
        training part, never scored.
    classes_ : ndarray
        Class labels; the column order of ``predict_proba``.
    n_splits_ : int
        The number of folds used.
    scorer_ : callable or dict
        The scorer(s) built from ``scoring``.
    fit_cost_ : dict
        ``engine_reads`` made by fit (refit included), ``texts``, their
        ratio ``reads_per_text``, and ``zero_shot_passes``: engine reads over
        those of one zero-shot read of the training texts.
    refit_time_ : float
        Seconds the refit took.

    See Also
    --------
    LLMLabelClassifier : the estimator whose parameters are searched.

    Examples
    --------
    The candidates are checked at ``fit``, before any engine starts:

    >>> from llm_label_clf import LLMLabelClassifier, LLMLabelClassifierCV
    >>> search = LLMLabelClassifierCV(LLMLabelClassifier(random_state=0), few_shots=(0, 4), cv=3)
    >>> search.get_params()["calibrations"]
    (None, 'contextual', 'batch', 'learned')

    Fitting reads each training text once per way of reading:

    >>> search.fit(texts, labels)  # doctest: +SKIP
    >>> search.best_params_  # doctest: +SKIP
    {'prompt': 'Question: {text}\\nAnswer type:', 'few_shot': 4, 'calibration': 'learned', ...}
    >>> pd.DataFrame(search.cv_results_).sort_values("rank_test_score")  # doctest: +SKIP
    >>> search.fit_cost_  # doctest: +SKIP
    {'engine_reads': 204, 'texts': 48, 'reads_per_text': 4.25, 'zero_shot_passes': 4.25}
    """

    def __init__(
        self,
        estimator: LLMLabelClassifier | None = None,
        *,
        prompts: Sequence[Any] | None = None,
        few_shots: Sequence[int] = (0, 4),
        calibrations: Sequence[str | None] = CALIBRATIONS,
        calibration_priors: Sequence[str] = ("y",),
        class_weights: Sequence[Any] = (None, "balanced"),
        label_modes: Sequence[str] | None = None,
        length_norms: Sequence[str | None] | None = None,
        label_sets: Sequence[Any] | None = None,
        stack: bool = True,
        scoring: Any = "neg_log_loss",
        cv: Any = 5,
        refit: bool | str = True,
    ) -> None:
        self.estimator = estimator
        self.prompts = prompts
        self.few_shots = few_shots
        self.calibrations = calibrations
        self.calibration_priors = calibration_priors
        self.class_weights = class_weights
        self.label_modes = label_modes
        self.length_norms = length_norms
        self.label_sets = label_sets
        self.stack = stack
        self.scoring = scoring
        self.cv = cv
        self.refit = refit

    # ------------------------------------------------------------------ fit

    def _base(self) -> LLMLabelClassifier:
        if self.estimator is None:
            return LLMLabelClassifier()
        if not isinstance(self.estimator, LLMLabelClassifier):
            raise ValueError(
                f"{type(self).__name__}: estimator must be an LLMLabelClassifier; got {type(self.estimator).__name__}"
            )
        return clone(self.estimator)

    def fit(self, X: Any, y: Any) -> LLMLabelClassifierCV:
        """Reads the training texts once per reader, scores every candidate, refits the best.

        Every candidate is scored on the folds from those reads, and the refit
        reads nothing new.

        Parameters
        ----------
        X : sequence of str, pandas Series or DataFrame
            The labelled texts.
        y : array-like of shape (n_texts,)
            Their labels (one output; for several outputs use one
            ``LLMLabelClassifierCV`` per output, or ``GridSearchCV``).

        Returns
        -------
        self : LLMLabelClassifierCV
            The fitted search.

        Raises
        ------
        ValueError
            ``y`` is missing or has several outputs, ``estimator`` is not an
            ``LLMLabelClassifier``, or a candidate has a bad parameter (naming
            the candidate).
        """
        name = type(self).__name__
        base = self._base()
        records = as_records(X)
        if y is None:
            raise ValueError(f"{name}: cross-validation chooses by the labels: fit needs y")
        target = as_target(y, len(records))
        if target.kind != "single":
            raise ValueError(
                f"{name} chooses for one output; this y is {target.kind}: use GridSearchCV over an "
                "LLMLabelClassifier, or one LLMLabelClassifierCV per output"
            )
        drop_fitted(self)  # a refit starts from nothing, whatever the last fit set
        y_values = np.asarray(target.columns[0])
        readers, found = candidates(
            base.get_params(),
            prompts=self.prompts,
            few_shots=_usable_few_shots(self.few_shots, y_values),
            label_modes=self.label_modes,
            length_norms=self.length_norms,
            label_sets=self.label_sets,
            calibrations=self.calibrations,
            calibration_priors=self.calibration_priors,
            class_weights=self.class_weights,
            stack=self.stack,
        )
        for c in found:  # every candidate checked before the engine is asked for
            if c.reader is not None:
                try:
                    check_params(clone(base).set_params(**c.params))
                except ValueError as exc:
                    raise ValueError(f"{name}: candidate {c.params}: {exc}") from None
        self.scorer_ = _scorer(base, self.scoring, np.unique(y_values))
        cache = ReadCache()
        with cache.active():
            fitted, reads = self._read_all(base, readers, X, records, y_values)
            classes = fitted[0].classes_
            y_index = np.searchsorted(classes, y_values)
            shown = sorted({row for r in reads for row in r.shown})
            self.readers_ = readers
            self.example_rows_ = shown
            self._score(found, reads, classes, y_index, shown, records)
            if self.refit:
                began = time.perf_counter()
                self.best_estimator_ = self._refit(base, readers, found[self.best_index_], X, y_values)
                self.refit_time_ = time.perf_counter() - began
        zero_shot = len(records) * reads_per_text(fitted[0].plans_[0])
        self.fit_cost_ = {
            "engine_reads": cache.reads,
            "texts": len(records),
            "reads_per_text": cache.reads / len(records),
            "zero_shot_passes": cache.reads / max(zero_shot, 1),
        }
        self.classes_ = classes
        return self

    def _read_all(
        self,
        base: LLMLabelClassifier,
        readers: list[dict[str, Any]],
        X: Any,
        records: list[dict[str, str]],
        y: np.ndarray,
    ) -> tuple[list[LLMLabelClassifier], list[ReaderReads]]:
        """Each reader fitted without calibration (a plan, no reads), then its
        reads of every training text and of the content-free inputs."""
        fitted, reads = [], []
        for params in readers:
            reader = clone(base).set_params(**params, calibration=None).fit(X, y)
            plan = reader.plans_[0]
            engine = reader._engine()
            every = read_plans([plan], records, engine, batch_size=reader.batch_size, progress=reader.progress)[0]
            fields = [f for f in plan.layout.template.fields if f not in (LABELS_FIELD, OPTIONS_FIELD)]
            free = read_plans([plan], content_free_records(fields), engine, batch_size=8, progress=False)[0]
            fitted.append(reader)
            reads.append(ReaderReads(every, free.log_proba(), tuple(reader.few_shot_rows_)))
        return fitted, reads

    def _score(
        self,
        found: list[Candidate],
        reads: list[ReaderReads],
        classes: np.ndarray,
        y_index: np.ndarray,
        shown: list[int],
        records: list[dict[str, str]],
    ) -> None:
        """Scores every candidate on the folds of the rows not shown as
        examples (each fold's training part gets the shown rows) and sets
        ``cv_results_`` and the ``best_*`` attributes."""
        pool = np.array([i for i in range(len(records)) if i not in set(shown)], dtype=np.int64)
        cv = _fold_count(self.cv, y_index[pool])
        splitter = check_cv(cv, y_index[pool], classifier=True)
        with warnings.catch_warnings():
            if cv is not self.cv:  # said already, in _fold_count's words
                warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
            folds = [
                (np.concatenate([np.array(shown, dtype=np.int64), pool[train]]), pool[test])
                for train, test in splitter.split(pool.reshape(-1, 1), y_index[pool])
            ]
        self.n_splits_ = len(folds)
        seed = self._seed()
        per_split: list[list[dict[str, float] | None]] = []
        failures: list[str] = []
        for c in found:
            scores: list[dict[str, float] | None] = []
            for k, (train, test) in enumerate(folds):
                try:
                    log_proba = fold_log_proba(c, reads, y_index, classes, train, test, seed)
                except ValueError as exc:  # GridSearchCV's error_score=nan: this candidate cannot fit this fold
                    if not any(s is None for s in scores):
                        failures.append(f"candidate {c.params} on fold {k}: {exc}")
                    scores.append(None)
                    continue
                scores.append(score_fold(self.scorer_, log_proba, classes, classes[y_index[test]]))
            per_split.append(scores)
        names = next((list(s) for scores in per_split for s in scores if s is not None), None)
        if names is None:
            raise ValueError(f"{type(self).__name__}: no candidate could be scored on any fold; " + "; ".join(failures))
        if failures:
            warnings.warn(
                f"{type(self).__name__}: {len(failures)} candidate(s) could not be fitted on some folds; their score "
                f"there is NaN and they rank last (as GridSearchCV's error_score=nan). First: {failures[0]}",
                UserWarning,
                stacklevel=3,
            )
        filled = [[s if s is not None else dict.fromkeys(names, np.nan) for s in scores] for scores in per_split]
        self.cv_results_ = _results(found, filled)
        metric = self._refit_metric(names)
        self.best_index_ = int(np.argmin(self.cv_results_[f"rank_test_{metric}"]))
        self.best_params_ = dict(found[self.best_index_].params)
        self.best_score_ = float(self.cv_results_[f"mean_test_{metric}"][self.best_index_])

    def _seed(self) -> int:
        """The learned calibration's fold seed, as the refit estimator draws it."""
        return int(check_random_state(self._base().random_state).randint(2**31 - 1))

    def _refit_metric(self, names: list[str]) -> str:
        if names == ["score"]:
            return "score"
        if not isinstance(self.refit, str) or self.refit not in names:
            raise ValueError(
                f"{type(self).__name__}: with several scorers, refit must name the one that chooses "
                f"(one of {names}); got refit={self.refit!r}"
            )
        return self.refit

    def _refit(
        self,
        base: LLMLabelClassifier,
        readers: list[dict[str, Any]],
        best: Candidate,
        X: Any,
        y: np.ndarray,
    ) -> Any:
        """The best candidate fitted on every training text; its reads come
        from the cache."""
        if best.reader is not None:
            return clone(base).set_params(**best.params).fit(X, y)
        union = FeatureUnion(
            [(f"reader_{r}", clone(base).set_params(**params, calibration=None)) for r, params in enumerate(readers)]
        )
        head = StackingHead(best.params["class_weight"], self._seed())
        return Pipeline([("features", union), ("head", head)]).fit(X, y)

    # ----------------------------------------------------------- prediction

    def _best(self) -> Any:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_

    def predict_proba(self, X: Any) -> np.ndarray:
        """The best candidate's probabilities.

        Parameters
        ----------
        X : sequence of str, pandas Series or DataFrame
            The texts.

        Returns
        -------
        ndarray of shape (n_texts, n_classes)
            Columns in ``classes_`` order; rows sum to 1.
        """
        return self._best().predict_proba(X)

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """The log of ``predict_proba`` (probabilities clipped at 1e-300).

        Parameters
        ----------
        X : sequence of str, pandas Series or DataFrame
            The texts.

        Returns
        -------
        ndarray of shape (n_texts, n_classes)
            Columns in ``classes_`` order.
        """
        return np.log(np.clip(self.predict_proba(X), 1e-300, None))

    def predict(self, X: Any) -> np.ndarray:
        """The best candidate's most probable class of each text.

        Parameters
        ----------
        X : sequence of str, pandas Series or DataFrame
            The texts.

        Returns
        -------
        ndarray of shape (n_texts,)
            Classes of ``classes_``'s dtype.
        """
        return self._best().predict(X)

    def decision_function(self, X: Any) -> np.ndarray:
        """Scores for each text: log-odds (binary) or log-probabilities.

        Parameters
        ----------
        X : sequence of str, pandas Series or DataFrame
            The texts.

        Returns
        -------
        ndarray
            Binary: the log-odds of ``classes_[1]``, shape (n_texts,); else
            the log-probabilities, shape (n_texts, n_classes).
        """
        log_proba = self.predict_log_proba(X)
        return log_proba[:, 1] - log_proba[:, 0] if log_proba.shape[1] == 2 else log_proba

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = text_classifier_tags(super().__sklearn_tags__())
        return tags


def _scorer(estimator: Any, scoring: Any, classes: np.ndarray) -> Any:
    """``check_scoring``'s scorer, with "neg_log_loss" given ``labels``: with a
    few labelled texts a rare class is missing from some held-out folds, and
    log-loss without the class list refuses such a fold."""
    log_loss_scorer = make_scorer(log_loss, greater_is_better=False, response_method="predict_proba", labels=classes)
    if isinstance(scoring, str):
        return log_loss_scorer if scoring == "neg_log_loss" else check_scoring(estimator, scoring=scoring)
    if isinstance(scoring, list | tuple | set) and all(isinstance(name, str) for name in scoring):
        scoring = {name: name for name in scoring}
    if isinstance(scoring, dict):
        scoring = {key: (log_loss_scorer if value == "neg_log_loss" else value) for key, value in scoring.items()}
    return check_scoring(estimator, scoring=scoring)


def _usable_few_shots(few_shots: Any, y: np.ndarray) -> Any:
    """``few_shots`` with each nonzero count whose examples would leave too
    little to score by (fewer than 4 texts outside the examples, or fewer than
    2 classes with 2 texts; ``few_shot`` takes at most a class's count) lowered to the
    largest count that leaves enough, or left out when none does. Raises
    ValueError when no count is left. Anything but a list of ints is passed
    on for ``candidates`` to name."""
    if isinstance(few_shots, str) or not isinstance(few_shots, Sequence) or not few_shots:
        return few_shots
    if not all(isinstance(k, numbers.Integral) for k in few_shots):
        return few_shots
    counts = np.unique(y, return_counts=True)[1]

    def scorable(k: int) -> bool:
        left = np.maximum(counts - k, 0)
        return k == 0 or (left.sum() >= 4 and np.count_nonzero(left >= 2) >= 2)

    kept: list[int] = []
    lowered: dict[int, int | None] = {}
    for k in few_shots:
        usable = next((j for j in range(int(k), 0, -1) if scorable(j)), 0) if k else 0
        if usable != k:
            lowered[int(k)] = usable or None
        if (usable or not k) and usable not in kept:
            kept.append(usable)
    if not kept:
        raise ValueError(
            f"LLMLabelClassifierCV: {len(y)} training texts in {len(counts)} classes: every few-shot count in "
            f"few_shots={list(few_shots)} leaves fewer than 4 texts, or fewer than 2 classes with 2 texts, outside "
            "the examples to score by; pass more labelled texts or include 0 in few_shots"
        )
    if lowered:
        said = ", ".join(f"few_shot={k} {'lowered to ' + str(j) if j else 'left out'}" for k, j in lowered.items())
        warnings.warn(
            f"LLMLabelClassifierCV: {said}: with {len(y)} training texts in {len(counts)} classes, more examples "
            "per class would leave fewer than 4 texts, or fewer than 2 classes with 2 texts, to score by; pass "
            "more labelled texts to try them",
            UserWarning,
            stacklevel=4,
        )
    return kept


def _fold_count(cv: Any, y_index: np.ndarray) -> Any:
    """``cv`` itself, or for an int above the smallest class's count that
    count (at least 2): stratified folds need a member of each class in each
    fold, and few labelled texts are this estimator's common case."""
    if not isinstance(cv, numbers.Integral) or isinstance(cv, bool):
        return cv
    counts = np.bincount(y_index)
    least = int(counts[counts > 0].min())
    if least >= cv:
        return cv
    lowered = max(2, least)
    alone = " (held out in one fold only)" if least < 2 else ""
    warnings.warn(
        f"LLMLabelClassifierCV: the smallest class has {least} text(s) outside the few-shot examples{alone}, "
        f"fewer than cv={cv}; using {lowered} stratified folds. Pass more labelled texts or a smaller cv.",
        UserWarning,
        stacklevel=4,
    )
    return lowered


def _results(found: list[Candidate], per_split: list[list[dict[str, float]]]) -> dict[str, Any]:
    """``cv_results_`` in ``GridSearchCV``'s layout."""
    names = sorted({k for c in found for k in c.params})
    results: dict[str, Any] = {"params": [dict(c.params) for c in found]}
    for key in names:
        column = np.ma.MaskedArray(np.empty(len(found), dtype=object), mask=True)
        for i, c in enumerate(found):
            if key in c.params:
                column[i] = c.params[key]
        results[f"param_{key}"] = column
    for metric in per_split[0][0]:
        table = np.array([[s[metric] for s in splits] for splits in per_split])
        for k in range(table.shape[1]):
            results[f"split{k}_test_{metric}"] = table[:, k]
        mean = table.mean(axis=1)
        results[f"mean_test_{metric}"] = mean
        results[f"std_test_{metric}"] = table.std(axis=1)
        # NaN (a candidate that failed on a fold) ranks last, as in GridSearchCV
        ranked = rankdata(np.where(np.isnan(mean), np.inf, -mean), method="min")
        results[f"rank_test_{metric}"] = ranked.astype(np.int32)
    return results

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

import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.model_selection import check_cv
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.utils.validation import check_is_fitted

from ..classifier import LLMLabelClassifier
from ..engines import engine_for
from ..exceptions import warn_user
from ..fitting.calibration import CALIBRATIONS, learned_seed, rows_not_shown
from ..fitting.fit import content_free_log_proba
from ..fitting.inputs import as_records
from ..fitting.params import check_params
from ..fitting.shaping import method_result
from ..fitting.sklearn_api import drop_fitted, text_classifier_tags
from ..fitting.targets import as_target
from ..reading.cache import ReadCache
from ..reading.driver import read_plans, reads_per_text
from .candidates import Candidate, candidates
from .folds import fold_count, results, scorer, usable_few_shots
from .scores import ReaderReads, StackingHead, fold_log_proba, score_fold

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
            few_shots=usable_few_shots(self.few_shots, y_values),
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
        self.scorer_ = scorer(base, self.scoring, np.unique(y_values))
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
            engine = engine_for(reader.model, reader.base_url, reader.engine_options, owner=type(self).__name__)
            every = read_plans([plan], records, engine, batch_size=reader.batch_size, progress=reader.progress)[0]
            fitted.append(reader)
            reads.append(ReaderReads(every, content_free_log_proba(plan, engine), tuple(reader.few_shot_rows_)))
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
        pool = rows_not_shown(range(len(records)), shown)
        cv = fold_count(self.cv, y_index[pool])
        splitter = check_cv(cv, y_index[pool], classifier=True)
        with warnings.catch_warnings():
            if cv is not self.cv:  # said already, in fold_count's words
                warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
            folds = [
                (np.concatenate([np.array(shown, dtype=np.int64), pool[train]]), pool[test])
                for train, test in splitter.split(pool.reshape(-1, 1), y_index[pool])
            ]
        self.n_splits_ = len(folds)
        random_state = self._base().random_state
        per_split: list[list[dict[str, float] | None]] = []
        failures: list[str] = []
        for c in found:
            scores: list[dict[str, float] | None] = []
            for k, (train, test) in enumerate(folds):
                try:
                    state = clone(random_state, safe=False)  # each fold draws as the refit would
                    log_proba = fold_log_proba(c, reads, y_index, classes, train, test, state)
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
            warn_user(
                f"{type(self).__name__}: {len(failures)} candidate(s) could not be fitted on some folds; their score "
                f"there is NaN and they rank last (as GridSearchCV's error_score=nan). First: {failures[0]}",
                UserWarning,
            )
        filled = [[s if s is not None else dict.fromkeys(names, np.nan) for s in scores] for scores in per_split]
        self.cv_results_ = results(found, filled)
        metric = self._refit_metric(names)
        self.best_index_ = int(np.argmin(self.cv_results_[f"rank_test_{metric}"]))
        self.best_params_ = dict(found[self.best_index_].params)
        self.best_score_ = float(self.cv_results_[f"mean_test_{metric}"][self.best_index_])

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
        head = StackingHead(best.params["class_weight"], learned_seed(base.random_state))
        return Pipeline([("features", union), ("head", head)]).fit(X, y)

    # ----------------------------------------------------------- prediction

    def _best(self) -> Any:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_

    def predict_proba(self, X: Any) -> np.ndarray:
        """The best candidate's probabilities, ``best_estimator_.predict_proba(X)``:
        (n_texts, n_classes), columns in ``classes_`` order, rows summing to 1."""
        return self._best().predict_proba(X)

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """The log of ``predict_proba`` (probabilities clipped at 1e-300), as
        the stacked candidate's model has no log-probabilities of its own."""
        return np.log(np.clip(self.predict_proba(X), 1e-300, None))

    def predict(self, X: Any) -> np.ndarray:
        """The best candidate's most probable class of each text, of ``classes_``'s dtype."""
        return self._best().predict(X)

    def decision_function(self, X: Any) -> np.ndarray:
        """Scores for each text, as ``LLMLabelClassifier.decision_function``
        gives them: binary, the log-odds of ``classes_[1]``, shape (n_texts,);
        else the log-probabilities, (n_texts, n_classes)."""
        return method_result("decision_function", "single", [self.predict_log_proba(X)], self.classes_)

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = text_classifier_tags(super().__sklearn_tags__())
        return tags

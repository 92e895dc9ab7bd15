"""``LLMLabelClassifierCV``: lets the labels choose the prompt, the few-shot
count and the calibration, as ``LogisticRegressionCV`` lets them choose ``C``.

``fit`` reads every training text once per distinct way of reading (a
*reader*: ``reads``), scores every candidate on folds from those reads
alone (``scores``, ``folds``), chooses by a rule (``rules``), estimates the
choice held out (``estimate``), fits a temperature (``temperature``) and
refits, again from the same reads (``ReadCache``)."""

from __future__ import annotations

import numbers
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ..classifier import LLMLabelClassifier
from ..exceptions import each_warning_once
from ..fitting.calibration import CALIBRATIONS, learned_seed
from ..fitting.inputs import as_records
from ..fitting.params import check_params
from ..fitting.shaping import method_result
from ..fitting.sklearn_api import drop_fitted, text_classifier_tags
from ..fitting.targets import as_target
from ..reading.cache import ReadCache, active_cache
from ..reading.driver import reads_per_text
from .budget import check_max_passes, within_budget, zero_shot_passes
from .candidates import Candidate, candidates
from .estimate import held_out_estimate, pair_splits
from .folds import (
    choosing_scorer,
    fallback_candidate,
    refit_metric,
    results,
    scorer,
    split_rows,
    usable_few_shots,
    warn_left_out,
)
from .plans import fitted_plans
from .reads import read_reader
from .rules import check_rule, choose, complexity_of
from .scores import ReaderReads, StackingHead, score_candidates, score_fold
from .temperature import held_out_temperature, tempered

__all__ = ["SMALL_DATA", "LLMLabelClassifierCV"]

#: What ``small_data`` takes: the unscored fallback on texts too few for the examples, or the search's own choice.
SMALL_DATA = ("fallback", "search")


class LLMLabelClassifierCV(ClassifierMixin, BaseEstimator):
    """``LLMLabelClassifier`` with its way of reading and its calibration
    chosen by cross-validation on the training data.

    As ``LogisticRegressionCV`` chooses ``C``: every candidate (prompt x
    few-shot count x calibration x ..., and a stacked logistic regression) is
    scored on stratified folds of the labelled texts, one is chosen by
    ``rule``, and it is refitted on all of them. Each distinct prompt reads
    each training text once; calibrations, length norms, class weights and
    folds are arithmetic on those reads (docs: Learning from labels).

    Parameters
    ----------
    estimator : LLMLabelClassifier or None, default=None
        The parameters not searched (model, engine, labels, ...). None: the
        default ``LLMLabelClassifier()``.
    prompts : list or None, default=None
        Prompt candidates: a template string, None (the default template), or
        a dict with ``prompt``, ``instructions`` and ``chat``. None tries
        ``candidates.DEFAULT_PROMPTS``: the default template, the text with a
        bare answer cue and the default template as a chat turn.
    few_shots : list of int, default=(0, 4)
        Few-shot counts (examples per class), drawn as the refit draws them;
        no text is scored under a prompt that shows it. A count that leaves
        too few texts outside its examples to score by is lowered or left
        out, with one warning (``small_data``).
    calibrations : list, default=("auto", None, "contextual", "batch", "learned")
        The calibrations to try (``LLMLabelClassifier``'s ``calibration``).
    calibration_priors : list, default=("y",)
        For "auto", "contextual" and "batch": the class priors to try ("y", "uniform").
    class_weights : list, default=(None, "balanced")
        For "learned" and the stacked candidate.
    label_modes, length_norms, label_sets : list or None, default=None
        Label modes, length norms and ``labels`` values to try; None keeps
        the estimator's own.
    stack : bool, default=True
        Also try a logistic regression over every prompt's label logprobs;
        if it wins, ``best_estimator_`` is a pipeline of a ``FeatureUnion``
        of the readers and that model, fitted on out-of-fold reads as
        ``StackingClassifier`` fits its final estimator.
    scoring : str, callable, list, dict or None, default="neg_log_loss"
        As ``GridSearchCV``'s; with several metrics ``refit`` names the one
        that chooses. "neg_log_loss" is told every class, so a fold lacking a
        rare class is still scored.
    cv : int, cross-validation generator or iterable, default=5
        Folds of the training texts (an int: unshuffled ``StratifiedKFold``);
        an int larger than the largest class is lowered, with a warning. The
        nested ``held_out_score_`` needs 3.
    refit : bool or str, default=True
        Refit the chosen candidate on all training texts (from the same
        reads). With several scorers, the name of the one that chooses.
    rule : {"guarded", "best", "one_se"}, default="guarded"
        How the candidate is chosen from the ``refit`` metric. "best": the
        highest mean. "guarded": the highest mean where it beats the simple
        reading (first prompt, zero-shot, first calibration) by more than the
        standard error of their paired split differences, else that simple
        reading. "one_se": the simplest ``complexity`` level within one
        ``sem_test_<metric>`` of the highest mean. NaN means are never chosen.
    n_repeats : int, default=1
        For an int ``cv``: score on ``RepeatedStratifiedKFold(cv, n_repeats)``
        folds seeded from the estimator's ``random_state`` (split ``k`` of
        repeat ``r`` is ``split<r * n_folds_ + k>``), at no engine read. Must
        be 1 when ``cv`` is a splitter or an iterable.
    recalibrate : {"temperature", None}, default=None
        "temperature": fit one temperature ``T`` on the chosen candidate's
        held-out log-probabilities (log T in [-3, 3]), shrink its log by the
        m texts scored (log T * m / (m + 64)) and apply it to
        ``best_estimator_``'s probabilities; predictions are unchanged. Not
        the default: it raised the test ECE at 64 texts and fewer (docs:
        Learning from labels). None: ``temperature_`` is 1.
    small_data : {"fallback", "search"}, default="fallback"
        What fit chooses when the largest of ``few_shots`` had to be lowered
        and the texts are fewer than 2 x that count x the classes.
        "fallback": the first prompt with that count and batch calibration,
        fitted on every text unscored (its ``cv_results_`` row, last, and
        ``best_score_``, ``held_out_score_`` are NaN; ``temperature_`` is 1).
        "search": the choice among the scored candidates.
    max_passes : float or None, default=10.0
        The most zero-shot passes over the training texts fit may read
        (reads of every reader, content-free inputs included, over those of
        the first reader). Readers beyond it are left out before anything is
        read, the costliest first, with a warning; never the first. None
        reads every reader.

    Attributes
    ----------
    cv_results_ : dict of numpy arrays
        ``GridSearchCV``'s layout (``params``, ``param_<name>``,
        ``split<k>_test_<score>``, ``mean_``, ``std_``, ``rank_test_<score>``;
        ``<score>`` is "score" for one scorer), plus ``sem_test_<score>``
        (``std_test_<score>`` over sqrt(``n_folds_``)) and ``complexity``,
        each candidate's level for ``rule`` (0 zero-shot with "auto" or no
        calibration, 1 zero-shot otherwise calibrated, 2 few-shot, 3 stacked).
    best_index_ : int
        The chosen candidate's row in ``cv_results_``.
    best_params_ : dict
        The chosen candidate's parameters (estimator parameters, or
        ``{"stack": True, "class_weight": ...}`` for the stacked candidate).
    best_score_ : float
        The chosen candidate's mean score on the splits that chose it
        (optimistic); NaN for the unscored fallback.
    held_out_score_ : float
        The expected score of choosing by ``rule`` on new texts, by nested
        cross-validation from the same reads: compare it with
        ``best_score_``. NaN, with a warning, with fewer than 3 folds, where
        no candidate could be scored on a split, or for the fallback.
    held_out_score_sem_ : float
        Its standard error, from ``estimate.BOOTSTRAP_DRAWS`` bootstrap draws
        of the scored texts.
    held_out_choices_ : ndarray of shape (n_splits_,)
        For each split, the ``cv_results_`` row the nested choice took
        without it (-1 where none could be scored): ``held_out_score_`` is the
        mean of ``split<k>_test_<metric>`` at these rows.
    temperature_ : float
        The (shrunk) temperature applied to ``best_estimator_``'s probabilities
        (``recalibrate``); 1.0 when not recalibrated, or for the unscored
        fallback (``small_data``), which has no held-out predictions.
    best_estimator_ : LLMLabelClassifier or Pipeline
        The chosen candidate refitted on every training text (with
        ``refit``): what ``predict`` uses, and ``predict_proba`` with
        ``temperature_`` applied.
    readers_ : list of dict
        The distinct ways of reading tried, as estimator parameters.
    skipped_readers_ : list of dict
        The ways of reading left out because their few-shot examples do not
        fit the model's context, then those left out by ``max_passes``.
    classes_ : ndarray
        Class labels; the column order of ``predict_proba``.
    n_splits_ : int
        The number of splits used (folds times repeats).
    n_folds_ : int
        The folds per repeat (``n_splits_`` for a splitter that does not
        repeat).
    scorer_ : callable or dict
        The scorer(s) built from ``scoring``.
    fit_cost_ : dict
        ``engine_reads`` made by fit (refit included; reads an enclosing
        ``ReadCache`` answered count, so it is what this fit reads alone),
        ``texts``, their ratio ``reads_per_text``, ``zero_shot_passes``:
        engine reads over those of one zero-shot read of the training texts,
        and ``seconds``: the fit's wall time.
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
    ('auto', None, 'contextual', 'batch', 'learned')

    Fitting reads each training text once per way of reading:

    >>> search.fit(texts, labels)  # doctest: +SKIP
    >>> search.best_params_  # doctest: +SKIP
    {'prompt': 'Question: {text}\\nAnswer type:', 'few_shot': 4, 'calibration': 'learned', ...}
    >>> search.best_score_, search.held_out_score_, search.temperature_  # doctest: +SKIP
    (-0.412, -0.468, 1.31)
    >>> pd.DataFrame(search.cv_results_).sort_values("rank_test_score")  # doctest: +SKIP
    >>> search.fit_cost_  # doctest: +SKIP
    {'engine_reads': 204, 'texts': 48, 'reads_per_text': 4.25, 'zero_shot_passes': 4.25, 'seconds': 31.2}
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
        rule: str = "guarded",
        n_repeats: int = 1,
        recalibrate: str | None = None,
        small_data: str = "fallback",
        max_passes: float | None = 10.0,
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
        self.rule = rule
        self.n_repeats = n_repeats
        self.recalibrate = recalibrate
        self.small_data = small_data
        self.max_passes = max_passes

    # ------------------------------------------------------------------ fit

    def _base(self) -> LLMLabelClassifier:
        if self.estimator is None:
            return LLMLabelClassifier()
        if not isinstance(self.estimator, LLMLabelClassifier):
            raise ValueError(
                f"{type(self).__name__}: estimator must be an LLMLabelClassifier; got {type(self.estimator).__name__}"
            )
        return clone(self.estimator)

    def _check_options(self) -> None:
        """Raises ValueError naming a bad ``rule``, ``n_repeats``, ``recalibrate``, ``small_data`` or ``max_passes``."""
        name = type(self).__name__
        check_rule(self.rule, name)
        check_max_passes(self.max_passes, name)
        repeats = self.n_repeats
        if isinstance(repeats, bool) or not isinstance(repeats, numbers.Integral) or repeats < 1:
            raise ValueError(f"{name}: n_repeats must be an int of at least 1; got n_repeats={repeats!r}")
        if repeats > 1 and (isinstance(self.cv, bool) or not isinstance(self.cv, numbers.Integral)):
            given = f"cv={self.cv!r}" if hasattr(self.cv, "split") else f"this cv (a {type(self.cv).__name__})"
            raise ValueError(
                f"{name}: n_repeats={repeats} repeats the folds of an int cv, and {given} gives its own "
                "splits: pass n_repeats=1 (or a RepeatedStratifiedKFold as cv)"
            )
        if self.recalibrate not in ("temperature", None):
            raise ValueError(f"{name}: recalibrate must be 'temperature' or None; got recalibrate={self.recalibrate!r}")
        if self.small_data not in SMALL_DATA:
            got = f"small_data={self.small_data!r}"
            raise ValueError(f"{name}: small_data must be one of {list(SMALL_DATA)}; got {got}")

    def fit(self, X: Any, y: Any) -> LLMLabelClassifierCV:
        """Reads the training texts once per reader, scores every candidate, refits the chosen one.

        Every candidate is scored on the folds from those reads, the choice
        (``rule``) and its temperature (``recalibrate``) are arithmetic on
        those scores and reads, and the refit reads nothing new.

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
            ``LLMLabelClassifier``, ``rule``, ``n_repeats``, ``recalibrate``,
            ``small_data`` or ``max_passes`` is bad, a candidate has a bad
            parameter (naming the candidate), or no reader's few-shot
            examples fit the model's context.
        """
        began = time.perf_counter()
        name = type(self).__name__
        self._check_options()
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
        few_shots, lowered = usable_few_shots(self.few_shots, y_values)
        readers, found = candidates(
            base.get_params(),
            prompts=self.prompts,
            few_shots=few_shots,
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
                _check_candidate(base, c.params, f"{name}: candidate {c.params}")
        fallback = fallback_candidate(readers, self.few_shots, few_shots, y_values, self.small_data)  # count checked
        if fallback is not None:
            _check_candidate(base, fallback.params, f"{name}: the small_data fallback {fallback.params}")
        warn_left_out(y_values, lowered, fallback.params["few_shot"] if fallback else 0)  # one warning
        self.scorer_ = scorer(base, self.scoring, np.unique(y_values))
        cache = ReadCache(parent=active_cache())  # an enclosing cache answers what it holds
        with cache.active(), each_warning_once():
            readers, found, fitted, fallback, too_long = fitted_plans(base, readers, found, fallback, X, y_values, name)
            classes = fitted[0].classes_
            y_index = np.searchsorted(classes, y_values)
            folds = self._folds(base, y_index)
            readers, found, fitted, skipped = within_budget(readers, found, fitted, len(records), self.max_passes)
            self.skipped_readers_ = too_long + skipped
            reads = [read_reader(r, records, y_index, name) for r in _bar(fitted, base.progress, "reading", "reader")]
            self.readers_ = readers
            unscored = [fallback] if fallback else []
            held_out = self._score(base, found, reads, classes, y_index, folds, unscored)
            if fallback:
                self._choose_fallback(len(found), fallback)
            chosen = [*found, *unscored][self.best_index_]
            self.temperature_ = 1.0
            if self.recalibrate is not None:
                self.temperature_ = held_out_temperature(held_out[self.best_index_], y_index, folds)
            if self.refit:
                refit_began = time.perf_counter()
                self.best_estimator_ = self._refit(base, readers, chosen, X, y_values, reads)
                self.refit_time_ = time.perf_counter() - refit_began
        self.fit_cost_ = {
            "engine_reads": cache.reads,
            "texts": len(records),
            "reads_per_text": cache.reads / len(records),
            "zero_shot_passes": zero_shot_passes(cache.reads, len(records), reads_per_text(fitted[0].plans_[0])),
            "seconds": time.perf_counter() - began,
        }
        self.classes_ = classes
        return self

    def _choose_fallback(self, index: int, fallback: Candidate) -> None:
        """Makes the fallback, row ``index`` of ``cv_results_``, the choice:
        it was never scored, so its scores and the estimate are NaN."""
        self.best_index_ = index
        self.best_params_ = dict(fallback.params)
        self.best_score_ = self.held_out_score_ = self.held_out_score_sem_ = float("nan")
        self.held_out_choices_ = np.full(self.n_splits_, -1, dtype=np.int64)

    def _folds(self, base: LLMLabelClassifier, y_index: np.ndarray) -> list[Any]:
        """The (train, test) rows of every split of the training texts
        (folds, repeated with ``n_repeats``); sets ``n_splits_`` and
        ``n_folds_``."""
        seed = None
        if self.n_repeats > 1:  # the repeats' shuffles follow the estimator's random_state, left unadvanced
            state = clone(base.random_state, safe=False)
            seed = state if isinstance(state, numbers.Integral) else check_random_state(state).randint(2**31 - 1)
        rows = np.arange(len(y_index))
        folds, self.n_folds_ = split_rows(self.cv, self.n_repeats, seed, rows, y_index, [])
        self.n_splits_ = len(folds)
        return folds

    def _score(
        self,
        base: LLMLabelClassifier,
        found: list[Candidate],
        reads: list[ReaderReads],
        classes: np.ndarray,
        y_index: np.ndarray,
        folds: list[Any],
        unscored: list[Candidate],
    ) -> list[list[np.ndarray | None]]:
        """Scores every candidate on every split and inner split
        (``scores.score_candidates``), sets ``cv_results_`` (the ``unscored``
        candidates last, with NaN scores), chooses by ``rule`` (the ``best_*``
        attributes) and estimates the choice held out (``held_out_score_``).
        Returns each candidate's held-out log-probabilities per split (None
        where it was not scored): the chosen one's calibrate the refit."""
        pairs = pair_splits(folds, self.n_folds_) if self.n_folds_ >= 2 else []
        choosing = choosing_scorer(base, self.scoring, self.refit, self.scorer_, classes)
        bar = _bar(found, base.progress, "scoring", "candidate")
        per_split, inner, held_out, failures = score_candidates(
            bar, reads, y_index, classes, folds, pairs, (self.scorer_, choosing), base.random_state
        )
        names = next(list(s) for scores in per_split for s in scores if s is not None)
        per_split += [[None] * len(folds) for _ in unscored]
        held_out += [[None] * len(folds) for _ in unscored]
        filled = [[s if s is not None else dict.fromkeys(names, np.nan) for s in scores] for scores in per_split]
        rows = [*found, *unscored]
        self.cv_results_ = results(rows, filled, self.n_folds_, [complexity_of(c) for c in rows])
        metric = refit_metric(self.refit, names)
        means, sems = self.cv_results_[f"mean_test_{metric}"], self.cv_results_[f"sem_test_{metric}"]
        complexity = self.cv_results_["complexity"]
        table = np.column_stack([self.cv_results_[f"split{k}_test_{metric}"] for k in range(self.n_splits_)])
        try:
            self.best_index_ = choose(means, sems, complexity, self.rule, table, self.n_folds_)
        except ValueError:
            raise ValueError(
                f"{type(self).__name__}: no candidate could be scored on every fold; " + "; ".join(failures)
            ) from None
        self.best_params_ = dict(found[self.best_index_].params)
        self.best_score_ = float(means[self.best_index_])

        def score(log_proba: np.ndarray, y: np.ndarray) -> float:
            return score_fold(self.scorer_, log_proba, classes, classes[y])[metric]

        seed = learned_seed(clone(base.random_state, safe=False))
        self.held_out_score_, self.held_out_score_sem_, self.held_out_choices_ = held_out_estimate(
            table, inner, held_out, complexity, self.rule, self.n_folds_, metric, score, folds, y_index, seed
        )
        return held_out

    def _refit(
        self,
        base: LLMLabelClassifier,
        readers: list[dict[str, Any]],
        best: Candidate,
        X: Any,
        y: np.ndarray,
        reads: list[ReaderReads],
    ) -> Any:
        """The chosen candidate fitted on every training text. A single
        reader's candidate is fitted as ``LLMLabelClassifier`` would be, its
        reads from the cache. The stacked candidate is a pipeline of the readers
        (fitted on every text: their plans, nothing read) and a head fitted on
        the reads the scoring made, each text read under a prompt that does
        not show it, as ``StackingClassifier`` fits its final estimator on
        out-of-fold predictions: the texts a new text is like."""
        if best.reader is not None:
            return clone(base).set_params(**best.params).fit(X, y)
        union = FeatureUnion(
            [(f"reader_{r}", clone(base).set_params(**params, calibration=None)) for r, params in enumerate(readers)]
        ).fit(X, y)
        head = StackingHead(best.params["class_weight"], learned_seed(base.random_state))
        head.fit(np.hstack([r.reads.class_logprobs for r in reads]), y)
        return Pipeline([("features", union), ("head", head)])

    # ----------------------------------------------------------- prediction

    def _best(self) -> Any:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_

    def predict_proba(self, X: Any) -> np.ndarray:
        """The chosen candidate's probabilities with ``temperature_`` applied,
        softmax(log ``best_estimator_.predict_proba(X)`` / ``temperature_``)
        (exactly ``best_estimator_``'s when it is 1): (n_texts, n_classes),
        columns in ``classes_`` order, rows summing to 1."""
        proba = self._best().predict_proba(X)
        temperature = getattr(self, "temperature_", 1.0)
        if temperature == 1.0:
            return proba
        return np.exp(tempered(np.log(np.clip(proba, 1e-300, None)), temperature))

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """The log of ``predict_proba`` (probabilities clipped at 1e-300), as
        the stacked candidate's model has no log-probabilities of its own."""
        return np.log(np.clip(self.predict_proba(X), 1e-300, None))

    def predict(self, X: Any) -> np.ndarray:
        """The chosen candidate's most probable class of each text, of
        ``classes_``'s dtype (a temperature changes no argmax)."""
        return self._best().predict(X)

    def decision_function(self, X: Any) -> np.ndarray:
        """Scores for each text, as ``LLMLabelClassifier.decision_function``
        gives them: binary, the log-odds of ``classes_[1]``, shape (n_texts,);
        else the log-probabilities, (n_texts, n_classes)."""
        return method_result("decision_function", "single", [self.predict_log_proba(X)], self.classes_)

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        return text_classifier_tags(super().__sklearn_tags__())


def _check_candidate(base: LLMLabelClassifier, params: dict[str, Any], named: str) -> None:
    """Raises ValueError, starting with ``named``, when ``base`` with ``params`` is not a valid estimator."""
    try:
        check_params(clone(base).set_params(**params))
    except ValueError as exc:
        raise ValueError(f"{named}: {exc}") from None


def _bar(items: list[Any], show: bool, what: str, unit: str) -> Iterable[Any]:
    """``items``, behind a tqdm bar (notebook widget where available, as the
    reading driver's) when ``show``; tqdm is imported only then."""
    if not show:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=f"LLMLabelClassifierCV: {what}", unit=unit)

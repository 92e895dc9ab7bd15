"""How ``LLMLabelClassifierCV`` splits and scores its training texts: the
few-shot counts and candidates that can be scored and refitted, the
``small_data`` fallback, the (repeated) folds, the scorers and
``cv_results_`` in ``GridSearchCV``'s layout. Nothing here reads."""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import rankdata
from sklearn.metrics import check_scoring, log_loss, make_scorer
from sklearn.model_selection import RepeatedStratifiedKFold, check_cv

from ..exceptions import warn_user
from .candidates import Candidate
from .rules import split_sem

__all__ = [
    "choosing_scorer",
    "fallback_candidate",
    "fold_count",
    "refit_metric",
    "results",
    "scorer",
    "split_rows",
    "too_small_for_examples",
    "usable_few_shots",
    "warn_left_out",
]

#: At most this many classes are named, with their counts, by ``warn_left_out``.
_NAMED_CLASSES = 6


def scorer(estimator: Any, scoring: Any, classes: np.ndarray) -> Any:
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


def choosing_scorer(estimator: Any, scoring: Any, refit: Any, scorers: Any, classes: np.ndarray) -> Any:
    """The scorer of the inner splits: ``scorers`` (``scorer_``), or with
    several metrics the ``refit`` one alone (the inner scores only choose)."""
    if isinstance(scoring, list | tuple | set) and isinstance(refit, str) and refit in scoring:
        return scorer(estimator, refit, classes)
    if isinstance(scoring, dict) and isinstance(refit, str) and refit in scoring:
        return scorer(estimator, scoring[refit], classes)
    return scorers


def refit_metric(refit: Any, names: list[str]) -> str:
    """The metric that chooses: "score" for one scorer, else ``refit``, which
    must name one of ``names`` (ValueError otherwise)."""
    if names == ["score"]:
        return "score"
    if not isinstance(refit, str) or refit not in names:
        raise ValueError(
            f"LLMLabelClassifierCV: with several scorers, refit must name the one that chooses "
            f"(one of {names}); got refit={refit!r}"
        )
    return refit


def usable_few_shots(few_shots: Any, y: np.ndarray) -> tuple[Any, list[str]]:
    """``few_shots`` with each nonzero count whose examples would leave too
    little to score by (fewer than 4 texts outside the examples, or fewer than
    2 classes with 2 texts; ``few_shot`` takes at most a class's count) lowered to the
    largest count that leaves enough, or left out when none does, and what
    was so changed ("few_shot=4 lowered to 3", "few_shot=3 left out") for
    ``warn_left_out``. Raises ValueError when no count is left. Anything but
    a list of ints, and a negative count, is passed on for the candidate
    check to name."""
    if isinstance(few_shots, str) or not isinstance(few_shots, Sequence) or not few_shots:
        return few_shots, []
    if not all(isinstance(k, numbers.Integral) for k in few_shots):
        return few_shots, []
    counts = np.unique(y, return_counts=True)[1]

    def scorable(k: int) -> bool:
        left = np.maximum(counts - k, 0)
        return k == 0 or (left.sum() >= 4 and np.count_nonzero(left >= 2) >= 2)

    kept: list[int] = []
    lowered: list[str] = []
    for k in few_shots:
        if k < 0:  # kept as given: the candidate check names it, as it names any bad parameter
            kept.append(int(k))
            continue
        usable = next((j for j in range(int(k), 0, -1) if scorable(j)), 0) if k else 0
        if usable != k:
            lowered.append(f"few_shot={k} {'lowered to ' + str(usable) if usable else 'left out'}")
        if (usable or not k) and usable not in kept:
            kept.append(usable)
    if not kept:
        raise ValueError(
            f"LLMLabelClassifierCV: {len(y)} training texts in {len(counts)} classes: every few-shot count in "
            f"few_shots={list(few_shots)} leaves fewer than 4 texts, or fewer than 2 classes with 2 texts, outside "
            "the examples to score by; pass more labelled texts or include 0 in few_shots"
        )
    return kept, lowered


def too_small_for_examples(n_texts: int, n_classes: int, few_shots: Sequence[int]) -> bool:
    """Whether ``n_texts`` training texts in ``n_classes`` classes are too few
    for the largest of ``few_shots``: its examples would take more than half
    of them. False without examples."""
    return n_texts < 2 * max((int(k) for k in few_shots), default=0) * n_classes


def fallback_candidate(
    readers: list[dict[str, Any]], few_shots: Sequence[int], usable: Sequence[int], y: np.ndarray, small_data: str
) -> Candidate | None:
    """The candidate ``small_data="fallback"`` takes unscored: the first
    reader's prompt with the largest of ``few_shots`` and batch calibration
    (prior from y); None when that count can be scored (it is in ``usable``,
    the counts ``usable_few_shots`` kept), the texts are not too few for it
    (``too_small_for_examples``) or ``small_data`` is "search"."""
    largest = max(int(k) for k in few_shots)
    small = too_small_for_examples(len(y), len(np.unique(y)), few_shots)
    if small_data != "fallback" or largest in usable or not small:
        return None
    return Candidate(0, {**readers[0], "few_shot": largest, "calibration": "batch", "calibration_prior": "y"})


def warn_left_out(y: np.ndarray, lowered: Sequence[str], fallback: int = 0) -> None:
    """One warning for every few-shot count the search lowers or leaves out
    because it could not be scored (``usable_few_shots``' ``lowered``), with
    the class counts that rule them out; nothing when there is none. The
    candidates that can be scored are scored and chosen among, or, with
    ``fallback`` (a few-shot count), the search's ``small_data`` fallback
    with that count is taken unscored."""
    if not lowered:
        return
    labels, counts = np.unique(y, return_counts=True)
    many = len(labels) > _NAMED_CLASSES
    order = np.argsort(counts, kind="stable")[:_NAMED_CLASSES] if many else np.arange(len(labels))
    named = ", ".join(f"{str(labels[i])!r} {counts[i]}" for i in order)
    if many:
        named = f"the smallest: {named}, ..."
    reason = (
        f"{', '.join(lowered)}: more examples per class would leave fewer than 4 texts, or fewer than 2 classes "
        "with 2 texts, outside them to score by"
    )
    ending = (
        f"{len(y)} texts are fewer than 2 x few_shot={fallback} x {len(labels)} classes, so best_estimator_ is the "
        f"fallback (small_data='fallback'): the first prompt with few_shot={fallback} and batch calibration, "
        "unscored; best_score_ and held_out_score_ are NaN, and cv_results_ scores the other candidates. Pass more "
        "labelled texts to score it, or small_data='search' to choose among the scored candidates."
        if fallback
        else "The candidates left out are not in cv_results_; the others are scored and the choice is among them. "
        "Pass more labelled texts of the smaller classes to try them."
    )
    warn_user(
        f"LLMLabelClassifierCV: with {len(y)} training texts in {len(labels)} classes ({named}), "
        f"{reason}. {ending}",
        UserWarning,
    )


def fold_count(cv: Any, y_index: np.ndarray) -> Any:
    """``cv`` itself, or for an int above the largest class's count that
    count (at least 2): every text is scored and log-loss is told every
    class, so a fold need not test every class, and a class with fewer texts
    than folds is tested in as many folds as it has texts; only when every
    class has fewer texts than folds can stratified folds not be made."""
    if not isinstance(cv, numbers.Integral) or isinstance(cv, bool):
        return cv
    counts = np.bincount(y_index)
    largest = int(counts.max()) if counts.size else 0
    if largest >= cv:
        return cv
    lowered = max(2, largest)
    warn_user(
        f"LLMLabelClassifierCV: every class has fewer than cv={cv} training texts (the largest {largest}); "
        f"using {lowered} stratified folds. Pass more labelled texts or a smaller cv.",
        UserWarning,
    )
    return lowered


def split_rows(
    cv: Any, n_repeats: int, seed: int | None, pool: np.ndarray, y_index: np.ndarray, shown: Sequence[int]
) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
    """The (train, test) rows of every split, and the folds per repeat.

    The rows not shown as examples (``pool``) are split: an int ``cv`` (after
    ``fold_count``) into unshuffled ``StratifiedKFold`` folds, as
    ``GridSearchCV``'s int ``cv``, or with ``n_repeats`` > 1 into
    ``RepeatedStratifiedKFold(cv, n_repeats, seed)`` folds (shuffled each
    repeat; split ``k`` of repeat ``r`` is split ``r * folds + k``); any
    other ``cv`` gives its own splits (sklearn's repeated splitters counted
    as their repeats). Every split's training part also holds the ``shown``
    rows."""
    lowered = fold_count(cv, y_index[pool])
    if n_repeats > 1:
        splitter = RepeatedStratifiedKFold(n_splits=lowered, n_repeats=n_repeats, random_state=seed)
    else:
        splitter = check_cv(lowered, y_index[pool], classifier=True)
    with warnings.catch_warnings():
        # a class with fewer texts than folds is tested in fewer folds: log-loss is told every class
        warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
        folds = [
            (np.concatenate([np.array(shown, dtype=np.int64), pool[train]]), pool[test])
            for train, test in splitter.split(pool.reshape(-1, 1), y_index[pool])
        ]
    repeats = getattr(splitter, "n_repeats", 1)
    if not isinstance(repeats, numbers.Integral) or repeats < 1 or len(folds) % repeats:
        repeats = 1
    return folds, len(folds) // repeats


def results(
    found: list[Candidate], per_split: list[list[dict[str, float]]], n_folds: int, complexity: Sequence[int]
) -> dict[str, Any]:
    """``cv_results_`` in ``GridSearchCV``'s layout, plus ``sem_test_<metric>``
    (``rules.split_sem`` over ``n_folds``) and each candidate's ``complexity``."""
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
        results[f"sem_test_{metric}"] = split_sem(table, n_folds)
        # NaN (a candidate that failed on a fold) ranks last, as in GridSearchCV
        ranked = rankdata(np.where(np.isnan(mean), np.inf, -mean), method="min")
        results[f"rank_test_{metric}"] = ranked.astype(np.int32)
    results["complexity"] = np.asarray(complexity, dtype=np.int64)
    return results

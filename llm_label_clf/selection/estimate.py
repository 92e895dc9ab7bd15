"""What ``LLMLabelClassifierCV``'s choice scores on texts that took no part
in it: ``held_out_score_`` and its standard error."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..exceptions import warn_user
from .rules import choose, split_sem

__all__ = ["BOOTSTRAP_DRAWS", "bootstrap_sem", "held_out_estimate", "nested_choices", "pair_splits"]

#: Bootstrap draws of the texts for ``held_out_score_sem_``: the standard
#: error of a bootstrap standard error is about 1 / sqrt(2 * draws), 5%.
BOOTSTRAP_DRAWS = 200


def pair_splits(
    folds: Sequence[tuple[np.ndarray, np.ndarray]], n_folds: int
) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """Every inner split ``(s, j, train, test)``: for splits ``s`` and ``j``
    of the same repeat (``j != s``), the training rows of ``j`` without the
    rows ``s`` tests, and ``j``'s test rows (which ``s`` never holds when
    the folds partition the rows)."""
    if n_folds < 2 or len(folds) % n_folds:
        raise ValueError(f"n_folds={n_folds} must be at least 2 and divide the {len(folds)} splits")
    pairs = []
    for s, (_, outer) in enumerate(folds):
        start = s - s % n_folds
        for j in range(start, start + n_folds):
            if j != s:
                train, test = folds[j]
                pairs.append((s, j, np.setdiff1d(train, outer), np.setdiff1d(test, outer)))
    return pairs


def nested_choices(
    split_scores: np.ndarray, inner_scores: np.ndarray, complexity: np.ndarray, rule: str, n_folds: int
) -> np.ndarray:
    """For each split ``s``, the candidate ``rule`` chooses from the inner
    scores without ``s`` (``inner_scores[c, s, j]``, NaN where ``j == s`` or
    not of ``s``'s repeat), among those with a score on ``s`` itself (so a
    choice always has an outer score); -1 where none is left.
    ``split_scores`` is (n_candidates, n_splits)."""
    outer = np.asarray(split_scores, dtype=np.float64)
    chosen = np.full(outer.shape[1], -1, dtype=np.int64)
    for s in range(outer.shape[1]):
        start = s - s % n_folds
        others = [j for j in range(start, start + n_folds) if j != s]
        table = inner_scores[:, s, others]
        usable = np.isfinite(outer[:, s]) & np.isfinite(table).all(axis=1)
        if not usable.any():
            continue
        means = np.where(usable, table.mean(axis=1), np.nan)
        chosen[s] = choose(means, split_sem(table, len(others)), complexity, rule, table, len(others))
    return chosen


def bootstrap_sem(
    held_out: Sequence[np.ndarray | None],
    folds: Sequence[tuple[np.ndarray, np.ndarray]],
    y_index: np.ndarray,
    score: Callable[[np.ndarray, np.ndarray], float],
    random_state: Any,
    draws: int = BOOTSTRAP_DRAWS,
) -> float:
    """The bootstrap standard error over texts of the mean split score:
    ``held_out[s]`` are split ``s``'s held-out log-probabilities (None where
    it has none), ``score(log_proba, y_index)`` scores a split. Each draw
    resamples the scored texts with replacement (one multiplicity per text,
    shared by the splits that test it) and rescores every split; NaN when
    fewer than two draws give a score."""
    rng = np.random.RandomState(random_state)
    splits = [(k, np.asarray(test)) for k, (_, test) in enumerate(folds) if held_out[k] is not None]
    if not splits:
        return float("nan")
    scored = np.unique(np.concatenate([test for _, test in splits]))
    # each split's texts as places in ``scored`` and their labels, found once for every draw
    places = [(k, np.searchsorted(scored, test), y_index[test]) for k, test in splits]
    means = []
    for _ in range(draws):
        counts = rng.multinomial(len(scored), np.full(len(scored), 1.0 / len(scored)))
        values = []
        for k, place, y in places:
            repeat = counts[place]
            if repeat.sum() == 0:
                continue
            index = np.repeat(np.arange(len(place)), repeat)
            try:
                values.append(score(held_out[k][index], y[index]))
            except ValueError:  # a scorer that needs two classes, say, on a draw with one
                continue
        if values:
            means.append(float(np.mean(values)))
    return float(np.std(means, ddof=1)) if len(means) >= 2 else float("nan")


def held_out_estimate(
    table: np.ndarray,
    inner: Sequence[dict[tuple[int, int], dict[str, float] | None]],
    held_out: Sequence[Sequence[np.ndarray | None]],
    complexity: np.ndarray,
    rule: str,
    n_folds: int,
    metric: str,
    score: Callable[[np.ndarray, np.ndarray], float],
    folds: Sequence[tuple[np.ndarray, np.ndarray]],
    y_index: np.ndarray,
    random_state: Any,
) -> tuple[float, float, np.ndarray]:
    """``held_out_score_``, its bootstrap standard error and
    ``held_out_choices_``: ``table`` holds the split scores of ``metric``
    (one row per candidate), ``inner[c][s, j]`` candidate ``c``'s inner
    scores (rows past ``inner``, the unscored fallback's, have none). NaN
    (choices -1), with a warning saying why, when it cannot be estimated."""
    nan, none = float("nan"), np.full(table.shape[1], -1, dtype=np.int64)
    if n_folds < 3:  # with 2, an inner split would train on no row at all
        warn_user(
            f"LLMLabelClassifierCV: held_out_score_ is NaN: a nested estimate needs at least 3 folds per repeat "
            f"(this cv gives {n_folds}); pass more labelled texts or a larger cv.",
            UserWarning,
        )
        return nan, nan, none
    n_splits = table.shape[1]
    inner_table = np.full((len(inner), n_splits, n_splits), np.nan)
    for c, pairs in enumerate(inner):
        for (s, j), scores in pairs.items():
            if scores is not None:
                inner_table[c, s, j] = scores.get(metric, scores.get("score"))
    chosen = nested_choices(table[: len(inner)], inner_table, complexity[: len(inner)], rule, n_folds)
    if (chosen < 0).any():
        warn_user(
            f"LLMLabelClassifierCV: held_out_score_ is NaN: on split(s) {np.flatnonzero(chosen < 0).tolist()} no "
            "candidate could be scored both there and on the other folds without it (see the failures warned "
            "above); pass more labelled texts per class or fewer candidates.",
            UserWarning,
        )
        return nan, nan, none
    mean = float(np.mean([table[c, s] for s, c in enumerate(chosen)]))
    picks = [held_out[c][s] for s, c in enumerate(chosen)]
    return mean, bootstrap_sem(picks, folds, y_index, score, random_state), chosen

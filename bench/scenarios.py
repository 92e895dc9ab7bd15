"""The estimator beyond one zero-shot pass, in one process (``bench/run.py``):
``cross_val_score`` (wall time, engine starts), throughput against
``batch_size`` and against threads calling ``predict_proba`` at once, and a
few-shot prompt with the prefix cache on and off."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from bench.common import (
    MODEL,
    SEED,
    PeakRSS,
    Sizes,
    Task,
    render,
    scores,
    sst2,
    timed_passes,
    warmup_texts,
)
from bench.contenders import empty_prefix_cache, make_estimator

BATCH_SIZES = (1, 8, 64, 512)
THREADS = (1, 2, 4)
#: texts per predict_proba call in the threads scenario (a server's small requests)
REQUEST_TEXTS = 16
SHOTS_PER_CLASS = 4
CV_FOLDS = 5


def cross_validation(task: Task) -> dict[str, Any]:
    """``cross_val_score(clf, X, y, cv=5)`` twice: first with no engine yet (its start included), then again."""
    from sklearn.model_selection import cross_val_score

    from llm_label_clf.engines.local import engine_count

    out: dict[str, Any] = {"folds": CV_FOLDS, "texts": len(task.texts)}
    for run in ("first", "again"):
        before = engine_count()
        start = time.perf_counter()
        fold_scores = cross_val_score(make_estimator(task), task.texts, task.y, cv=CV_FOLDS)
        out[run] = {"wall_s": time.perf_counter() - start, "engine_starts": engine_count() - before,
                    "accuracy_mean": float(np.mean(fold_scores)), "accuracy_folds": fold_scores.tolist()}
    return out


def _rounds(settings: Sequence[Any], run: Callable[[Any], float], rounds: int) -> dict[str, list[float]]:
    """Seconds of ``run(setting)`` per setting over ``rounds`` rounds, forwards then backwards (so a drift
    in the machine's load favours neither end)."""
    seconds: dict[str, list[float]] = {str(s): [] for s in settings}
    for r in range(rounds):
        for setting in settings if r % 2 == 0 else settings[::-1]:
            empty_prefix_cache()
            start = time.perf_counter()
            run(setting)
            seconds[str(setting)].append(time.perf_counter() - start)
    return seconds


def _throughput(texts: int, seconds: dict[str, list[float]], **extra: Any) -> dict[str, Any]:
    return {k: {"texts": texts, "texts_per_s": texts / statistics.median(v),
                "texts_per_s_rounds": [texts / s for s in v], **extra} for k, v in seconds.items()}


def batch_sizes(task: Task, estimator: Any, rounds: int) -> dict[str, Any]:
    """One ``predict_proba`` over the texts per ``batch_size``; medians over rounds."""

    def run(batch_size: int) -> None:
        estimator.set_params(batch_size=batch_size)
        estimator.predict_proba(task.texts)

    out = _throughput(len(task.texts), _rounds(BATCH_SIZES, run, rounds))
    estimator.set_params(batch_size=512)
    return out


def threads(task: Task, estimator: Any, rounds: int) -> dict[str, Any]:
    """Threads sharing one estimator, calling ``predict_proba`` on ``REQUEST_TEXTS``-text requests."""
    requests = [task.texts[i : i + REQUEST_TEXTS] for i in range(0, len(task.texts), REQUEST_TEXTS)]

    def run(n_threads: int) -> None:
        with ThreadPoolExecutor(n_threads) as pool:
            list(pool.map(estimator.predict_proba, requests))

    return _throughput(len(task.texts), _rounds(THREADS, run, rounds), request_texts=REQUEST_TEXTS)


def few_shot_split(task: Task, n_eval: int) -> tuple[Task, Task]:
    """Texts to evaluate (a seeded sample), and the other rows (the pool the examples come from)."""
    order = np.random.default_rng(SEED + 1).permutation(len(task.texts))

    def rows(index: np.ndarray) -> Task:
        return Task(task.name, [task.texts[i] for i in index], task.y[index], task.prompt, task.labels)

    return rows(order[:n_eval]), rows(order[n_eval:])


def few_shot(task: Task, n_eval: int, warmup: list[str]) -> dict[str, Any]:
    """Zero-shot, then ``few_shot=SHOTS_PER_CLASS`` (examples from the rows not
    evaluated) with the prefix cache on (also with ``calibration="batch"``) and
    off (its own engine), on the same texts, one pass each from an empty cache."""
    from llm_label_clf.engines.local import get_engine, shutdown_engines

    evaluated, pool = few_shot_split(task, n_eval)
    shots = {"few_shot": SHOTS_PER_CLASS, "random_state": SEED}
    tokenizer = get_engine(MODEL, None).tokenizer
    out: dict[str, Any] = {"shots_per_class": SHOTS_PER_CLASS, "texts": len(evaluated.texts), "via": "few_shot="}
    settings = [("zero-shot", {}), ("few-shot, prefix cache on", shots),
                ("few-shot + calibration='batch', prefix cache on", {**shots, "calibration": "batch"}),
                ("few-shot, prefix cache off", {**shots, "engine_options": {"enable_prefix_caching": False}})]
    for name, options in settings:
        if "engine_options" in options:
            shutdown_engines()  # one engine at a time in memory
        fitted = make_estimator(evaluated, **options).fit(pool.texts, pool.y)
        fitted.predict_proba(warmup)
        before = empty_prefix_cache if "engine_options" not in options else None
        proba, durations = timed_passes(lambda e=fitted: e.predict_proba(evaluated.texts), 1, before)
        prefix = fitted.few_shot_prefix_
        if prefix:
            out["block_tokens"] = len(tokenizer.encode(prefix))
        prompt_tokens = len(tokenizer.encode(prefix + render(evaluated, evaluated.texts[0])))
        out[name] = scores(evaluated, durations=durations, proba=proba, prompt_tokens=prompt_tokens)
    return out


def scenarios(size: Sizes) -> dict[str, Any]:
    """All the scenarios on SST-2 dev (cross-validation first: its engine-start count starts from zero)."""
    task = sst2(size)
    result: dict[str, Any] = {"name": "scenarios (LLMLabelClassifier)"}
    with PeakRSS() as rss:
        result["cross_val_score"] = cross_validation(task)
        scaling = task.subset(size.scaling_texts)
        fitted = make_estimator(scaling).fit(scaling.texts, scaling.y)
        fitted.predict_proba(warmup_texts(size))
        result["batch_size"] = batch_sizes(scaling, fitted, size.scaling_rounds)
        result["threads"] = threads(scaling, fitted, size.scaling_rounds)
        result["few_shot"] = few_shot(task, size.fewshot_eval, warmup_texts(size))
    result["peak_rss_gib"] = rss.gib
    return result

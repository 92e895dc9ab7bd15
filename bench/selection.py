"""What cross-validated selection buys over the fixed modes a user could
guess, over many random training sets: per dataset a fixed stratified test
set (``--test`` texts, seed 0) and, from the other rows, ``--draws`` training
sets at each of ``--sizes`` texts (every class at least once). Per draw: every
fixed mode (``FIXED``), TF-IDF + LogisticRegression, and one default
``LLMLabelClassifierCV(n_repeats=--repeats)`` fit (a temperature fitted beside
it only to record what it would do), scored on the test texts. Reports per
dataset and size, mean ± standard error over draws: accuracy against the best
fixed mode (a test-set oracle), zero-shot and batch calibration; macro-F1,
log-loss, top-label ECE beside its floor, the estimate's bias against the
pick's test score, and ``fit_cost_``. Defaults are chosen on the design sets
only (``SETS``). Four public sets (hate_speech, dbpedia, bbc_news, irony: CSVs that
``bench/public_sets.py`` builds into its cache folder) are reported only, like
the report sets, and run only when named or with ``--set public``.

Draws run before issue 53 also re-read each fit's split scores by other
rules, repeats and candidate sets (``variants`` in their JSON), and
``--render --name learning`` rewrote ``learning.md``; commit 75ea201 holds
that code and its tables.

Run: ``python bench/selection.py [--set design|report|public|all] [--datasets ...]
[--sizes 16 32 64 128] [--draws 10] [--test 300] [--repeats 4] [--name NAME]
[--resume]``; writes ``bench/results/NAME.json`` (after every draw),
``NAME.md`` and ``NAME-summary.md`` (the block for docs/guide/learning.md:
``python bench/common.py selection FILE`` puts it there); NAME defaults to
``selection-protocol``.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

#: name -> (file, set). The split is fixed: defaults (the selection rule, the
#: repeats, the candidates) are chosen on the design sets only; the report
#: and public sets are run to report, never to choose. TREC is the coarse
#: ``label`` column; banking77 (77 classes, ~141 reads per text) runs only
#: when named. The public sets' files are in ``bench/public_sets.py``'s cache
#: folder, not the project's datasets folder, and run only when named or with
#: ``--set public``.
SETS: dict[str, tuple[str, str]] = {
    "sst2": ("sst2_dev.csv", "design"),
    "trec": ("trec_test.csv", "design"),
    "ag_news": ("agnews_test.csv", "report"),
    "emotion": ("emotion_val.csv", "report"),
    "banking77": ("banking77_test.csv", "report"),
    "hate_speech": ("hate_speech.csv", "public"),
    "dbpedia": ("dbpedia.csv", "public"),
    "bbc_news": ("bbc_news.csv", "public"),
    "irony": ("irony.csv", "public"),
}
KINDS = ("design", "report", "public")
DEFAULT_DATASETS = [name for name, (_, kind) in SETS.items() if name != "banking77" and kind != "public"]
#: Where a dataset has its own training file, the draws come from it (TREC's
#: test file leaves only 200 rows beside a 300-text test set).
POOLS: dict[str, str] = {"trec": "trec_train.csv"}
TEST_SEED = 0
#: The fixed modes a user might guess, as estimator parameters.
FIXED: dict[str, dict[str, Any]] = {
    "zero-shot": {},
    "few_shot=4": {"few_shot": 4},
    "contextual (uniform prior)": {"calibration": "contextual", "calibration_prior": "uniform"},
    "contextual (prior from y)": {"calibration": "contextual"},
    "batch (uniform prior)": {"calibration": "batch", "calibration_prior": "uniform"},
    "batch (prior from y)": {"calibration": "batch"},
    "learned": {"calibration": "learned"},
    "learned, balanced": {"calibration": "learned", "class_weight": "balanced"},
    "few_shot=4 + batch (prior from y)": {"few_shot": 4, "calibration": "batch"},
}
BATCH = "batch (prior from y)"


def draw_seed(name: str, n: int, draw: int) -> int:
    """The seed of draw ``draw`` at ``n`` texts of dataset ``name`` (stable across runs)."""
    return zlib.crc32(f"{name}/{n}/{draw}".encode()) & 0x7FFFFFFF


def draw_rows(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` row positions of ``labels``: one random row of each class, then
    the rest at random, shuffled. Raises ValueError when ``n`` is below the
    number of classes."""
    classes = np.unique(labels)
    if n < len(classes):
        raise ValueError(f"{n} texts cannot hold each of {len(classes)} classes")
    rng = np.random.default_rng(seed)
    first = np.array([rng.choice(np.flatnonzero(labels == c)) for c in classes])
    rest = rng.choice(np.setdiff1d(np.arange(len(labels)), first), n - len(classes), replace=False)
    rows = np.concatenate([first, rest])
    rng.shuffle(rows)
    return rows


def test_file(name: str, from_pool: bool = False) -> str:
    """The file the dataset's test set is split off (``from_pool``: see ``test_and_pool``)."""
    return POOLS[name] if from_pool and name in POOLS else SETS[name][0]


def data_path(name: str, file: str) -> Path:
    """Where ``file`` of dataset ``name`` is: the public sets' cache folder for
    a public set (exits naming the file and the command that builds it where it
    is missing), else the project's datasets folder."""
    if SETS[name][1] != "public":
        from llm_label_clf.testing import datasets_dir

        return datasets_dir() / file
    from bench.public_sets import CACHE

    path = CACHE / file
    if not path.is_file():
        raise SystemExit(f"{name}: {path} is missing; build it with `python bench/public_sets.py {name}` "
                         "(after the `fetch` of its source that bench/public_sets.md names)")
    return path


def test_and_pool(name: str, n_test: int, from_pool: bool = False) -> tuple[Any, Any]:
    """The dataset's fixed stratified test set and the pool the draws come from.
    ``from_pool``: where the dataset has its own training file (TREC), the test
    set is split off that file too, so test texts are drawn like the training
    texts (TREC's test file differs from its training file in source and class
    mix: a shift no held-out estimate from the training texts can see)."""
    import pandas as pd
    from sklearn.model_selection import train_test_split

    frame = pd.read_csv(data_path(name, test_file(name, from_pool)))[["text", "label"]]
    pool, test = train_test_split(frame, test_size=n_test, stratify=frame["label"], random_state=TEST_SEED)
    if name in POOLS and not from_pool:
        pool = pd.read_csv(data_path(name, POOLS[name]))[["text", "label"]]
    test, pool = test.sort_index(), pool.sort_index()
    missing = sorted(set(frame["label"]) - set(pool["label"]))
    if missing:
        raise ValueError(f"{name}: no training rows left for class(es) {missing}; lower --test")
    return test, pool


def expected_calibration_error(classes: np.ndarray, proba: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    """Top-label ECE over 10 equal-width confidence bins, weighted by their share of texts."""
    confidence = proba.max(axis=1)
    correct = classes[proba.argmax(axis=1)] == y
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    return float(sum(abs(correct[which == b].mean() - confidence[which == b].mean()) * (which == b).mean()
                     for b in range(bins) if (which == b).any()))


def ece_floor(classes: np.ndarray, proba: np.ndarray, draws: int = 50) -> float:
    """The ECE perfectly calibrated probabilities would show on these texts: the
    mean ECE with each label drawn from its own probabilities (seeded)."""
    rng = np.random.default_rng(0)
    cumulative = np.cumsum(proba / proba.sum(axis=1, keepdims=True), axis=1)
    eces = []
    for _ in range(draws):
        drawn = (rng.random((len(proba), 1)) > cumulative).sum(axis=1).clip(0, len(classes) - 1)
        eces.append(expected_calibration_error(classes, proba, classes[drawn]))
    return float(np.mean(eces))


def scores(classes: np.ndarray, proba: np.ndarray, y: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import accuracy_score, f1_score, log_loss

    pred = classes[proba.argmax(axis=1)]
    return {
        "accuracy": float(accuracy_score(y, pred)),
        "macro_f1": float(f1_score(y, pred, average="macro")),
        "log_loss": float(log_loss(y, np.clip(proba, 1e-12, 1), labels=classes)),
        "ece": expected_calibration_error(classes, proba, y),
        "ece_floor": ece_floor(classes, proba),
        # > 0: the top label is given more probability than it earns (overconfident), < 0: less
        "overconfidence": float(proba.max(axis=1).mean() - accuracy_score(y, pred)),
    }


def tfidf_baseline(X: list[str], y: np.ndarray, Xt: list[str], yt: np.ndarray) -> dict[str, float]:
    """TF-IDF (word 1-2 grams) + LogisticRegression trained on the same texts."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    model = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
                          LogisticRegression(max_iter=2000)).fit(X, y)
    classes = np.unique(np.concatenate([y, yt]))
    proba = np.zeros((len(Xt), len(classes)))
    proba[:, np.searchsorted(classes, model.classes_)] = model.predict_proba(Xt)
    return scores(classes, proba, yt)


def jsonable(params: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, str | int | float | bool) or v is None else repr(v)) for k, v in params.items()}


def chose(params: dict[str, Any]) -> str:
    """A candidate in a few words: prompt, few-shot, calibration or stacking."""
    if params.get("stack"):
        return "stacked" + (", balanced" if params.get("class_weight") == "balanced" else "")
    prompt = params.get("prompt")
    parts = ["default prompt" if prompt is None else ("instruction, chat" if params.get("chat") else "instruction")]
    if params.get("few_shot"):
        parts.append(f"few_shot={params['few_shot']}")
    calibration = params.get("calibration")
    if calibration in ("contextual", "batch"):
        parts.append(f"{calibration} ({params.get('calibration_prior')})")
    elif calibration == "learned":
        parts.append("learned" + (", balanced" if params.get("class_weight") == "balanced" else ""))
    return " + ".join(parts)


def split_table(cv_results: dict[str, Any]) -> np.ndarray:
    """``split{k}_test_score`` as a (candidates, splits) array, k in order."""
    ks = sorted(int(key[5:-len("_test_score")]) for key in cv_results
                if key.startswith("split") and key.endswith("_test_score"))
    return np.column_stack([np.asarray(cv_results[f"split{k}_test_score"], dtype=np.float64) for k in ks])


def training_draw(name: str, n: int, d: int, pool: Any) -> tuple[int, Any]:
    """Draw ``d`` of ``n`` texts of dataset ``name``: its seed and training rows of ``pool``."""
    seed = draw_seed(name, n, d)
    return seed, pool.iloc[draw_rows(pool["label"].to_numpy(), n, seed)]


def wide_texts(rest: Any, wide: int, seed: int) -> tuple[list[str], np.ndarray]:
    """``wide`` texts (all, if fewer) of ``rest`` drawn at random, seeded by the draw: (texts, labels)."""
    rows = np.random.default_rng(seed).choice(len(rest), min(wide, len(rest)), replace=False)
    return rest["text"].iloc[rows].tolist(), rest["label"].iloc[rows].to_numpy()


def one_draw(name: str, n: int, d: int, test: Any, pool: Any, repeats: int, wide: int = 0) -> dict[str, Any]:
    """Every number of one draw (dataset ``name``, ``n`` texts, draw ``d``);
    with ``wide``, the fit also scored on that many more texts (``wide_test``)."""
    from llm_label_clf import LLMLabelClassifier, LLMLabelClassifierCV

    seed, train = training_draw(name, n, d, pool)
    X, y = train["text"].tolist(), train["label"].to_numpy()
    Xt, yt = test["text"].tolist(), test["label"].to_numpy()
    base = dict(progress=False, low_mass="ignore", random_state=seed)
    record: dict[str, Any] = {"dataset": name, "set": SETS[name][1], "n": n, "draw": d, "seed": seed,
                              "repeats": repeats,
                              "train_classes": {str(k): int(v) for k, v in train["label"].value_counts().items()}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # the fit first, so the training reads it makes (and its seconds) are its own
        began = time.perf_counter()
        try:
            # the estimator's defaults but for the repeats asked for, and a temperature fitted only
            # to record what it would do: it changes no choice, and best_estimator_ is the default's model
            search = LLMLabelClassifierCV(LLMLabelClassifier(**base), n_repeats=repeats,
                                          recalibrate="temperature").fit(X, y)
        except ValueError as exc:
            search, record["fit_error"] = None, str(exc)
        fit_s = time.perf_counter() - began
        record["fixed"] = {}
        for label, params in FIXED.items():
            try:
                clf = LLMLabelClassifier(**base, **params).fit(X, y)
                record["fixed"][label] = scores(clf.classes_, clf.predict_proba(Xt), yt)
            except ValueError as exc:
                record["fixed"][label] = {"error": str(exc)}
        record["tfidf"] = tfidf_baseline(X, y, Xt, yt)
        if search is not None:
            record.update(searched(search, base, X, y, Xt, yt, repeats, fit_s))
            try:  # a class of one text leaves the head's own folds nothing to hold out
                record["stacked_heads"] = stacked_heads(search, base, X, y, Xt, yt)
            except ValueError as exc:
                record["stacked_heads"] = {"error": str(exc)}
            if wide:
                record["fit"].update(wide_test(search, pool.drop(train.index), wide, seed))
    record["warnings"] = dict(Counter(str(w.message)[:300] for w in caught))
    return record


def wide_test(search: Any, rest: Any, wide: int, seed: int) -> dict[str, Any]:
    """The fit, without and with its temperature, scored on ``wide`` pool texts
    it was not trained on (a lower ECE floor than 300 test texts leave)."""
    Xw, yw = wide_texts(rest, wide, seed)
    without = scores(search.classes_, search.best_estimator_.predict_proba(Xw), yw)
    return {"wide_test": {**without, "texts": len(yw)},
            "wide_test_with_temperature": scores(search.classes_, search.predict_proba(Xw), yw)}


def stacked_heads(search: Any, base: dict[str, Any], X: list[str], y: np.ndarray, Xt: list[str],
                  yt: np.ndarray) -> dict[str, Any]:
    """Issue 54 item 4: the stacked candidate's head as the search fits it
    (the average of its C-search's fold regressions) and refitted once on
    every text at the chosen C (the same standardised logistic regression,
    built here: not adopted, so not in the package), per class weight,
    scored on the test texts.
    The training features are the scoring's reads (``read_reader``, served by
    the read store where one is set); the test features the readers' own."""
    from sklearn.base import clone
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from llm_label_clf import LLMLabelClassifier
    from llm_label_clf.fitting.calibration import learned_seed
    from llm_label_clf.selection.reads import read_reader
    from llm_label_clf.selection.scores import StackingHead

    y_index = np.searchsorted(search.classes_, y)
    readers = [LLMLabelClassifier(**base).set_params(**{**p, "calibration": None}).fit(X, y) for p in search.readers_]
    train = np.hstack([read_reader(r, [{"text": t} for t in X], y_index, "bench").reads.class_logprobs
                       for r in readers])
    test = np.hstack([r.transform(Xt) for r in readers])
    out: dict[str, Any] = {}
    seed = learned_seed(clone(base["random_state"], safe=False))
    for weight in (None, "balanced"):
        head = StackingHead(weight, seed).fit(train, y)
        refit = make_pipeline(StandardScaler(), LogisticRegression(C=head.calibrator_.C, class_weight=weight,
                                                                   max_iter=1000)).fit(train, y)
        out[f"{weight or 'none'}/average"] = scores(head.classes_, head.predict_proba(test), yt)
        out[f"{weight or 'none'}/refit"] = scores(refit.classes_, refit.predict_proba(test), yt)
    return out


def searched(search: Any, base: dict[str, Any], X: list[str], y: np.ndarray, Xt: list[str], yt: np.ndarray,
             repeats: int, fit_s: float) -> dict[str, Any]:
    """The search's candidates and the real fit's numbers of one draw."""
    from llm_label_clf import LLMLabelClassifier

    cv = search.cv_results_
    table = split_table(cv)
    complexity = np.asarray(cv["complexity"], dtype=np.int64)
    n_folds = int(getattr(search, "n_folds_", table.shape[1] // repeats))
    rows = [{"params": jsonable(params), "chose": chose(params), "complexity": int(c)}
            for params, c in zip(cv["params"], complexity, strict=True)]
    without = search.best_estimator_.predict_proba(Xt)
    test_without = scores(search.classes_, without, yt)
    alone = None  # the pick fitted alone, to check the refit; a stacked pick's refit is its only fit
    if not search.best_params_.get("stack"):
        try:
            alone = LLMLabelClassifier(**base).set_params(**search.best_params_).fit(X, y).predict_proba(Xt)
        except ValueError as exc:  # recorded on the pick's row, not raised: the draw's other numbers stand
            rows[search.best_index_]["error"] = str(exc)
    fit = {
        "best_index": int(search.best_index_), "best_params": jsonable(search.best_params_),
        "chose": chose(search.best_params_), "best_score": float(search.best_score_),
        "held_out_score": float(search.held_out_score_), "held_out_score_sem": float(search.held_out_score_sem_),
        "temperature": None if search.temperature_ is None else float(search.temperature_),
        "n_splits": int(search.n_splits_), "n_folds": n_folds, "split_columns": int(table.shape[1]), "fit_s": fit_s,
        "fit_cost": {k: v.item() if isinstance(v, np.generic) else v for k, v in search.fit_cost_.items()},
        # the default (recalibrate=None) gives best_estimator_'s probabilities; "test" was with the
        # temperature in the first sst2 draws, which fitted recalibrate="temperature" as their default
        "test": test_without, "test_without_temperature": test_without,
        # the pick's loss on every test text, in test-set order: the test set is one sample shared by every
        # draw, so its own sampling error (a bootstrap over these) belongs in the estimate's error bar too
        "test_losses": [round(float(v), 5) for v in
                        -np.log(np.clip(without[np.arange(len(yt)), np.searchsorted(search.classes_, yt)], 1e-12, 1))],
        "test_with_temperature": scores(search.classes_, search.predict_proba(Xt), yt),
        "pick_complexity": int(complexity[search.best_index_]),
        # small_data's unscored fallback: the last row, and no other pick lacks a mean
        "fallback": bool(np.isnan(search.best_score_)) and int(search.best_index_) == len(cv["params"]) - 1,
        "refit_vs_candidate_max_abs": None if alone is None else float(np.abs(alone - without).max()),
    }
    return {"candidates": rows, "cv_splits": np.round(table, 6).tolist(), "complexity": complexity.tolist(),
            "fit": fit}


# ------------------------------------------------------------- aggregates


def mean_se(values: list[float | None]) -> list[float | int | None]:
    """[mean, standard error, count] of the values that are numbers."""
    v = np.array([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if not len(v):
        return [None, None, 0]
    return [float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else None, len(v)]


def _acc(r: dict[str, Any] | None) -> float | None:
    return None if not r or "accuracy" not in r else r["accuracy"]


def _diff(a: float | None, b: float | None, scale: float = 100.0) -> float | None:
    return None if a is None or b is None else scale * (a - b)


def aggregate(draws: list[dict[str, Any]]) -> dict[str, Any]:
    """The real fit over the draws of one dataset and size (``fit``; None
    where every fit raised): mean, SE and count of accuracy differences
    (points), macro-F1, log-loss, ECE, the estimate's bias against the pick's
    test neg-log-loss, its temperature and cost; and the fixed baselines."""
    def best_fixed(r: dict[str, Any]) -> str | None:
        ok = {k: v["accuracy"] for k, v in r["fixed"].items() if "accuracy" in v}
        return max(ok, key=ok.__getitem__) if ok else None

    rows: list[dict[str, Any]] = []
    picks: Counter = Counter()
    for r in draws:
        if "fit" not in r:
            continue
        f = r["fit"]
        acc, best, zero = _acc(f["test"]), best_fixed(r), r["fixed"].get("zero-shot") or {}
        loss = -f["test_without_temperature"]["log_loss"]
        rows.append({
            "vs_best_fixed": _diff(acc, _acc(r["fixed"].get(best)) if best else None),
            "vs_zero_shot": _diff(acc, _acc(r["fixed"].get("zero-shot"))),
            "vs_batch": _diff(acc, _acc(r["fixed"].get(BATCH))),
            **{m: f["test"].get(m) for m in ("accuracy", "macro_f1", "log_loss", "ece", "ece_floor")},
            "ece_without_temperature": f["test_without_temperature"]["ece"],
            "log_loss_without_temperature": f["test_without_temperature"]["log_loss"],
            **dict(zip(("estimate_bias", "estimate_covers"), estimate_against(f, -loss), strict=True)),
            "cv_mean_bias": f["best_score"] - loss,
            "log_loss_vs_zero_shot": _diff(-loss, zero.get("log_loss"), 1.0),
            "worse_than_zero_shot_005": None if "log_loss" not in zero else float(-loss - zero["log_loss"] > 0.05),
            "temperature": f["temperature"], "zero_shot_passes": f["fit_cost"].get("zero_shot_passes"),
            **temperature_variants(f),
            "fit_cost_seconds": f["fit_cost"].get("seconds"), "fit_s": f["fit_s"],
            "fallback": float(f.get("fallback", False)), **wide_fields(f), **stacked_gains(r),
            "estimate_covers_with_test_error": covers_with_test_error(f)})
        picks[f["chose"]] += 1
    out: dict[str, Any] = {"draws": len(draws), "fit": None}
    if rows:
        keys = dict.fromkeys(key for row in rows for key in row)  # newer draws record more
        out["fit"] = {key: mean_se([row.get(key) for row in rows]) for key in keys}
        out["fit"]["picks"] = dict(picks.most_common())
    out["baselines"] = {label: mean_se([_acc(r["fixed"].get(label)) for r in draws])
                        for label in ("zero-shot", BATCH)}
    out["baselines"]["best fixed (oracle)"] = mean_se([_acc(r["fixed"].get(best_fixed(r) or "")) for r in draws])
    out["baselines"]["TF-IDF + LR"] = mean_se([_acc(r["tfidf"]) for r in draws])
    out["best_fixed_modes"] = dict(Counter(best_fixed(r) for r in draws).most_common())
    return out


def stacked_gains(r: dict[str, Any]) -> dict[str, float]:
    """For draws that recorded ``stacked_heads``: per class weight, the test
    log-loss of the averaged head minus the head refitted at its C (+: the
    refit is better)."""
    heads = r.get("stacked_heads") or {}
    return {f"stacked_refit_gain_{w}": heads[f"{w}/average"]["log_loss"] - heads[f"{w}/refit"]["log_loss"]
            for w in ("none", "balanced") if f"{w}/average" in heads}


def covers_with_test_error(f: dict[str, Any]) -> float | None:
    """1.0 where ``held_out_score_`` is within 2 standard errors of the test
    score when the test texts' own sampling error (their per-text losses'
    standard error) is counted beside ``held_out_score_sem_``, else 0.0."""
    losses = np.asarray(f.get("test_losses") or [], dtype=np.float64)
    est, sem = f["held_out_score"], f["held_out_score_sem"]
    if losses.size < 2 or not (np.isfinite(est) and np.isfinite(sem)):
        return None
    test_se = losses.std(ddof=1) / np.sqrt(losses.size)
    return float(abs(est + losses.mean()) <= 2 * np.hypot(sem, test_se))


def wide_fields(f: dict[str, Any]) -> dict[str, float]:
    """For draws run with ``--wide``: the fit's wide-test scores, and its
    ECE there with the temperature always and on stacked picks only."""
    if "wide_test" not in f:
        return {}
    wide, with_t = f["wide_test"], f["wide_test_with_temperature"]
    bias, covers = estimate_against(f, wide["log_loss"])  # texts drawn afresh per draw: no luck shared by the draws
    return {**{f"wide_{k}": wide[k] for k in ("texts", "accuracy", "ece", "ece_floor", "log_loss", "overconfidence")},
            "wide_ece_with_temperature": with_t["ece"],
            "wide_ece_temperature_if_stacked": (with_t if f["pick_complexity"] == 3 else wide)["ece"],
            "wide_estimate_bias": bias, "wide_estimate_covers": covers}


def estimate_against(f: dict[str, Any], log_loss: float) -> tuple[float, float | None]:
    """The fit's ``held_out_score_`` minus the score of test texts whose
    log-loss is ``log_loss`` (+ is optimistic), and 1.0 where
    ``held_out_score_ ± 2 * held_out_score_sem_`` covers that score, else
    0.0 (None where the estimate or its error is NaN)."""
    est, sem = f["held_out_score"], f["held_out_score_sem"]
    covers = float(abs(est + log_loss) <= 2 * sem) if np.isfinite(est) and np.isfinite(sem) else None
    return est + log_loss, covers


def bias_missed(mean: float | None, se: float | None) -> bool:
    """Issue 43's aim for the estimate's mean bias over draws: within ±0.03
    nats or two standard errors, where that is wider."""
    return mean is not None and abs(mean) > max(0.03, 2 * (se or 0))


def temperature_variants(f: dict[str, Any]) -> dict[str, float | None]:
    """For draws that recorded both: the pick's test ECE, log-loss and
    overconfidence with its temperature always, and with it only on few-shot
    and stacked picks (complexity >= 2; item 4 of issue 28)."""
    with_t, without = f.get("test_with_temperature"), f["test_without_temperature"]
    if with_t is None:
        return {}
    complex_pick = f["pick_complexity"] >= 2
    out: dict[str, float | None] = {"overconfidence": without.get("overconfidence")}
    for metric in ("ece", "log_loss", "overconfidence"):
        out[f"{metric}_with_temperature"] = with_t.get(metric)
        out[f"{metric}_temperature_if_complex"] = (with_t if complex_pick else without).get(metric)
    return out


def aggregates(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``aggregate`` per dataset and size (as strings)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in doc["draws"].values():
        groups.setdefault((r["dataset"], r["n"]), []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for (name, n), draws in sorted(groups.items(), key=lambda item: (list(SETS).index(item[0][0]), item[0][1])):
        out.setdefault(name, {})[str(n)] = aggregate(draws)
    return out


# ---------------------------------------------------------------- Markdown


def pm(cell: list[Any] | None, digits: int = 1, sign: bool = True) -> str:
    if not cell or cell[0] is None:
        return "–"
    text = f"{cell[0]:+.{digits}f}" if sign else f"{cell[0]:.{digits}f}"
    return text + (f" ± {cell[1]:.{digits}f}" if cell[1] is not None else "")


def machine_line(doc: dict[str, Any]) -> str:
    """The machines the draws ran on, one entry per CPU kind and engine dtype,
    each with its sessions' dates and load and the cells whose draws it ran
    (every session is itemised in the JSON's ``sessions``)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for index, s in enumerate(doc["sessions"]):
        m = s["machine"]
        key = (m["cpu_model"], m["cpu_capability"], str(m["cores_usable"]), s.get("engine_dtype", "?"))
        groups.setdefault(key, []).append(index)
    parts = []
    for (cpu, capability, cores, dtype), indices in groups.items():
        sessions = [doc["sessions"][i] for i in indices]
        starts = [s["load_avg_start"] for s in sessions]
        ends = [s.get("load_avg_end", float("nan")) for s in sessions]
        cells: dict[tuple[str, int], int] = {}
        for r in doc["draws"].values():
            if r.get("session") in indices:
                cells[(r["dataset"], r["n"])] = cells.get((r["dataset"], r["n"]), 0) + 1
        ran = ", ".join(f"{name}/{n} ×{count}" for (name, n), count in sorted(cells.items()))
        parts.append(f"{cpu} ({capability}, {cores} cores), engine dtype {dtype}: {len(sessions)} sessions from "
                     f"{sessions[0]['started']} to {sessions[-1]['started']}, load average "
                     f"{min(starts):.1f}–{max(starts):.1f} at start and {min(ends):.1f}–{max(ends):.1f} at end; "
                     f"draws (dataset/texts ×draws) {ran or 'none (wide tests and reruns only)'}")
    return ("Run on " + "; and on ".join(parts) + ". Each session's machine, load and "
            "arguments are in the results JSON.")


def sizes_of(agg: dict[str, dict[str, Any]]) -> list[str]:
    return sorted({n for per in agg.values() for n in per}, key=int)


def repeats_used(doc: dict[str, Any]) -> str:
    """Each dataset's fit repeats (its draws record them; the first sst2 draws are from before they did)."""
    used: dict[str, set[int]] = {}
    for r in doc["draws"].values():
        used.setdefault(r["dataset"], set()).add(int(r.get("repeats", doc["protocol"]["repeats"])))
    return ", ".join(f"{name} {'/'.join(map(str, sorted(rs)))}" for name, rs in used.items())


def markdown(doc: dict[str, Any]) -> str:
    agg = doc["aggregates"]
    p = doc["protocol"]
    lines = [
        "# Cross-validated selection against fixed modes, over random training sets", "",
        machine_line(doc), "",
        (f"Per dataset a fixed stratified test set of {p['test']} texts (seed {TEST_SEED}); training sets drawn "
         f"from the other rows ({p['draws']} draws per size, every class at least once). One "
         "`LLMLabelClassifierCV` fit per draw with its defaults (`rule=\"guarded\"` since 2026-12-04, "
         "`rule=\"best\"` before, `small_data=\"fallback\"`, no temperature) and "
         f"`n_repeats` per dataset: {repeats_used(doc)} (the first sst2 draws fitted `rule=\"one_se\"` with a "
         "temperature; the 16-text draws and one 32-text draw before `small_data` existed fitted the search alone, and "
         "were rerun where the fallback fires). "
         "Differences are in accuracy points (mean ± SE over draws); the best fixed mode is chosen per draw by "
         "test accuracy (an oracle). ECE and log-loss are without temperature; "
         "ECE floor: what perfectly calibrated probabilities would show on these test texts (labels drawn from "
         "the predicted probabilities), the noise an ECE of 300 texts carries. Bias: estimate − "
         "the pick's test neg-log-loss (no temperature). The selection variants (other rules, repeats and "
         "candidate sets on the same split scores) of draws run before issue 53 are in the JSON; their tables "
         "are this page at commit 75ea201."), "",
        "Design sets (defaults chosen here): " + ", ".join(k for k, v in SETS.items() if v[1] == "design")
        + ". Report sets (run only to report): " + ", ".join(k for k, v in SETS.items() if v[1] == "report") + "."
        + public_note(doc, "Public sets (built by `bench/public_sets.py`, run only to report): {}."),
    ]
    for name, info in doc["datasets"].items():
        lines.append(f"- {name} ({info['set']}): `{info['file']}`, {info['classes']} classes, {info['test']} test "
                     f"texts, a pool of {info['pool']} to draw from.")
    lines += [f"- Note: {note}" for note in doc.get("notes", [])]
    lines.append("")
    for kind in KINDS:
        for n in sizes_of(agg):
            names = [name for name in agg if SETS[name][1] == kind and n in agg[name]]
            if not names:
                continue
            lines += [f"## {kind.capitalize()} sets, {n} training texts", "",
                      "| dataset | accuracy | CV − best fixed | CV − zero-shot | CV − batch | macro-F1 | ECE "
                      "| log-loss | estimate bias | CV-mean bias | most picked |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
            for name in names:
                c = agg[name][n]["fit"]
                if c is None:
                    continue
                top = next(iter(c["picks"].items()), ("–", 0))
                lines.append(
                    f"| {name} | {pm(c['accuracy'], 3, False)} "
                    f"| {pm(c['vs_best_fixed'])} | {pm(c['vs_zero_shot'])} | {pm(c['vs_batch'])} "
                    f"| {pm(c['macro_f1'], 3, False)} | {pm(c['ece'], 3, False)} | {pm(c['log_loss'], 3, False)} "
                    f"| {pm(c['estimate_bias'], 3)} | {pm(c['cv_mean_bias'], 3)} | {top[0]} ({top[1]}) |")
            lines += ["", "| dataset | draws | zero-shot | batch (y) | best fixed (oracle) | TF-IDF + LR | fit: ECE "
                      "without temperature | temperature | zero-shot passes | fit s | fit_cost_ s "
                      "| fallback | best fixed modes |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
            for name in names:
                a, f = agg[name][n], agg[name][n]["fit"]
                b = a["baselines"]
                fit_cells = ("| – " * 6 if f is None else
                             f"| {pm(f['ece_without_temperature'], 3, False)} | {pm(f['temperature'], 2, False)} "
                             f"| {pm(f['zero_shot_passes'], 1, False)} | {pm(f['fit_s'], 0, False)} "
                             f"| {pm(f['fit_cost_seconds'], 0, False)} "
                             f"| {pm(f.get('fallback', [0.0, None, 0]), 2, False)} ")
                modes = ", ".join(f"{k} ({v})" for k, v in a["best_fixed_modes"].items())
                lines.append(f"| {name} | {a['draws']} | {pm(b['zero-shot'], 3, False)} | {pm(b[BATCH], 3, False)} "
                             f"| {pm(b['best fixed (oracle)'], 3, False)} | {pm(b['TF-IDF + LR'], 3, False)} "
                             f"{fit_cells}| {modes} |")
            lines.append("")
    lines += ["## The default fit's aims, its wide tests and temperatures", "", *summary(doc).splitlines()[1:-1]]
    lines += wide_table(agg)
    lines += stacked_table(agg)
    lines += temperature_table(agg)
    return "\n".join(lines) + "\n"


def aims(f: dict[str, Any]) -> list[str]:
    """Which of issue 43's aims a cell of the default fit misses: estimate −
    test within ±0.03 nats or two standard errors, ±2 SE covering the test
    score in ≥ 80% of draws, log-loss no worse than zero-shot's on average,
    worse by > 0.05 nats in ≤ 1 draw in 10, CV ≥ best fixed − 1 point and ≥
    zero-shot (each within one standard error), ≤ 10 zero-shot passes."""
    missed = []
    bias, covers = f.get("estimate_bias", [None, None]), f.get("estimate_covers", [None])
    if bias_missed(bias[0], bias[1]):
        missed.append("estimate bias")
    if covers[0] is not None and covers[0] < 0.8:
        missed.append("coverage")
    loss, worse = f.get("log_loss_vs_zero_shot", [None]), f.get("worse_than_zero_shot_005", [None, None, 0])
    if loss[0] is not None and loss[0] > 0:
        missed.append("log-loss above zero-shot's")
    if worse[0] is not None and worse[0] > 0.1 + 1e-9:
        missed.append("draws worse than zero-shot")
    best, zero = f["vs_best_fixed"], f["vs_zero_shot"]
    if best[0] is not None and best[0] + (best[1] or 0) < -1:
        missed.append("accuracy vs best fixed")
    if zero[0] is not None and zero[0] + (zero[1] or 0) < 0:
        missed.append("accuracy vs zero-shot")
    if f["zero_shot_passes"][0] is not None and f["zero_shot_passes"][0] > 10:
        missed.append("passes")
    return missed


def public_note(doc: dict[str, Any], text: str) -> str:
    """A space and ``text`` with the public sets ``doc`` ran filled in, or
    nothing where it ran none (pages of runs without them render as they were)."""
    ran = [name for name in doc["datasets"] if SETS[name][1] == "public"]
    return " " + text.format(", ".join(ran)) if ran else ""


def summary(doc: dict[str, Any]) -> str:
    """The block for docs/guide/learning.md, between its selection markers:
    the default fit, one row per dataset and size, and which aims it meets
    (the temperatures and wide tests are in the full page)."""
    agg, p = doc["aggregates"], doc["protocol"]
    lines = ["<!-- selection:start -->", machine_line(doc), "",
             (f"Protocol: per dataset a fixed test set of {p['test']} texts and {p['draws']} random training sets "
              "per size; one default `LLMLabelClassifierCV(LLMLabelClassifier(random_state=0))` fit per draw. "
              "Mean ± standard error over the draws; accuracy differences in points; \"best fixed\" is the fixed "
              "mode with the best *test* accuracy in each draw (an oracle no user has); ECE beside its floor is in "
              "the full results page. Defaults were chosen on the "
              "design sets (" + ", ".join(k for k, v in SETS.items() if v[1] == "design") + ") only."
              + public_note(doc, "The public sets ({}) are reported only.")), "",
             "| dataset | texts | draws | accuracy | CV − best fixed | CV − zero-shot "
             "| test log-loss − `-held_out_score_` | ±2 SE covers test | log-loss − zero-shot's "
             "| draws worse by > 0.05 | zero-shot passes |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    verdicts = []
    order = {"report": 0, "design": 1, "public": 2}  # the report sets first, as the learning page has them
    for name in sorted(agg, key=lambda k: (order[SETS[k][1]], k)):
        for n in sorted(agg[name], key=int):
            a = agg[name][n]
            f = a["fit"]
            if f is None:
                continue
            covers, worse = f.get("estimate_covers", [None]), f.get("worse_than_zero_shot_005", [None, None, 0])
            lines.append(f"| {name} ({SETS[name][1]}) | {n} | {a['draws']} | {pm(f['accuracy'], 3, False)} "
                         f"| {pm(f['vs_best_fixed'])} | {pm(f['vs_zero_shot'])} "
                         f"| {pm(f['estimate_bias'], 3)} "
                         f"| {'–' if covers[0] is None else f'{covers[0]:.0%}'} "
                         f"| {pm(f.get('log_loss_vs_zero_shot'), 3)} "
                         f"| {'–' if worse[0] is None else f'{round(worse[0] * worse[2])} of {worse[2]}'} "
                         f"| {pm(f['zero_shot_passes'], 1, False)} |")
            missed = aims(f)
            failed = sum("fit_error" in r for r in doc["draws"].values() if r["dataset"] == name and str(r["n"]) == n)
            if failed:
                missed.append(f"the fit raised in {failed} of {a['draws']} draws")
            if missed:
                verdicts.append(f"{name} at {n}: {', '.join(missed)}")
    lines += ["", "Aims (estimate − test within ±0.03 nats or 2 SE; ±2 SE covers in ≥ 80% of draws; log-loss "
              "≤ zero-shot's, worse by > 0.05 in ≤ 1 draw in 10; CV ≥ best fixed − 1 point and ≥ zero-shot; ≤ 10 "
              "passes): " + ("every row meets them." if not verdicts else "missed by " + "; ".join(verdicts) + ".")]
    return "\n".join([*lines, "<!-- selection:end -->"]) + "\n"


def fit_table(agg: dict[str, dict[str, Any]], key: str, intro: str,
              columns: list[tuple[str, str, int, bool]]) -> list[str]:
    """Lines of a table of the fit's aggregates, one row per dataset and size
    whose draws recorded ``key`` (its count is the draws column), after the
    paragraph ``intro``; ``columns`` are (header, field, digits, signed)."""
    rows = [f"| {name} ({SETS[name][1]}) | {n} | {f[key][2]} | "
            + " | ".join(pm(f.get(field), digits, signed) for _, field, digits, signed in columns) + " |"
            for name, sizes in agg.items() for n, a in sizes.items()
            if (f := a["fit"] or {}).get(key, [None])[0] is not None]
    if not rows:
        return []
    return ["", intro, "", "| dataset | texts | draws | " + " | ".join(c[0] for c in columns) + " |",
            "|---|---:|---:|" + "---:|" * len(columns), *rows]


def wide_table(agg: dict[str, dict[str, Any]]) -> list[str]:
    """The fit on its wide test (``wide_test``), where the ECE floor is lower."""
    return fit_table(agg, "wide_ece", (
        "The same fits on a wide test: texts drawn per draw from the pool rows it was not trained on "
        "(`--wide`), where the ECE floor is about half that of 300 texts; only the fit is read there."), [
        ("wide-test texts", "wide_texts", 0, False), ("accuracy", "wide_accuracy", 3, False),
        ("ECE", "wide_ece", 3, False), ("ECE floor", "wide_ece_floor", 3, False),
        ("ECE, T always", "wide_ece_with_temperature", 3, False),
        ("ECE, T on stacked picks", "wide_ece_temperature_if_stacked", 3, False),
        ("log-loss", "wide_log_loss", 3, False), ("overconfidence", "wide_overconfidence", 3, True),
        ("`held_out_score_` − wide-test score", "wide_estimate_bias", 3, True),
        ("±2 SE covers it (share of draws)", "wide_estimate_covers", 2, False)])


def stacked_table(agg: dict[str, dict[str, Any]]) -> list[str]:
    """Issue 54 item 4: the stacked head refitted at its chosen C against
    the fold average it is, and the estimate's coverage with the test
    texts' own sampling error counted."""
    return fit_table(agg, "stacked_refit_gain_none", (
        "The stacked candidate's head, in every draw whether picked or not: test log-loss of the average of its "
        "C-search's fold regressions (as fitted) minus that of one regression refitted on every text at the "
        "chosen C (+: the refit is better); and how often ±2 SE covers the test score when the test texts' own "
        "sampling error is counted beside `held_out_score_sem_`."), [
        ("refit gain, no class weight", "stacked_refit_gain_none", 3, True),
        ("refit gain, balanced", "stacked_refit_gain_balanced", 3, True),
        ("±2 SE covers, test error counted", "estimate_covers_with_test_error", 2, False)])


def temperature_table(agg: dict[str, dict[str, Any]]) -> list[str]:
    """The fit's test ECE and log-loss as the default gives them, with the
    temperature always, and with it on few-shot and stacked picks only;
    overconfidence is mean top-label probability minus accuracy."""
    return fit_table(agg, "ece_with_temperature", (
        "The held-out temperature (`recalibrate=\"temperature\"`), recorded beside the default fit: ECE "
        "and log-loss as the default gives them, with the temperature on every pick, and only on few-shot "
        "and stacked picks; overconfidence is the mean top-label probability minus accuracy. Every draw "
        "here was run before 2026-12-04, with the temperature unshrunk (`temperature.shrunk` now keeps "
        "m / (m + 64) of its log)."), [
        ("ECE", "ece", 3, False), ("ECE, T always", "ece_with_temperature", 3, False),
        ("ECE, T on few-shot/stacked", "ece_temperature_if_complex", 3, False), ("log-loss", "log_loss", 3, False),
        ("log-loss, T always", "log_loss_with_temperature", 3, False),
        ("log-loss, T on few-shot/stacked", "log_loss_temperature_if_complex", 3, False),
        ("overconfidence", "overconfidence", 3, True),
        ("overconfidence, T always", "overconfidence_with_temperature", 3, True)])


def pages(name: str, doc: dict[str, Any], *, record: bool = True) -> str:
    """The aggregates of ``doc``'s draws, then ``NAME.json`` (with ``record``),
    ``NAME.md`` and ``NAME-summary.md`` in bench/results; returns the summary."""
    doc["aggregates"] = aggregates(doc)
    if record:
        common.write(name, doc, markdown)
    else:
        (common.RESULTS / f"{name}.md").write_text(markdown(doc))
    text = summary(doc)
    (common.RESULTS / f"{name}-summary.md").write_text(text)
    return text


def prewarm(test: Any) -> None:
    """The zero-shot readers' reads of the test texts, made once per dataset."""
    from llm_label_clf import LLMLabelClassifier
    from llm_label_clf.selection.candidates import DEFAULT_PROMPTS

    Xt, yt = test["text"].tolist(), test["label"].to_numpy()
    for prompt in DEFAULT_PROMPTS:
        LLMLabelClassifier(progress=False, low_mass="ignore", **prompt).fit(Xt, yt).predict_proba(Xt)


def chosen_sets(datasets: list[str] | None, kind: str) -> list[str]:
    """The datasets a run takes: ``datasets`` (default: ``DEFAULT_DATASETS``,
    or every public set where ``kind`` is "public") of ``kind`` ("all": any).
    Exits naming them where none is of that kind."""
    public = [name for name, (_, of) in SETS.items() if of == "public"]
    named = datasets or (public if kind == "public" else DEFAULT_DATASETS)
    names = [name for name in named if kind in ("all", SETS[name][1])]
    if not names:
        raise SystemExit(f"--set {kind}: none of {named} is a {kind} set; name one or give --set all")
    return names


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--datasets", nargs="+", choices=list(SETS),
                        help="default: the design and report sets but banking77 (with --set public: the public sets)")
    parser.add_argument("--set", choices=(*KINDS, "all"), default="all",
                        help="run only the named or default datasets of this kind (public: only the public sets)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--test", type=int, default=300)
    parser.add_argument("--test-from-pool", action="store_true",
                        help="split the test texts off the training file where a dataset has one (TREC): "
                        "test and training texts drawn alike")
    parser.add_argument("--repeats", type=int, default=4,
                        help="the fit's n_repeats (the default estimator has 1: what report runs use)")
    parser.add_argument("--resume", action="store_true", help="keep the draws already in the JSON, skip them")
    parser.add_argument("--wide", type=int, default=0, metavar="TEXTS",
                        help="also score the fit on this many texts of the pool it was not trained on (per draw)")
    parser.add_argument("--name", default="selection-protocol",
                        help="the results' file name in bench/results (a new protocol run beside the recorded one)")
    parser.add_argument("--refit-picks", metavar="SOURCE",
                        help="copy results SOURCE to --name and refit its few-shot picks with the current code "
                        "(issue 54's refit fix; `refit_picks`)")
    args = parser.parse_args()
    if args.render:
        print(pages(args.name, common.load(args.name), record=False))
        return
    names = chosen_sets(args.datasets, args.set)
    if args.refit_picks:
        doc = common.load(args.refit_picks)
        doc["sessions"].append({"machine": common.machine(), "load_avg_start": os.getloadavg()[0],
                                "started": time.strftime("%Y-%m-%d %H:%M"), "args": vars(args),
                                "commit": common.commit(), "refit_picks": refit_picks(doc, names, args.test)})
        doc["sessions"][-1]["load_avg_end"] = os.getloadavg()[0]
        print(pages(args.name, doc))
        return
    from llm_label_clf import engine_info
    from llm_label_clf.reading.cache import ReadCache

    path = common.RESULTS / f"{args.name}.json"
    protocol = {"test": args.test, "repeats": args.repeats, "draws": args.draws, "test_seed": TEST_SEED}
    if args.test_from_pool:
        protocol["test_from_pool"] = True
    doc: dict[str, Any] = {"protocol": protocol, "sessions": [], "datasets": {}, "notes": [], "draws": {}}
    if args.resume and path.exists():
        doc = common.load(args.name)
        # each draw records its own repeats; the test set must be the same
        same = ("test", "test_seed", "test_from_pool")
        if {k: doc["protocol"].get(k) for k in same} != {k: protocol.get(k) for k in same}:
            raise SystemExit(f"--resume: {path} was run with {doc['protocol']}; these arguments say {protocol}")
        doc["protocol"]["draws"] = max(doc["protocol"]["draws"], args.draws)
    elif path.exists():
        path.rename(path.with_suffix(".json.bak"))
    session = {"machine": common.machine(), "load_avg_start": os.getloadavg()[0],
               "started": time.strftime("%Y-%m-%d %H:%M"), "args": vars(args), "commit": common.commit(),
               "read_store": os.environ.get("LLM_LABEL_CLF_READ_STORE")}
    doc["sessions"].append(session)
    began = time.perf_counter()
    for name in names:
        test, pool = test_and_pool(name, args.test, args.test_from_pool)
        n_classes = test["label"].nunique()
        doc["datasets"][name] = {"file": test_file(name, args.test_from_pool), "set": SETS[name][1],
                                 "classes": n_classes, "test": len(test), "pool": len(pool)}
        sizes = [n for n in args.sizes if n >= n_classes]
        notes = [f"{name}: {n} texts skipped, fewer than its {n_classes} classes"
                 for n in sorted(set(args.sizes) - set(sizes))]
        if any(n > len(pool) / 2 for n in sizes):
            notes.append(f"{name}: a pool of {len(pool)} texts, so draws of more than half of it share many texts")
        doc["notes"] += [note for note in notes if note not in doc["notes"]]
        pending = [(d, n) for d in range(args.draws) for n in sizes if f"{name}/{n}/{d}" not in doc["draws"]]
        if not pending:
            continue
        cache = ReadCache()  # one per dataset: every fit and draw reuses its reads
        with cache.active():
            prewarm(test)
            mark = len(cache.entries)
            for d, n in pending:
                key = f"{name}/{n}/{d}"
                reads, start = cache.reads, time.perf_counter()
                record = one_draw(name, n, d, test, pool, args.repeats, args.wide)
                record.update(session=len(doc["sessions"]) - 1, seconds=time.perf_counter() - start,
                              engine_reads=cache.reads - reads)
                # this draw's reads (its training texts, its few-shot prompts) recur in no other draw:
                # dropped, so memory stays bounded and every fit makes its own reads
                for entry in list(cache.entries)[mark:]:
                    del cache.entries[entry]
                doc["draws"][key] = record
                info = engine_info()
                session["engine_dtype"] = ((info["engines"][0]["settings"] or {}).get("dtype", "?")
                                           if info["engines"] else "?")
                session["load_avg_end"], session["finished"] = os.getloadavg()[0], time.strftime("%Y-%m-%d %H:%M")
                pages(args.name, doc)
                print(draw_line(record, time.perf_counter() - began), flush=True)
    print(pages(args.name, doc))


def refit_picks(doc: dict[str, Any], names: list[str], test_size: int) -> list[str]:
    """Issue 54's refit fix on draws run before it: where a draw's pick is one
    few-shot reader whose calibration ("learned", "auto") its fit estimates
    from the training texts' reads, the pick is refitted with the current code
    and scored on the test texts again; the search (its scores, choice and
    estimate) is unchanged by the fix and kept. The old test scores stay
    under ``before_refit_fix``. Batch picks are kept: on a 300-text call
    their bias is the call's own. Returns a line per draw refitted."""
    from scipy.special import softmax

    from llm_label_clf import LLMLabelClassifier

    said = []
    for name in names:
        test, pool = test_and_pool(name, test_size)
        Xt, yt = test["text"].tolist(), test["label"].to_numpy()
        for key, r in doc["draws"].items():
            f = r.get("fit")
            params = (f or {}).get("best_params") or {}
            if (r["dataset"] != name or not params.get("few_shot") or params.get("stack")
                    or params.get("calibration") not in ("learned", "auto") or "before_refit_fix" in f):
                continue
            _, train = training_draw(name, r["n"], r["draw"], pool)
            base = dict(progress=False, low_mass="ignore", random_state=r["seed"])
            clf = LLMLabelClassifier(**base).set_params(**params).fit(train["text"].tolist(), train["label"].to_numpy())
            proba = clf.predict_proba(Xt)
            f["before_refit_fix"] = {k: f[k] for k in ("test", "test_with_temperature", "test_losses")}
            f["test"] = f["test_without_temperature"] = scores(clf.classes_, proba, yt)
            f["test_losses"] = [round(float(v), 5) for v in -np.log(np.clip(
                proba[np.arange(len(yt)), np.searchsorted(clf.classes_, yt)], 1e-12, 1))]
            tempered = softmax(np.log(np.clip(proba, 1e-300, None)) / (f["temperature"] or 1.0), axis=1)
            f["test_with_temperature"] = scores(clf.classes_, tempered, yt)
            said.append(f"{key}: {f['chose']}: test log-loss {f['before_refit_fix']['test']['log_loss']:.3f} -> "
                        f"{f['test']['log_loss']:.3f}, accuracy {f['before_refit_fix']['test']['accuracy']:.3f} -> "
                        f"{f['test']['accuracy']:.3f}")
            print(said[-1], flush=True)
    return said


def draw_line(r: dict[str, Any], elapsed: float) -> str:
    """One printed line per draw: elapsed and draw seconds, engine reads, the fit's pick and scores."""
    zero = _acc(r["fixed"].get("zero-shot"))
    head = f"[{elapsed:7.0f} s] {r['dataset']} n={r['n']} draw {r['draw']}: {r['seconds']:.0f} s, " \
           f"{r['engine_reads']} engine reads; zero-shot {'–' if zero is None else f'{zero:.3f}'}"
    if "fit" not in r:
        return f"{head}; fit failed: {r.get('fit_error', '?')[:120]}"
    f = r["fit"]
    return (f"{head}; CV {f['test']['accuracy']:.3f}, ECE {f['test']['ece']:.3f}, T {f['temperature']:.2f}: "
            f"{f['chose']}; {f['fit_cost'].get('zero_shot_passes', float('nan')):.1f} zero-shot passes")


if __name__ == "__main__":
    main()

"""Choosing the zero-shot default, and reporting it.

``choose``: arithmetic on the reads ``zero_shot_reads.py`` saved (no engine).
Every candidate is a prompt (``zero_shot_reads.PROMPTS``), a temperature
``T`` applied to the label log-probabilities, a bias (the mean probability
over the draw's unlabelled fit texts, "bc", Zhou et al. 2024; over the
content-free inputs, "cc", Zhao et al. 2021; over random in-domain words,
"dc", Fei et al. 2023) and a class prior the debiased probabilities are
mapped to (uniform; "em": Saerens et al.'s EM over the fit texts; "cc": the
mean of the fit texts' content-free-debiased probabilities, optionally
shrunk half-way to uniform). Scored per design test set and draw (10 draws of
64 unlabelled texts, 300 test texts); candidates are ranked by the mean test
log-loss over the sets, and checked against what the issue asks of a default:
below ln K on every set, accuracy over the sets above today's default
(``plain``, uncalibrated) and on no set more than 2 points below it.

``table``: the library's default and ``calibration=None`` beside today's
default, through the real estimator, on the report test sets with fresh
draws (reads from the read store where stored). Writes
``bench/results/zero-shot.{json,md}``.

``multilabel``: the multi-label variants on saved yes/no reads (design
texts; no engine), printed. ``multilabel-table``: the library's multi-label
default against the labels' frequencies and the old default, on report test
texts with fresh draws. Writes ``bench/results/multilabel.{json,md}``.

Run: ``python bench/zero_shot_reads.py`` (the reads), then ``python
bench/zero_shot.py choose``, ``table``, ``multilabel``, ``multilabel-table``.
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import logsumexp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import results  # noqa: E402
from bench.zero_shot_reads import CACHE, PROMPTS, SETS  # noqa: E402

TODAY = ("plain", 1.0, "none", "uniform")
TEMPERATURES = (1.0, 0.7, 0.5, 0.35, 0.25)
BIASES = ("none", "bc", "cc", "dc")
PRIORS = ("uniform", "em", "cc", "cc_half", "dc", "dc_half")


def lsm(x: np.ndarray) -> np.ndarray:
    return x - logsumexp(x, axis=1, keepdims=True)


def bias_of(log_proba: np.ndarray, log_prior: np.ndarray | None = None) -> np.ndarray:
    """Log of each class's mean probability over the rows, over the prior."""
    return logsumexp(log_proba, axis=0) - np.log(len(log_proba)) - (0.0 if log_prior is None else log_prior)


def em_prior(log_proba: np.ndarray, iterations: int = 200) -> np.ndarray:
    """Saerens et al.'s EM: the class prior of the rows whose posteriors
    (under a uniform prior) are ``log_proba``."""
    k = log_proba.shape[1]
    prior = np.full(k, -np.log(k))
    for _ in range(iterations):
        new = logsumexp(lsm(log_proba + prior), axis=0) - np.log(len(log_proba))
        if np.abs(new - prior).max() < 1e-9:
            break
        prior = new
    return prior


def smoothed(log_prior: np.ndarray, n: int) -> np.ndarray:
    """A prior from ``n`` texts with one pseudo-text per class."""
    k = len(log_prior)
    return np.log((np.exp(log_prior) * n + 1) / (n + k))


def candidate_log_proba(reads: dict[str, np.ndarray], t: float, bias: str, prior: str) -> np.ndarray:
    """The test texts' log-probabilities under one (T, bias, prior) from one
    draw's reads: ``test``, ``fit``, ``cf`` and ``dc`` label logprobs."""
    test, fit, cf, dc = (lsm(t * reads[k]) for k in ("test", "fit", "cf", "dc"))
    k, n = test.shape[1], len(fit)
    uniform = np.full(k, -np.log(k))
    if prior == "uniform":
        log_prior = uniform
    elif prior == "em":
        log_prior = smoothed(em_prior(lsm(fit - bias_of(cf))), n)
    else:
        mean = bias_of(lsm(fit - bias_of(dc if prior.startswith("dc") else cf)))
        log_prior = smoothed(mean if not prior.endswith("_half") else lsm((mean + uniform)[None, :] / 2)[0], n)
    if bias == "none":
        return lsm(test + log_prior - uniform)
    if bias == "bc":
        return lsm(test - bias_of(fit, log_prior))
    return lsm(test - bias_of(cf if bias == "cc" else dc) + log_prior)


def load(name: str, prompt: str) -> dict[str, Any] | None:
    path = CACHE / f"{name}--{prompt}--10x64.npz"
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=True) as data:
        return {k: data[k] for k in data.files}


def draws_of(data: dict[str, Any]) -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    """The test labels as class indices, and each draw's reads."""
    classes = list(data["classes"])
    y = np.searchsorted(classes, data["test_y"])
    where = {r: i for i, r in enumerate(data["fit_rows"])}
    draws = [
        {"test": data["test_lp"], "fit": data["fit_lp"][[where[r] for r in rows]], "cf": data["cf_lp"],
         "dc": data["dc_lp"][d]}
        for d, rows in enumerate(data["draw_rows"])
    ]
    return y, draws


def scores(log_proba: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(log-loss, accuracy)."""
    return float(-log_proba[np.arange(len(y)), y].mean()), float((log_proba.argmax(1) == y).mean())


def choose(sets: list[str]) -> dict[str, Any]:
    """Every candidate's per-set mean and standard error over draws."""
    table: dict[str, dict[str, Any]] = {}
    for name, prompt in itertools.product(sets, PROMPTS):
        data = load(name, prompt)
        if data is None:
            continue
        y, draws = draws_of(data)
        k = len(data["classes"])
        for t, bias, prior in itertools.product(TEMPERATURES, BIASES, PRIORS):
            if bias == "none" and (prior != "uniform" or t != 1.0):
                continue
            got = np.array([scores(candidate_log_proba(d, t, bias, prior), y) for d in draws])
            key = f"{prompt}|{t}|{bias}|{prior}"
            table.setdefault(key, {})[name] = {
                "log_loss": got[:, 0].mean(), "log_loss_se": got[:, 0].std(ddof=1) / np.sqrt(len(got)),
                "accuracy": got[:, 1].mean(), "accuracy_se": got[:, 1].std(ddof=1) / np.sqrt(len(got)),
                "ln_k": float(np.log(k)), "draws": len(got),
                "low_mass": float((np.concatenate([data["test_mass"], data["fit_mass"]]) < 1e-4).mean()),
            }
    return table


def verdicts(table: dict[str, dict[str, Any]], sets: list[str]) -> list[dict[str, Any]]:
    """Candidates measured on every set, ranked by mean log-loss, with the issue's checks."""
    today = table["|".join(map(str, TODAY))]
    rows = []
    for key, per in table.items():
        if any(name not in per for name in sets):
            continue
        gap = [per[n]["log_loss"] - per[n]["ln_k"] for n in sets]
        drop = [per[n]["accuracy"] - today[n]["accuracy"] for n in sets]
        rows.append({
            "candidate": key, "mean_log_loss": float(np.mean([per[n]["log_loss"] for n in sets])),
            "mean_gap": float(np.mean(gap)), "worst_gap": float(np.max(gap)),
            "mean_accuracy": float(np.mean([per[n]["accuracy"] for n in sets])),
            "worst_accuracy_change": float(np.min(drop)),
            "passes": bool(max(gap) < 0 and np.mean(drop) > 0 and min(drop) >= -0.02),
        })
    return sorted(rows, key=lambda r: r["mean_log_loss"])


def labelled(sets: list[str], prompt: str, t: float, bias: str, prior: str) -> dict[str, Any]:
    """With the draw's labels: the label-free candidate, the same with the
    labels' prior (smoothed), batch calibration untempered with that prior,
    and the learned calibration, per set (mean and SE over draws)."""
    from llm_label_clf.fitting.calibration import LEARNED_MIN_PER_CLASS, LearnedCalibrator, class_prior

    out: dict[str, Any] = {}
    for name in sets:
        data = load(name, prompt)
        if data is None:
            continue
        y, draws = draws_of(data)
        classes = list(data["classes"])
        where = {r: i for i, r in enumerate(data["fit_rows"])}
        fit_y = [np.searchsorted(classes, data["fit_y"][[where[r] for r in rows]]) for rows in data["draw_rows"]]
        got: dict[str, list[tuple[float, float]]] = {}
        for d, fy in zip(draws, fit_y, strict=True):
            log_prior = class_prior(fy, len(classes))
            tempered = {k: lsm(t * v) for k, v in d.items()}
            variants = {
                "label-free": candidate_log_proba(d, t, bias, prior),
                "y prior, tempered": lsm(tempered["test"] - bias_of(tempered["fit"], log_prior)),
                "batch (y prior)": lsm(lsm(d["test"]) - bias_of(lsm(d["fit"]), log_prior)),
            }
            if np.bincount(fy, minlength=len(classes)).min() >= LEARNED_MIN_PER_CLASS:
                cal = LearnedCalibrator.fit(d["fit"], fy, len(classes), random_state=0)
                variants["learned"] = cal.log_proba(d["test"], len(classes))
            for key, log_proba in variants.items():
                got.setdefault(key, []).append(scores(log_proba, y))
        out[name] = {k: {"log_loss": float(np.mean([g[0] for g in v])), "accuracy": float(np.mean([g[1] for g in v])),
                         "draws": len(v)} for k, v in got.items()}
    return out


def report_table(sets: list[str], draws: int, n_fit: int) -> dict[str, Any]:
    """The library's default (``LLMLabelClassifier(labels=...)``, fitted on
    ``n_fit`` unlabelled texts), the same with ``calibration=None``, and
    today's default (the old prompt, uncalibrated), on each set's report test
    texts, over ``draws`` fresh draws: mean and standard error of log-loss and
    accuracy, and the share of texts the low-mass warning would name."""
    import warnings

    from bench.zero_shot_reads import SMALL_POOLS, SPLIT_SEED, STORE, draw_rows, frame, split

    from llm_label_clf import LLMLabelClassifier

    old = {"prompt": PROMPTS["plain"]["prompt"], "calibration": None}
    out: dict[str, Any] = {}
    for name in sets:
        data = frame(name)
        texts, labels = data["text"].tolist(), data["label"].to_numpy()
        parts = split(name)
        classes = sorted(set(labels.tolist()))
        test = [texts[i] for i in parts["report"]]
        y = np.searchsorted(classes, labels[parts["report"]])
        pool = parts["pool"]
        if name in SMALL_POOLS:
            pool = np.sort(np.random.default_rng(SPLIT_SEED).choice(pool, SMALL_POOLS[name], replace=False))
        got: dict[str, list[tuple[float, float, float]]] = {}
        started = time.time()
        for d in range(draws):
            rows = draw_rows(name, pool, n_fit, d, kind="report")
            fit = [texts[i] for i in rows]
            for key, params in (("default", {}), ("calibration=None", {"calibration": None}), ("today", old),
                                ("default, with labels", {})):
                if key == "today" and d > 0:  # no fit-time learning: the same for every draw
                    got[key].append(got[key][0])
                    continue
                y_fit = labels[rows] if key.endswith("with labels") else None
                if y_fit is not None and len(set(y_fit.tolist())) < len(classes):  # fit(X, y) needs every class
                    continue
                clf = LLMLabelClassifier(labels=classes, progress=False, low_mass="ignore", random_state=d,
                                         read_store=STORE, **params).fit(fit, y_fit)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    frame_ = clf.diagnose(test)
                proba = frame_[[f"proba_{c}" for c in classes]].to_numpy()
                loss, accuracy = scores(np.log(np.clip(proba, 1e-300, None)), y)
                got.setdefault(key, []).append((loss, accuracy, float((frame_["label_mass"] < 1e-4).mean())))
        out[name] = {"ln_k": float(np.log(len(classes))), "classes": len(classes), "test_texts": len(test),
                     "draws": draws, "fit_texts": n_fit, "seconds": time.time() - started}
        for key, values in got.items():
            arr, m = np.array(values), len(values)
            out[name][key] = {"log_loss": arr[:, 0].mean(), "log_loss_se": arr[:, 0].std(ddof=1) / np.sqrt(m),
                              "accuracy": arr[:, 1].mean(), "accuracy_se": arr[:, 1].std(ddof=1) / np.sqrt(m),
                              "low_mass_share": arr[:, 2].mean(), "draws": m}
        print(name, {k: (round(v["log_loss"], 3), round(v["accuracy"], 3)) for k, v in out[name].items()
                     if isinstance(v, dict)}, flush=True)
    return out


def micro_f1(predicted: np.ndarray, y: np.ndarray) -> float:
    """Micro-averaged F1 of 0/1 indicator arrays."""
    tp = float((predicted & y).sum())
    return 2 * tp / max(1.0, 2 * tp + float((predicted & ~y).sum()) + float((~predicted & y).sum()))


def label_log_loss(p_yes: np.ndarray, y: np.ndarray) -> float:
    """Mean binary log-loss over texts and labels."""
    p = np.clip(p_yes, 1e-12, 1 - 1e-12)
    return float(-(y * np.log(p) + (~y) * np.log(1 - p)).mean())


def plug_in_threshold(p_yes: np.ndarray, y: np.ndarray | None = None) -> float:
    """One threshold for every label: the one that maximises micro-F1 on the
    fit texts, against ``y`` or, without it, in expectation under the
    calibrated ``p_yes`` themselves (label-free)."""
    truth = p_yes if y is None else y.astype(float)
    order = np.argsort(-p_yes, axis=None)
    hits = np.cumsum(truth.ravel()[order])
    f1 = 2 * hits / (np.arange(1, order.size + 1) + truth.sum())
    return float(p_yes.ravel()[order][int(np.argmax(f1))])


def multilabel_design(name: str, temperatures: tuple[float, ...] = (1.0, 0.5, 0.25)) -> dict[str, Any]:
    """Multi-label, from saved reads of the design texts, per draw of 64
    labelled texts: each read (the yes/no question per label; the choice
    read over every label) as P(applies) uncalibrated, batch-calibrated
    (tempered) to each label's frequency in the draw (smoothed) or, for the
    yes/no reads, to the prior the texts show (``texts_prior``), and the
    learned calibration per label; each with the threshold 0.5, the
    label-free plug-in threshold and the threshold fitted on the draw's
    labels; against the draw's label frequencies as constant probabilities
    (log-loss) and the most frequent label predicted for every text
    (micro-F1)."""
    from llm_label_clf.fitting.calibration import LEARNED_MIN_PER_CLASS, LearnedCalibrator, texts_prior
    from llm_label_clf.fitting.fitted import applies_log_proba

    with np.load(CACHE / f"{name}--multilabel--10x64.npz", allow_pickle=True) as data:
        d = {k: data[k] for k in data.files}
    with np.load(CACHE / f"{name}--choice--10x64.npz") as data:
        choice = {k: np.stack([applies_log_proba(c) for c in data[k].T], axis=1) for k in ("test_lp", "fit_lp")}
    reads = {"yes/no": {k: lsm(d[k]) for k in ("test_lp", "fit_lp")}, "choice": choice}
    y = d["test_y"].astype(bool)
    where = {r: i for i, r in enumerate(d["fit_rows"])}
    got: dict[str, list[tuple[float, float]]] = {}
    for draw, rows in enumerate(d["draw_rows"]):
        sel = [where[r] for r in rows]
        fy = d["fit_y"][sel].astype(bool)
        n = len(fy)
        freq = (fy.sum(0) + 1) / (n + 2)
        variants = {"label frequencies": (np.tile(freq, (len(y), 1)), np.tile(freq, (n, 1)))}
        for read, lp in reads.items():
            both = (lp["test_lp"], lp["fit_lp"][sel])
            for t, prior_kind in itertools.product(temperatures, ("y", "texts") if read == "yes/no" else ("y",)):
                p = [np.zeros(y.shape), np.zeros(fy.shape)]
                for j in range(y.shape[1]):
                    tf = lsm(t * both[1][:, j])
                    prior = np.log([1 - freq[j], freq[j]]) if prior_kind == "y" else texts_prior(
                        tf, lsm(t * d["dc_lp"][draw][:, j]))
                    for k, lp_k in enumerate(both):
                        p[k][:, j] = np.exp(lsm(lsm(t * lp_k[:, j]) - bias_of(tf, prior)))[:, 1]
                variants[f"{read}, batch, {prior_kind} prior, T={t}"] = tuple(p)
            variants[f"{read}, none"] = tuple(np.exp(lp_k[..., 1]) for lp_k in both)
            learned = [np.tile(freq, (len(y), 1)), np.tile(freq, (n, 1))]
            for j in range(y.shape[1]):
                if min(fy[:, j].sum(), n - fy[:, j].sum()) >= LEARNED_MIN_PER_CLASS:
                    cal = LearnedCalibrator.fit(both[1][:, j], fy[:, j].astype(int), 2, random_state=0)
                    for k, lp_k in enumerate(both):
                        learned[k][:, j] = np.exp(cal.log_proba(lp_k[:, j], 2)[:, 1])
            variants[f"{read}, learned (label frequency where a label has < 2)"] = tuple(learned)
        top = np.zeros_like(y)
        top[:, fy.sum(0).argmax()] = True
        for key, (p, pf) in variants.items():
            loss = label_log_loss(p, y)
            for rule, t in (("0.5", 0.5), ("plug-in", plug_in_threshold(pf)), ("fit on y", plug_in_threshold(pf, fy))):
                got.setdefault(f"{key} | threshold {rule}", []).append((loss, micro_f1(p >= t, y)))
        got.setdefault("most frequent label for every text", []).append((float("nan"), micro_f1(top, y)))
    return {k: {"log_loss": float(np.mean([g[0] for g in v])),
                "log_loss_se": float(np.std([g[0] for g in v], ddof=1) / np.sqrt(len(v))),
                "micro_f1": float(np.mean([g[1] for g in v])),
                "micro_f1_se": float(np.std([g[1] for g in v], ddof=1) / np.sqrt(len(v)))} for k, v in got.items()}


def multilabel_table(names: list[str], draws: int, n_fit: int) -> dict[str, Any]:
    """The library's multi-label default (``LLMLabelClassifier().fit(texts,
    label_sets)``) on 300 report test texts of each set (its test split, none
    of the design texts) over ``draws`` fresh draws of ``n_fit`` labelled
    texts: mean per-label log-loss and micro-F1, beside the draw's label
    frequencies as constant probabilities, the most frequent label predicted
    for every text, and the old default (yes/no reads, ``calibration=None``,
    ``threshold=0.5``)."""
    import pandas as pd

    from bench.zero_shot_reads import MULTILABEL, N_TEST, SPLIT_SEED, STORE, draw_rows

    from llm_label_clf import LLMLabelClassifier

    out: dict[str, Any] = {}
    for name in names:
        file, test_split, pool_split = MULTILABEL[name]
        data = pd.read_csv(public_sets_dir() / file, keep_default_na=False)
        sets = [frozenset(s.split("|")) - {""} for s in data["labels"]]
        labels = sorted(set().union(*sets))
        y = np.array([[n in s for n in labels] for s in sets])
        rng = np.random.default_rng(SPLIT_SEED)
        test_rows = np.flatnonzero(data["split"] == test_split)
        design = rng.choice(test_rows, N_TEST, replace=False)  # zero_shot_reads.py's draw of the design texts
        report = np.sort(np.random.default_rng(SPLIT_SEED + 1).choice(np.setdiff1d(test_rows, design), N_TEST,
                                                                       replace=False))
        texts = data["text"].tolist()
        test, ty = [texts[i] for i in report], y[report]
        got: dict[str, list[tuple[float, float]]] = {}
        started = time.time()
        for d in range(draws):
            rows = draw_rows(name, np.flatnonzero(data["split"] == pool_split), n_fit, d, kind="multilabel-report")
            fy = y[rows]
            freq = (fy.sum(0) + 1) / (len(rows) + 2)
            top = np.zeros_like(ty)
            top[:, fy.sum(0).argmax()] = True
            got.setdefault("label frequencies", []).append((label_log_loss(np.tile(freq, (len(ty), 1)), ty),
                                                            float("nan")))
            got.setdefault("most frequent label", []).append((float("nan"), micro_f1(top, ty)))
            for key, params in (("default", {}), ("old default", {"calibration": None, "threshold": 0.5,
                                                                   "multilabel_read": "yes_no"})):
                indicator = pd.DataFrame(fy.astype(int), columns=labels)  # every label, present in the draw or not
                clf = LLMLabelClassifier(progress=False, low_mass="ignore", random_state=d, read_store=STORE,
                                         **params).fit([texts[i] for i in rows], indicator)
                p = clf.predict_proba(test)
                got.setdefault(key, []).append((label_log_loss(p, ty), micro_f1(clf.predict(test).astype(bool), ty)))
                if key == "default":
                    got.setdefault("threshold", []).append((clf.threshold_, float("nan")))
                    got.setdefault("default - label frequencies", []).append(
                        (got["default"][-1][0] - got["label frequencies"][-1][0], float("nan")))
        out[name] = {"labels": len(labels), "labels_per_text": float(ty.sum(1).mean()), "test_texts": len(test),
                     "draws": draws, "fit_texts": n_fit, "seconds": time.time() - started}
        for key, values in got.items():
            arr = np.array(values)
            out[name][key] = {"log_loss": float(arr[:, 0].mean()),
                              "log_loss_se": float(arr[:, 0].std(ddof=1) / np.sqrt(draws)),
                              "micro_f1": float(arr[:, 1].mean()),
                              "micro_f1_se": float(arr[:, 1].std(ddof=1) / np.sqrt(draws))}
        print(name, {k: (round(v["log_loss"], 3), round(v["micro_f1"], 3)) for k, v in out[name].items()
                     if isinstance(v, dict)}, flush=True)
    return out


def public_sets_dir() -> Path:
    """Where ``bench/public_sets.py`` wrote the public sets."""
    import os

    return Path(os.environ.get("LLM_LABEL_CLF_PUBLIC_SETS", Path.home() / ".cache/llm_label_clf/datasets"))


def render_multilabel(doc: dict[str, Any]) -> str:
    """The multi-label table (outputs guide): per set, mean +- SE over the draws."""
    m = doc["machine"]
    first = next(iter(doc["sets"].values()))
    lines = ["<!-- multilabel:start -->",
             f"{first['draws']} draws of {first['fit_texts']} labelled texts, {first['test_texts']} report test texts "
             f"per set; {m['cpu_model']} ({m['cpu_capability']}), "
             f"{dtype_label(doc)}, "
             f"{m['cores']} cores, {doc['date'][:10]}, load average {doc['load_avg_start']:.2f}-"
             f"{doc['load_avg_end']:.2f}.", "",
             "| set (labels, per text) | per-label log-loss: default | label frequencies | default - frequencies "
             "| old default | micro-F1: default | most frequent label | old default | threshold_ |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, row in doc["sets"].items():
        ll = [f"{row[k]['log_loss']:.4f} ± {row[k]['log_loss_se']:.4f}" for k in (
            "default", "label frequencies", "default - label frequencies", "old default")]
        f1 = [f"{row[k]['micro_f1']:.3f} ± {row[k]['micro_f1_se']:.3f}" for k in ("default", "most frequent label",
                                                                                   "old default")]
        lines.append(f"| {name} ({row['labels']}, {row['labels_per_text']:.2f}) | " + " | ".join(ll + f1)
                     + f" | {row['threshold']['log_loss']:.3f} |")
    return "\n".join(lines + ["<!-- multilabel:end -->"]) + "\n"


def dtype_label(doc: dict[str, Any]) -> str:
    """The record's engine dtype as a page says it ("auto" is the model's own, bfloat16)."""
    return "bfloat16 (auto: the model's own)" if doc["dtype"] == "auto" else doc["dtype"]


def render_choice(doc: dict[str, Any]) -> str:
    """The candidates measured on every set, best mean log-loss first, with the issue's checks."""
    m = doc["machine"]
    lines = [f"# Choosing the zero-shot default ({m['cpu_model']}, {m['cpu_capability']}, {doc['dtype']}, "
             f"{doc['date'][:10]})", "", *([m["note"], ""] if "note" in m else []),
             "Prompt, temperature T, bias, prior; mean over the sets " + ", ".join(doc["sets"]) + " (10 draws of "
             "64 unlabelled fit texts, 300 design test texts each). gap: log-loss - ln K; dacc: accuracy - today's "
             "default (plain prompt, uncalibrated).", "",
             "| candidate | mean log-loss | mean gap | worst gap | mean accuracy | worst dacc | passes |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in doc["ranked"][:40]:
        passes = "yes" if r["passes"] else ""
        lines.append(f"| `{r['candidate']}` | {r['mean_log_loss']:.3f} | {r['mean_gap']:+.3f} | {r['worst_gap']:+.3f} "
                     f"| {r['mean_accuracy']:.3f} | {r['worst_accuracy_change']:+.3f} | {passes} |")
    return "\n".join(lines) + "\n"


def render_table(doc: dict[str, Any]) -> str:
    """The zero-shot table (guide and README): per set, the default, its
    exact reads (``calibration=None``) and today's default, mean +- SE."""
    m = doc["machine"]
    lines = [
        "<!-- zero-shot:start -->",
        f"{doc['draws']} draws of {doc['fit_texts']} unlabelled fit texts, {doc['test_texts']} report test texts "
        f"per set; {m['cpu_model']} ({m['cpu_capability']}), "
        f"{dtype_label(doc)}, "
        f"{m['cores']} cores; run "
        f"{min(r['date'] for r in doc['sets'].values())} to {max(r['date'] for r in doc['sets'].values())}, "
        f"load average {min(r['load_avg_start'] for r in doc['sets'].values()):.2f}-"
        f"{max(r['load_avg_end'] for r in doc['sets'].values()):.2f}.",
        "",
        "| set (classes) | ln K | default: log-loss | accuracy | `calibration=None`: log-loss | accuracy "
        "| old default: log-loss | accuracy | label mass < 1e-4: default | old default |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in doc["sets"].items():
        cells = [f"{name} ({row['classes']})", f"{row['ln_k']:.3f}"]
        for key in ("default", "calibration=None", "today"):
            r = row[key]
            se = f" ± {r['log_loss_se']:.3f}" if key != "today" else ""
            cells += [f"{r['log_loss']:.3f}{se}", f"{r['accuracy']:.3f}" + (f" ± {r['accuracy_se']:.3f}"
                                                                             if key != "today" else "")]
        cells += [f"{row[k]['low_mass_share']:.0%}" for k in ("default", "today")]
        lines.append("| " + " | ".join(cells) + " |")
    means = {k: np.mean([row[k]["accuracy"] for row in doc["sets"].values()]) for k in ("default", "today")}
    below = {k: sum(row[k]["log_loss"] < row["ln_k"] for row in doc["sets"].values()) for k in ("default", "today")}
    lines += ["", f"Below ln K on {below['default']} of {len(doc['sets'])} sets (the old default: {below['today']}). "
              "Mean accuracy over the sets: "
              f"default {means['default']:.3f}, old default {means['today']:.3f}.", "",
              "The same default given the draw's labels too (`fit(texts, y)`: aimed at the labels' class "
              "frequencies instead of the texts' estimated prior), on the draws where every class is present:", "",
              "| set | draws | log-loss | accuracy | without labels: log-loss | accuracy |",
              "|---|---:|---:|---:|---:|---:|"]
    for name, row in doc["sets"].items():
        r = row.get("default, with labels")
        if r is not None:
            lines.append(f"| {name} | {r['draws']} | {r['log_loss']:.3f} ± {r['log_loss_se']:.3f} | "
                         f"{r['accuracy']:.3f} ± {r['accuracy_se']:.3f} | {row['default']['log_loss']:.3f} | "
                         f"{row['default']['accuracy']:.3f} |")
    lines.append("<!-- zero-shot:end -->")
    return "\n".join(lines) + "\n"


def mean_auc(name: str) -> dict[str, float]:
    """Per read, the mean over labels of the ROC AUC of P(applies),
    uncalibrated, on the design test texts: how well a read ranks texts."""
    from sklearn.metrics import roc_auc_score

    with np.load(CACHE / f"{name}--multilabel--10x64.npz", allow_pickle=True) as data:
        y, yes_no = data["test_y"], data["test_lp"][..., 1] - data["test_lp"][..., 0]
    with np.load(CACHE / f"{name}--choice--10x64.npz") as data:
        choice = data["test_lp"]
    present = [j for j in range(y.shape[1]) if 0 < y[:, j].sum() < len(y)]
    return {read: float(np.mean([roc_auc_score(y[:, j], scores[:, j]) for j in present]))
            for read, scores in (("yes/no", yes_no), ("choice", choice))}


def render_multilabel_design(doc: dict[str, Any]) -> str:
    """The multi-label variants on the design texts, per set, best log-loss first."""
    m = doc["machine"]
    lines = [f"# Multi-label reads and calibrations ({m['cpu_model']}, {m['cpu_capability']}, {dtype_label(doc)}, "
             f"{doc['date'][:10]})", "", "10 draws of 64 labelled texts; 300 design test texts per set; arithmetic on "
             "saved reads (`bench/zero_shot_reads.py`). Mean ± SE over the draws.", ""]
    for name, rows in doc["sets"].items():
        auc = doc["mean_auc"][name]
        lines += [f"## {name}", "", "Mean ROC AUC over the labels, uncalibrated: " + ", ".join(
            f"{read} {value:.3f}" for read, value in auc.items()) + ".", "",
                  "| read, calibration, threshold | per-label log-loss | micro-F1 |",
                  "|---|---:|---:|"]
        for key, r in sorted(rows.items(), key=lambda kv: (np.nan_to_num(kv[1]["log_loss"], nan=9),
                                                           -kv[1]["micro_f1"])):
            lines.append(f"| {key} | {r['log_loss']:.4f} ± {r['log_loss_se']:.4f} | {r['micro_f1']:.3f} ± "
                         f"{r['micro_f1_se']:.3f} |")
        lines.append("")
    return "\n".join(lines)


def render_any(doc: dict[str, Any]) -> str:
    """``--render``: the page of whichever results file ``doc`` is."""
    if "ranked" in doc:
        return render_choice(doc)
    if "mean_auc" in doc:
        return render_multilabel_design(doc)
    return render_multilabel(doc) if "labels_per_text" in next(iter(doc["sets"].values())) else render_table(doc)


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("command", choices=["choose", "table", "multilabel", "multilabel-table"])
    parser.add_argument("--sets", nargs="+", default=list(SETS))
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--fit", type=int, default=64)
    names = {"choose": "zero-shot-choice", "multilabel-table": "multilabel", "multilabel": "multilabel-design"}
    args = results.arguments(parser, render_any, lambda a: names.get(a.command, "zero-shot"))
    if args.command == "table":  # one set at a time, each with its own date, commit and load; earlier sets kept
        for name in args.sets:
            doc = results.record(draws=args.draws, fit_texts=args.fit, test_texts=300)
            earlier = results.load("zero-shot")["sets"] if (results.RESULTS / "zero-shot.json").is_file() else {}
            row = report_table([name], args.draws, args.fit)[name]
            row.update(date=doc["date"], commit=doc["commit"], load_avg_start=doc["load_avg_start"],
                       load_avg_end=results.load_avg())
            doc["sets"] = {**earlier, name: row}
            text = results.write("zero-shot", doc, render_table)
        print(text)
        return
    if args.command == "multilabel-table":
        doc = results.record(draws=args.draws, fit_texts=args.fit)
        doc["sets"] = multilabel_table(["reuters", "semeval_ec"], args.draws, args.fit)
        print(results.write("multilabel", doc, render_multilabel))
        return
    if args.command == "multilabel":
        names = ("reuters", "semeval_ec")
        doc = {**results.record(), "sets": {name: multilabel_design(name) for name in names},
               "mean_auc": {name: mean_auc(name) for name in names}}
        print(results.write("multilabel-design", doc, render_multilabel_design))
        return
    table = choose(args.sets)
    ranked = verdicts(table, args.sets)
    for row in ranked[: args.top]:
        print(f"{row['candidate']:32s} mean LL {row['mean_log_loss']:.3f} gap {row['mean_gap']:+.3f} "
              f"worst {row['worst_gap']:+.3f} acc {row['mean_accuracy']:.3f} "
              f"worst dacc {row['worst_accuracy_change']:+.3f} {'PASS' if row['passes'] else ''}")
    passing = [r for r in ranked if r["passes"]]
    print(f"{len(passing)} of {len(ranked)} pass; best passing: {passing[0]['candidate'] if passing else None}")
    doc = {**results.record(sets=args.sets), "table": table, "ranked": ranked}
    print(results.write("zero-shot-choice", doc, render_choice))


if __name__ == "__main__":
    main()

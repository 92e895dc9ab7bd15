"""Calibration of zero- and few-shot label probabilities, which small models
bias toward some labels: contextual (Zhao et al. 2021), batch (Zhou et al.
2024), learned (a cross-fitted logistic regression) and the default "auto"
(tempered batch calibration fitted once at ``fit``, with or without labels).
All work on (n, n_classes) log-probabilities and return log-probabilities."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import logsumexp
from sklearn.utils import check_random_state
from threadpoolctl import threadpool_limits

__all__ = [
    "BATCH_PRIOR_ROWS",
    "CALIBRATIONS",
    "CALIBRATION_PRIORS",
    "AUTO_TEMPERATURE",
    "CONTENT_FREE_INPUTS",
    "DOMAIN_CONTEXT_INPUTS",
    "LEARNED_CS",
    "LEARNED_MIN_PER_CLASS",
    "MIN_BATCH",
    "Calibration",
    "LearnedCalibrator",
    "calibrate",
    "class_prior",
    "content_free_records",
    "domain_context_records",
    "debias",
    "mean_bias",
    "fit_calibration",
    "index_weights",
    "label_logits",
    "learned_seed",
    "tempered",
]

CALIBRATIONS = ("auto", None, "contextual", "batch", "learned")
#: Content-free inputs of contextual calibration (Zhao et al. 2021).
CONTENT_FREE_INPUTS = ("N/A", "", "[MASK]")
#: Below this many texts in one call, batch calibration uses the bias
#: estimated on the training texts at fit time (one text's own mean is itself).
MIN_BATCH = 16
#: What the debiasing calibrations map the bias to: the training labels'
#: class frequencies ("y"), or a uniform prior (the papers' assumption).
CALIBRATION_PRIORS = ("y", "uniform")
#: The inverse regularisation strengths the learned calibration chooses from.
LEARNED_CS = (0.01, 0.1, 1.0, 10.0, 100.0)
#: The learned calibration's fewest rows of a class (a fold must hold one out and keep one).
LEARNED_MIN_PER_CLASS = 2
#: Training texts batch calibration's small-call fallback is estimated on.
BATCH_PRIOR_ROWS = 256
#: "auto"'s temperature on the label log-probabilities (chosen across eight datasets, ``bench/zero_shot.py``).
AUTO_TEMPERATURE = 0.25
#: "auto"'s domain-context inputs (Fei et al. 2023 average 20).
DOMAIN_CONTEXT_INPUTS = 20


def class_prior(y_index: np.ndarray | None, n_classes: int, kind: str = "y") -> np.ndarray:
    """The log class prior the debiasing calibrations aim at: the class
    frequencies of ``y_index`` with one pseudo-text per class (so a class seen
    once is not taken as near-impossible), or uniform (``kind="uniform"`` or no
    labels)."""
    if kind == "uniform" or y_index is None or len(y_index) == 0:
        return np.full(n_classes, -np.log(n_classes))
    counts = np.bincount(y_index, minlength=n_classes).astype(np.float64) + 1.0
    return np.log(counts / counts.sum())


def mean_bias(log_proba: np.ndarray, log_prior: np.ndarray | None = None) -> np.ndarray:
    """The bias of both debiasing calibrations: log of each class's mean
    probability over the rows (the content-free inputs for contextual, the
    texts for batch), over the log prior that mean should match (uniform if None)."""
    mean_log = logsumexp(log_proba, axis=0) - np.log(log_proba.shape[0])
    return mean_log - (0.0 if log_prior is None else log_prior)


def debias(log_proba: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Divides the probabilities by ``bias`` (per class) and renormalises."""
    shifted = log_proba - bias[None, :]
    return shifted - logsumexp(shifted, axis=1, keepdims=True)


def tempered(log_proba: np.ndarray, temperature: float = AUTO_TEMPERATURE) -> np.ndarray:
    """The probabilities raised to ``temperature`` and renormalised (below 1:
    toward uniform, keeping each text's order of the classes)."""
    return debias(temperature * log_proba, np.zeros(log_proba.shape[1]))


def texts_prior(log_proba: np.ndarray, domain: np.ndarray) -> np.ndarray:
    """The label-free class prior: the mean of the texts' probabilities once
    the domain-context bias is removed (one step of Saerens et al.'s EM; the
    full EM runs away to one class on a small model's reads), shrunk half-way
    to uniform (geometrically) and smoothed by one text per class."""
    k, n = log_proba.shape[1], log_proba.shape[0]
    half = debias(mean_bias(debias(log_proba, mean_bias(domain)))[None, :] / 2, np.zeros(k))[0]
    return np.log((np.exp(half) * n + 1) / (n + k))


def index_weights(class_weight: Any, classes: Sequence[Any]) -> Any:
    """``class_weight`` keyed by class index, as the learned calibration's
    regressions see the classes (None and "balanced" pass through); a key
    that is no class is refused by name."""
    if not isinstance(class_weight, dict):
        return class_weight
    known = list(classes)
    unknown = [c for c in class_weight if c not in known]
    if unknown:
        raise ValueError(f"class_weight names {unknown[0]!r}, which is not a class of y; the classes are {known}")
    return {k: float(class_weight.get(c, 1.0)) for k, c in enumerate(known)}


@dataclass
class LearnedCalibrator:
    """K logistic regressions on (n, n_features) features (the label logits,
    or a stacked head's readers' log-probabilities), each fitted
    on K-1 folds of the training rows at the ``C`` whose out-of-fold log-loss
    was lowest; predictions average them."""

    models: list[Any] = field(default_factory=list)
    C: float = 1.0
    class_weight: Any = None

    @classmethod
    def fit(
        cls,
        log_proba: np.ndarray,
        y_index: np.ndarray,
        n_classes: int,
        *,
        random_state: Any,
        class_weight: Any = None,
        Cs: Sequence[float] = LEARNED_CS,
    ) -> LearnedCalibrator:
        """Fits on rows with class indices ``y_index``, choosing ``C`` among
        ``Cs`` by cross-fitted log-loss. Raises ValueError when a class has
        fewer than 2 rows (no fold could hold it out and keep it)."""
        from sklearn.model_selection import StratifiedKFold

        counts = np.bincount(y_index, minlength=n_classes)
        if counts.min() < LEARNED_MIN_PER_CLASS:
            missing = np.flatnonzero(counts < LEARNED_MIN_PER_CLASS).tolist()
            raise ValueError(
                f"calibration='learned' needs at least {LEARNED_MIN_PER_CLASS} training texts of every class; "
                f"class indices {missing} have fewer: pass more labelled texts to fit, or use calibration='batch' "
                "or 'contextual'"
            )
        k = int(min(5, counts.min()))
        folds = list(StratifiedKFold(n_splits=k, shuffle=True, random_state=random_state).split(log_proba, y_index))
        best: tuple[float, float, list[Any]] | None = None
        # one BLAS thread: faster on these tiny problems, the same numbers (docs/architecture.md)
        with threadpool_limits(1, "blas"):
            for C in Cs:
                models, held_out = [], np.zeros((len(y_index), n_classes))
                for train, test in folds:
                    model = _logistic(C, class_weight).fit(log_proba[train], y_index[train])
                    held_out[np.ix_(test, model.classes_)] = model.predict_proba(log_proba[test])
                    models.append(model)
                rows = np.arange(len(y_index))
                loss = float(-np.mean(np.log(np.clip(held_out[rows, y_index], 1e-15, None))))
                if best is None or loss < best[0] - 1e-12:
                    best = (loss, C, models)
        assert best is not None
        return cls(best[2], best[1], class_weight)

    def log_proba(self, log_proba: np.ndarray, n_classes: int) -> np.ndarray:
        """Averaged calibrated probabilities, as logs, columns in class order."""
        total = np.zeros((log_proba.shape[0], n_classes))
        for model in self.models:
            total[:, model.classes_] += model.predict_proba(log_proba)
        return np.log(np.clip(total / len(self.models), 1e-300, None))


def _logistic(C: float, class_weight: Any) -> Any:
    """A logistic regression on standardised log-probabilities (their scale
    differs by model and prompt, so one ``C`` grid fits all)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=C, class_weight=class_weight, max_iter=1000))


def label_logits(log_proba: np.ndarray) -> np.ndarray:
    """The learned calibration's features: each text's label log-probabilities
    less their mean over the classes (its logits up to a constant). A
    regression on these is Platt scaling for two classes (one feature, the
    log-odds: monotone) and matrix scaling for more. On the log-probabilities
    themselves, which saturate near 0 for the likely label, it could fit a
    bump: on 7 hate texts of 64 in a narrow log-odds band it gave test texts
    outside the band, hate texts among them, probabilities near 0
    (``bench/results/learned-features.md``)."""
    return log_proba - log_proba.mean(axis=1, keepdims=True)


def calibrate(
    log_proba: np.ndarray,
    kind: str | None,
    bias: np.ndarray | None,
    calibrator: LearnedCalibrator | None,
    log_prior: np.ndarray | None = None,
) -> np.ndarray:
    """Applies calibration ``kind`` with what fit estimated (``bias`` or the
    learned ``calibrator``) to (n, n_classes) log-probabilities. Batch
    calibration uses the call's own texts when there are ``MIN_BATCH`` or
    more, aiming their mean at ``log_prior`` (uniform if None); "auto"
    tempers, then removes the bias fit estimated, whatever the call holds."""
    if kind is None or log_proba.shape[0] == 0:
        return log_proba
    if kind == "auto":
        assert bias is not None
        return debias(tempered(log_proba), bias)
    if kind == "learned":
        assert calibrator is not None
        return calibrator.log_proba(label_logits(log_proba), log_proba.shape[1])
    if kind == "batch" and log_proba.shape[0] >= MIN_BATCH:
        return debias(log_proba, mean_bias(log_proba, log_prior))
    assert bias is not None
    return debias(log_proba, bias)


def content_free_records(fields: Iterable[str]) -> list[dict[str, str]]:
    """One record per content-free input, every field ``X`` fills
    (``PromptTemplate.input_fields``) set to it."""
    names = list(fields)
    return [dict.fromkeys(names, value) for value in CONTENT_FREE_INPUTS]


def _rng(random_state: Any) -> np.random.RandomState:
    """The generator of the texts a calibration draws: seeded by 0 for None."""
    return check_random_state(0 if random_state is None else random_state)


def domain_context_records(records: Sequence[dict[str, str]], fields: Iterable[str], random_state: Any) -> list[
        dict[str, str]]:
    """Fei et al.'s domain-context inputs: ``DOMAIN_CONTEXT_INPUTS`` records
    whose every field ``X`` fills is random words of that field in
    ``records``, as many as its mean length in words (drawn by
    ``random_state``, 0 for None as in ``fit_calibration``)."""
    rng = _rng(random_state)
    out: list[dict[str, str]] = [{} for _ in range(DOMAIN_CONTEXT_INPUTS)]
    for name in fields:
        words = [w for r in records for w in r[name].split()] or [""]
        length = max(1, round(len(words) / max(1, len(records))))
        for record in out:
            record[name] = " ".join(rng.choice(words, length))
    return out


def learned_seed(random_state: Any) -> int:
    """The seed of a learned calibration's folds, drawn from the estimator's
    ``random_state`` (the refit and every cross-validation fold draw it alike)."""
    return int(check_random_state(random_state).randint(2**31 - 1))


@dataclass(frozen=True)
class Calibration:
    """One output's calibration as fit estimated it: its ``kind`` (None: no
    calibration), the ``log_prior`` the debiasing kinds aim at, and the
    debiasing ``bias`` or the ``learned`` calibrator."""

    kind: str | None
    log_prior: np.ndarray
    bias: np.ndarray | None = None
    learned: LearnedCalibrator | None = None

    def apply(self, log_proba: np.ndarray) -> np.ndarray:
        """Calibrated (n, n_classes) log-probabilities (see ``calibrate``)."""
        return calibrate(log_proba, self.kind, self.bias, self.learned, self.log_prior)


def fit_calibration(
    kind: str | None,
    log_proba_of: Callable[[np.ndarray], np.ndarray],
    content_free: Callable[[], np.ndarray],
    rows: np.ndarray,
    y_index: np.ndarray | None,
    log_prior: np.ndarray,
    *,
    class_weight: Any = None,
    classes: Sequence[Any] = (),
    random_state: Any = None,
    owner: str = "",
    domain_context: Callable[[], np.ndarray] | None = None,
) -> Calibration:
    """The one calibration fit, used by ``fit`` and by every cross-validation
    fold: from the log-probabilities of the training ``rows``
    (``log_proba_of(rows)``, an example text read with itself swapped out),
    of the content-free inputs (``content_free()``) or of the domain-context inputs
    (``domain_context()``), each asked for only when ``kind`` needs it. Batch
    and auto calibration with fewer rows than they need fall back to the
    content-free bias; their bias is estimated on at most
    ``BATCH_PRIOR_ROWS`` rows, drawn by ``random_state`` (0 for None: a
    refit on the same texts reads the same rows, so a read store serves a
    rerun in a new process), which also seeds the learned calibration's
    folds. Auto without labels aims at the prior the texts show
    (``texts_prior``) when ``domain_context`` is given, else at
    ``log_prior``. ``owner`` starts error messages."""
    if kind is None:
        return Calibration(None, log_prior)
    auto = kind == "auto"
    scale = tempered if auto else (lambda x: x)
    if kind == "contextual" or (kind in ("batch", "auto") and rows.size < (MIN_BATCH if auto else 1)):
        return Calibration(kind, log_prior, bias=mean_bias(scale(content_free()), log_prior))
    if kind in ("batch", "auto"):
        if rows.size > BATCH_PRIOR_ROWS:
            rows = np.sort(_rng(random_state).choice(rows, BATCH_PRIOR_ROWS, replace=False))
        texts = scale(log_proba_of(rows))
        if auto and y_index is None and domain_context is not None:
            log_prior = texts_prior(texts, tempered(domain_context()))
        return Calibration(kind, log_prior, bias=mean_bias(texts, log_prior))
    if y_index is None:
        prefix = f"{owner}: " if owner else ""
        raise ValueError(f"{prefix}calibration='learned' learns from labelled texts: fit needs y")
    learned = LearnedCalibrator.fit(
        label_logits(log_proba_of(rows)),
        y_index[rows],
        len(log_prior),
        random_state=learned_seed(random_state),
        class_weight=index_weights(class_weight, list(classes)),
    )
    return Calibration(kind, log_prior, learned=learned)

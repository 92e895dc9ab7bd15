"""``LLMLabelClassifier``: the scikit-learn shell of the package. It holds
the parameters (checked at fit from the table in ``fitting.params``), sets
its fitted attributes from what ``fitting.fit`` decides (reading plans, and
one ``FittedOutput`` per output), and predicts by running the plans over
``X`` with one chunk driver, then through those outputs: records -> plans ->
engine -> class logprobs -> probabilities (softmax over each class's label
logprobs, then any calibration) -> each method's shape (``fitting.shaping``).

The estimator holds plain data only; the engine lives in the process-wide
registry (``engines``), so clones share it and pickles never hold it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from .engines import Engine, engine_for
from .fitting.fit import JointFit, OutputFit, fit_choice, fit_joint, fit_output, fit_separate, uses_choice
from .fitting.fitted import FittedOutput, check_label_mass, read_of
from .fitting.inputs import as_records
from .fitting.params import check_params
from .fitting.shaping import method_result, output_kind, predicted_from
from .fitting.sklearn_api import TransformOutput, drop_fitted, text_classifier_tags
from .fitting.targets import as_target, subset_accuracy
from .fitting.threshold import threshold_in_use
from .fitting.ties import tie_priors
from .models.builtin import DEFAULT_MODEL
from .reading.driver import aread_plans, read_plans
from .reading.plan import ClassReads
from .store.handle import ReadStore, open_read_store

__all__ = ["LLMLabelClassifier"]


class LLMLabelClassifier(ClassifierMixin, TransformOutput, BaseEstimator):
    """Text classifier over an LLM's next-token label logprobs.

    For each text the prompt is rendered and the model is asked for one next
    token; each class's label tokens, found after the rendered prompt, are
    read from the engine's full-vocabulary logprobs, and ``predict_proba`` is
    the softmax over the classes, calibrated. Zero-shot by default: ``fit``
    learns no weights, only the bias of the model's reads over the texts it
    gets, with or without labels (``calibration="auto"``); ``few_shot`` and
    the other calibrations learn more from the labels.

    Parameters
    ----------
    model : str, default="smollm2-135m-instruct"
        A built-in model name, a local Hugging Face folder, or a hub id.
    base_url : str, list of str or None, default=None
        None: an embedded vLLM engine in this process. Otherwise the URL of a
        vLLM OpenAI-compatible server (``http://host:8000/v1``) or a list of
        them (load spread, fail-over); ``model`` then names the served model.
    engine_options : dict or None, default=None
        vLLM engine arguments (``dtype``, ``max_model_len``,
        ``tensor_parallel_size``, ``data_parallel_size``, ...); with
        ``base_url``, the client's ``max_concurrency``, ``timeout_s``,
        ``max_retries`` and ``api_key_env``. Estimators with equal ``model``,
        ``base_url`` and ``engine_options`` share one engine per process.
    read_store : str, PathLike, ReadStore or None, default=None
        A persistent store of label reads (an SQLite file, created on first
        use), like ``Pipeline(memory=...)``: a read found there (same model
        files, numeric engine settings, versions, device, prompt tokens and
        label tokens) is not read again, across calls and processes. None
        uses ``LLM_LABEL_CLF_READ_STORE`` when set. Embedded engines only.
        Checked at ``fit``: a bad file raises ``ReadStoreError``; a full disk
        warns (``ReadStoreWarning``) and reads go on unstored (docs: Reliability).
    labels : mapping, list or None, default=None
        None: the classes from ``y`` are what the model writes (see
        ``label_words``). Otherwise a mapping class -> label string, or class
        -> list of aliases whose probabilities are summed; or a list with one
        label (or alias list) per class in ``classes_`` (sorted) order, as
        ``datasets``' ``ClassLabel.names``. Without ``y``: the classes are a
        mapping's keys, or a list's own items (``labels=dict(enumerate(names))``
        predicts 0, 1, ...). Several outputs: a list with one mapping or list
        per output, or one mapping covering every output's classes.
    label_words : {"auto", "words", "as_is"}, default="auto"
        What a class is written as when ``labels`` gives it no text. "words":
        an identifier class (``card_arrival``, ``CardArrival``) as words
        (``card arrival``); "as_is": ``str(class)``; "auto": currently
        "words". Numbers and booleans are written as they are, with a
        ``LabelWordsWarning`` (not with "as_is"). ``verbalizers_`` shows it.
    label_mode : {"auto", "first_token", "full_sequence", "constrained", "options"}, default="auto"
        How a class is scored. "full_sequence": log P(all of the label's
        tokens | prompt), exact, one read per distinct label prefix.
        "first_token": the label's first token only (one read per text).
        "options": the classes are listed as lettered options and the codes
        are read. "constrained": P(this label when made to answer with one of
        them, as vLLM's guided choice decodes), read only where the labels
        branch; no label may start another. "auto": "first_token" when every
        label is one token after the prompt, else "full_sequence" (docs:
        Labels of any length).
    length_norm : {None, "token", "char"}, default=None
        Divide each label's logprob by its length in tokens or characters
        before the softmax (as lm-evaluation-harness's ``acc_norm``): a
        normalised score rather than the model's probability.
    prune_margin : float or None, default=None
        Many multi-token labels ("full_sequence" or "constrained"): read only
        the label prefixes that can still come within this many nats of the
        best complete label (best-first). ``predict`` stays exact;
        probabilities under about ``exp(-margin)`` of the top one are
        approximate. None reads every prefix.
    prompt : str, list of str or None, default=None
        A template with ``{text}`` (or DataFrame column names) and optionally
        ``{labels}`` (the labels listed, "a, b or c"); literal braces are
        ``{{`` and ``}}``. None: the default template. Several outputs: a
        list, one per output. Multi-label yes/no reads: a ``{label}`` field.
    instructions : str or None, default=None
        A line put before the prompt (the system message in chat mode).
    chat : bool or "auto", default=False
        Render the prompt as a user turn of the model's chat template and read
        the reply's first token; "auto" when the model has a template.
    random_state : int, RandomState or None, default=None
        Seed of the few-shot draw, of the learned calibration's folds and of
        the "auto" calibration's domain-context inputs (0 when None).
    batch_size : int, default=512
        Texts sent to the engine at once; bounds memory on long inputs.
    progress : bool, default=True
        Show a progress bar when a call is expected to take more than a few
        seconds (over 256 reads); False silences it.
    low_mass : {"warn", "raise", "ignore"}, default="warn"
        What to do when a text's label mass is below ``low_mass_threshold``
        (the model wanted to answer something else); warned once per call.
    low_mass_threshold : float, default=1e-4
        The label mass below which ``low_mass`` applies: the full-vocabulary
        probability of the labels' distinct first tokens after the prompt.
    too_long : {"truncate", "raise"}, default="truncate"
        A text whose prompt is longer than the model reads is cut at its end
        (never the instructions or the answer cue) with a ``TruncationWarning``,
        or refused with an error naming the item.
    threshold : float or "auto", default="auto"
        Multi-label ``y``: ``predict`` marks a label when P(it applies) >=
        the threshold. "auto" fits the one with the best micro-F1 on the
        training texts at ``fit`` (``threshold_``; 0.5 when the calibration
        reads no training text). A number applies as given, also after fit.
    few_shot : int, default=0
        Labelled examples per class, drawn from the training data (stratified,
        seeded by ``random_state``) and written before every text with their
        answers: one shared, cached prefix. A calibration that reads the
        training texts reads an example text with itself swapped for another
        of its class. Fails when it leaves fewer than 64 tokens of the
        model's context.
    calibration : {"auto", None, "contextual", "batch", "learned"}, default="auto"
        Removes the model's bias toward some labels. "auto": tempered reads
        divided by each class's mean probability over the texts ``fit`` got,
        aimed at ``calibration_prior`` (without ``y``, the prior the texts
        show); a joint read takes none. None: the engine's exact reads.
        "contextual": divided by the probabilities of content-free inputs.
        "batch": by each class's mean probability over the texts of the call
        (under 16 texts, the training texts' mean). "learned": a logistic
        regression on the training texts' label logits (Platt scaling for two
        classes), cross-fitted
        (docs: Zero-shot, Learning from labels).
    calibration_prior : {"y", "uniform"}, default="y"
        What the debiasing calibrations aim at: "y", the training labels'
        class frequencies (smoothed by one text per class), or "uniform".
        ``class_prior_`` holds it.
    class_weight : dict, "balanced" or None, default=None
        The learned calibration's class weights (``LogisticRegression``'s).
    multioutput_read : {"separate", "joint"}, default="separate"
        For a 2-D ``y``. "separate": one read per output (its own prompt, any
        ``label_mode``), sharing the text's cached prefix. "joint": one read
        per text answers every output as lettered options held by vLLM's
        structured outputs; faster, but the built-in model answers near
        chance by letter (docs: Several outputs).
    multilabel_read : {"auto", "choice", "yes_no"}, default="auto"
        For a multi-label ``y``. "choice": one read per text over every label,
        each label's P(it applies) from its share, calibrated per label.
        "yes_no": one yes/no question per label, filling the prompt's
        ``{label}`` field. "auto": "yes_no" when the prompt has a ``{label}``
        field, else "choice".

    Attributes
    ----------
    classes_ : ndarray
        Class labels; the column order of ``predict_proba``.
    verbalizers_ : list of list of str
        Per class, the strings read after the prompt (leading space included;
        identifier classes as the words ``label_words`` chose).
    label_token_ids_ : list of list of int
        Per class, the first token id of each verbalizer in context.
    label_sequences_ : list of list of tuple of int
        Per class, all token ids of each verbalizer in context.
    label_mode_ : str
        The scoring mode in use ("first_token", "full_sequence", "constrained"
        or "options").
    options_ : list of str or None
        In options mode, each class's option code (in ``classes_`` order).
    prompt_ : str
        The template in use.
    chat_ : bool
        Whether the chat template is used.
    few_shot_rows_ : list of int
        The training rows shown as few-shot examples (in prompt order).
    few_shot_prefix_ : str
        The rendered few-shot block.
    class_prior_ : ndarray
        The class prior the debiasing calibrations aim at, in ``classes_`` order.
    calibration_bias_ : ndarray or None
        The contextual, batch or "auto" calibration's bias (log probabilities;
        "auto"'s applies to tempered reads).
    calibrator_ : LearnedCalibrator or None
        The learned calibration: regressions on the label logits
        (``label_logits`` of the label log-probabilities).
    plans_ : list of ReadingPlan or JointPlan
        What fit decided about reading, as plain picklable data: one plan
        per output (a joint read: one plan for every output). A worker
        process given a plan and an engine reads what the estimator reads.
    outputs_ : list of FittedOutput
        Per output, what prediction goes through: its classes and
        calibration, and ``log_proba(reads)`` (see ``log_proba_from_reads``).
    estimators_ : list of LLMLabelClassifier
        Several outputs read separately: the fitted estimator of each output.
    n_outputs_ : int
        Several outputs or labels: how many.
    output_kind_ : str
        Several outputs: "multioutput", or "multilabel" for a multi-label ``y``.
    threshold_ : float
        Multi-label ``y``: the threshold ``fit`` chose (``threshold="auto"``)
        or was given.
    joint_names_, joint_options_, joint_regex_, joint_token_ids_
        A joint read (``multioutput_read="joint"``), instead of
        ``estimators_``: the output names, each output's option letters, the
        answer format vLLM holds the reply to, and the letters' token ids.

    Notes
    -----
    Every prediction method (``predict_proba``, ``predict``, ``transform``,
    ``diagnose``, ...) takes ``X`` as ``fit`` does: a sequence of str, a
    pandas Series, or a DataFrame whose columns fill the prompt's fields.

    See Also
    --------
    LLMLabelClassifierCV : chooses the prompt, few-shot count and calibration
        by cross-validation.

    Examples
    --------
    The parameters are stored as given and checked at ``fit``, before any
    engine starts:

    >>> from llm_label_clf import LLMLabelClassifier
    >>> clf = LLMLabelClassifier(prompt="Review: {text}\\nSentiment:", progress=False)
    >>> clf
    LLMLabelClassifier(progress=False, prompt='Review: {text}\\nSentiment:')
    >>> clf.set_params(label_mode="bogus").fit(["a gem of a film"], ["positive"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: LLMLabelClassifier: label_mode='bogus' must be one of ['auto', 'constrained', ...]

    Fitting and predicting start the shared vLLM engine at the first read
    (a read found in ``read_store`` needs none):

    >>> clf.set_params(label_mode="auto").fit(texts, labels)  # doctest: +SKIP
    >>> clf.classes_, clf.verbalizers_  # doctest: +SKIP
    (array(['negative', 'positive'], dtype=object), [[' negative'], [' positive']])
    >>> clf.predict_proba(["a gem of a film"])  # doctest: +SKIP
    array([[0.05, 0.95]])
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        base_url: str | Sequence[str] | None = None,
        engine_options: Mapping[str, Any] | None = None,
        read_store: str | os.PathLike[str] | ReadStore | None = None,
        labels: Mapping[Any, str | Sequence[str]] | Sequence[Any] | None = None,
        label_words: str = "auto",
        label_mode: str = "auto",
        length_norm: str | None = None,
        prune_margin: float | None = None,
        prompt: str | None = None,
        instructions: str | None = None,
        chat: bool | str = False,
        random_state: int | np.random.RandomState | None = None,
        batch_size: int = 512,
        progress: bool = True,
        low_mass: str = "warn",
        low_mass_threshold: float = 1e-4,
        too_long: str = "truncate",
        threshold: float | str = "auto",
        few_shot: int = 0,
        calibration: str | None = "auto",
        calibration_prior: str = "y",
        class_weight: Mapping[Any, float] | str | None = None,
        multioutput_read: str = "separate",
        multilabel_read: str = "auto",
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.engine_options = engine_options
        self.read_store = read_store
        self.labels = labels
        self.label_words = label_words
        self.label_mode = label_mode
        self.length_norm = length_norm
        self.prune_margin = prune_margin
        self.prompt = prompt
        self.instructions = instructions
        self.chat = chat
        self.random_state = random_state
        self.batch_size = batch_size
        self.progress = progress
        self.low_mass = low_mass
        self.low_mass_threshold = low_mass_threshold
        self.too_long = too_long
        self.threshold = threshold
        self.few_shot = few_shot
        self.calibration = calibration
        self.calibration_prior = calibration_prior
        self.class_weight = class_weight
        self.multioutput_read = multioutput_read
        self.multilabel_read = multilabel_read

    # ------------------------------------------------------------------ fit

    def _engine(self) -> Engine:
        """The shared engine: embedded, or the remote servers of ``base_url``."""
        return engine_for(self.model, self.base_url, self.engine_options, owner=type(self).__name__)

    def fit(self, X: Any, y: Any = None) -> LLMLabelClassifier:
        """Checks the parameters, sets ``classes_`` and builds the reading plan.

        The plan holds each class's label tokens found after the rendered
        prompt, the few-shot block and the calibration. No model weights are
        learned; the shared engine starts on first use.

        Parameters
        ----------
        X : sequence of str, pandas Series or DataFrame
            The texts; a DataFrame's columns fill the prompt fields of their
            names (``{text}`` and any other).
        y : array-like, DataFrame, sequence of sets or None, default=None
            One label per text; one column per output (``classes_`` is then
            a list, one array per output); or multi-label: a 0/1 indicator
            matrix or one collection of labels per text (``classes_`` holds
            the labels). ``classes_`` keeps ``y``'s dtype. None (zero-shot)
            needs ``labels``.

        Returns
        -------
        self : LLMLabelClassifier
            The fitted estimator.

        Raises
        ------
        ValueError
            A bad parameter (naming it and the value), an empty ``X``, a
            missing text (naming the item), a ``y`` of the wrong shape or with
            one class, labels that are the same tokens after the prompt,
            ``labels`` naming classes not in ``y``, or ``read_store`` with
            ``base_url``.
        ModelNotFoundError, ModelUnavailableError
            ``model`` cannot be loaded (before vLLM starts).
        ReadStoreError
            ``read_store`` is not a read store, is damaged, or cannot be
            created or written (naming the file).
        """
        check_params(self)
        open_read_store(self)  # a store that cannot be used fails here, before any engine starts
        records = as_records(X)
        if len(records) == 0:
            raise ValueError("fit needs at least one labelled example; got an empty X")
        name = type(self).__name__
        if y is None and self.labels is None:
            raise ValueError(
                f"{name}: fit(X) without y needs labels={{class: label}} or labels=[class, ...] to know "
                "the classes (zero-shot); otherwise pass y, one label per text"
            )
        target = None if y is None else as_target(y, len(records))
        drop_fitted(self)  # a refit starts from nothing, whatever the last fit set
        if target is None or target.kind == "single":
            self._set_output(fit_output(self, records, None if target is None else target.columns[0], self._engine))
        elif target.kind == "multilabel" and uses_choice(self.multilabel_read, self.prompt):
            fit, outputs, self.threshold_ = fit_choice(self, records, target, self._engine)
            self._set_outputs(np.array(target.names), [fit.reading.plan], outputs, "multilabel")
        elif self.multioutput_read == "joint":
            self._set_joint(fit_joint(self, records, target, self._engine))
        else:
            estimators, fits, threshold = fit_separate(self, records, target, self._engine)
            if target.kind == "multilabel":
                self.threshold_ = threshold
            for estimator, fit in zip(estimators, fits, strict=True):
                estimator._set_output(fit)
            self.estimators_ = estimators
            names = target.names if target.names is not None else list(range(len(target.columns)))
            classes = np.array(names) if target.kind == "multilabel" else [e.classes_ for e in estimators]
            self._set_outputs(classes, [f.reading.plan for f in fits], [f.output for f in fits], target.kind)
        return self

    def _set_outputs(self, classes: Any, plans: list[Any], outputs: list[FittedOutput], kind: str) -> None:
        """What every fit sets: the classes, the plans to read, the outputs
        to predict through, and with several outputs their count and kind."""
        self.classes_ = classes
        self.plans_ = plans
        self.outputs_ = outputs
        if kind != "single":
            self.n_outputs_ = len(outputs)
            self.output_kind_ = kind

    def _set_output(self, fit: OutputFit) -> None:
        """The fitted attributes of one output read on its own."""
        reading, calibration = fit.reading, fit.output.calibration
        self._set_outputs(fit.output.classes, [reading.plan], [fit.output], "single")
        self.chat_, self.prompt_ = fit.chat, fit.prompt
        self.verbalizers_ = reading.verbalizers
        self.label_sequences_ = reading.label_sequences
        self.label_mode_ = reading.label_mode
        self.label_token_ids_ = reading.label_token_ids
        self.options_ = reading.options
        self.few_shot_rows_ = reading.few_shot_rows
        self.few_shot_prefix_ = reading.few_shot_prefix
        self.class_prior_ = np.exp(calibration.log_prior)
        self.calibration_bias_ = calibration.bias
        self.calibrator_ = calibration.learned

    def _set_joint(self, fit: JointFit) -> None:
        """The fitted attributes of a joint read of several outputs."""
        self._set_outputs([output.classes for output in fit.outputs], [fit.plan], fit.outputs, "multioutput")
        self.chat_, self.prompt_ = fit.chat, fit.prompt
        self.joint_names_ = fit.names
        self.joint_options_ = fit.options
        self.joint_regex_ = fit.regex
        self.joint_token_ids_ = fit.token_ids

    # ----------------------------------------------------------- prediction

    def _kind(self) -> str:
        """"single", "multioutput" or "multilabel" (raises NotFittedError before fit)."""
        check_is_fitted(self, ["classes_", "plans_"])
        return output_kind(self)

    def _read(self, X: Any) -> list[ClassReads]:
        """Every output's reads of ``X``: the plans run by the chunk driver."""
        check_is_fitted(self, ["classes_", "plans_"])
        return read_plans(
            self.plans_, as_records(X), self._engine(), batch_size=self.batch_size, progress=self.progress
        )

    def log_proba_from_reads(self, reads: list[ClassReads]) -> list[np.ndarray]:
        """Per output, log-probabilities from reads of ``plans_``.

        The seam for reads made elsewhere (a worker's engine, Ray's vLLM
        stage): what every prediction method computes after reading, the
        label-mass check (once for every output) and the calibration
        included.

        Parameters
        ----------
        reads : list of ClassReads
            One per output, as ``plans_`` read them (``read_plans``).

        Returns
        -------
        list of ndarray
            Per output, (n_texts, n_classes) log-probabilities, columns in
            that output's classes order.
        """
        check_is_fitted(self, ["classes_", "plans_", "outputs_"])
        check_label_mass(self.outputs_, reads, self.low_mass, self.low_mass_threshold)
        return [output.log_proba(r) for output, r in zip(self.outputs_, read_of(self.outputs_, reads), strict=True)]

    def _result(self, method: str, reads: list[ClassReads]) -> Any:
        """``method``'s result from the reads of every output."""
        return method_result(method, self._kind(), self.log_proba_from_reads(reads), self.classes_,
                             threshold_in_use(self),
                             priors=tie_priors(self))

    def predict_log_proba(self, X: Any) -> np.ndarray | list[np.ndarray]:
        """Log-probabilities of the classes for each text: ``predict_proba``'s
        shapes, columns, errors and warnings, as logs computed before any
        exponentiation (multi-label: log P(label applies))."""
        return self._result("predict_log_proba", self._read(X))

    def predict_proba(self, X: Any) -> np.ndarray | list[np.ndarray]:
        """Probabilities of the classes for each text (rows sum to 1).

        Returns
        -------
        ndarray of shape (n_texts, n_classes), or list of ndarray
            Columns in ``classes_`` order. Several outputs: a list of such
            arrays, one per output (as scikit-learn's multi-output classifiers
            return). Multi-label: P(label applies) per label, shape
            (n_texts, n_labels), from each label's yes/no read.

        Raises
        ------
        NotFittedError
            Before ``fit``.
        GenerationError
            A read failed in the engine; ``items`` names the texts.

        Warns
        -----
        LowLabelMassWarning
            Some texts put little probability on every label (``low_mass``).
        TruncationWarning
            Some texts were cut to fit the model's context (``too_long``).
        """
        return self._result("predict_proba", self._read(X))

    async def apredict_proba(self, X: Any) -> np.ndarray | list[np.ndarray]:
        """``predict_proba`` for callers already inside an event loop: it does
        not block that loop while the engine works, and gives the same reads
        and the same numbers."""
        check_is_fitted(self, ["classes_", "plans_"])
        records = as_records(X)
        engine = await asyncio.get_running_loop().run_in_executor(None, self._engine)
        reads = await aread_plans(self.plans_, records, engine, batch_size=self.batch_size, progress=self.progress)
        return self._result("predict_proba", reads)

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each text.

        Returns
        -------
        ndarray of shape (n_texts,) or (n_texts, n_outputs)
            Of ``classes_``'s dtype (that of ``y``). Several outputs: one
            column per output, in the outputs' common dtype, else objects.
            Multi-label: the 0/1 indicator of P(label applies) >= ``threshold``,
            shape (n_texts, n_labels).

        Warns
        -----
        TiedPredictionWarning
            Two or more classes had exactly the same top probability for
            some texts (bf16 reads): each tie went to the tied class with
            the largest class prior from fit, then the first in ``classes_``.
        """
        return self._result("predict", self._read(X))

    def decision_function(self, X: Any) -> np.ndarray | list[np.ndarray]:
        """Scores for each text: binary, the log-odds of ``classes_[1]``, shape
        (n_texts,); otherwise the log-probabilities, (n_texts, n_classes).
        Multi-label: each label's log-odds, (n_texts, n_labels); several
        outputs: a list, one per output."""
        return self._result("decision_function", self._read(X))

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy on ``X`` and ``y``.

        Parameters
        ----------
        X : sequence of str, pandas Series or DataFrame
            The texts.
        y : array-like
            The true labels, shaped as for ``fit``.
        sample_weight : array-like of shape (n_texts,) or None, default=None
            Weights of the texts.

        Returns
        -------
        float
            The share of texts predicted right; with several outputs or
            labels, the share whose every output (label) is right, as
            scikit-learn's multi-output classifiers and ``accuracy_score`` on
            indicators count it.
        """
        kind = self._kind()
        if kind == "single":
            return super().score(X, y, sample_weight=sample_weight)
        pred = self.predict(X)
        labels = self.classes_.tolist() if kind == "multilabel" else None
        return subset_accuracy(as_target(y, pred.shape[0]), pred, labels, sample_weight)

    def transform(self, X: Any) -> np.ndarray:
        """The label-logprob features, for stacking.

        Per class, log P(its label | prompt) over the full vocabulary (summed
        over aliases, not normalised over the classes). Feeds any
        scikit-learn model (a ``Pipeline`` step, ``FeatureUnion``). With
        ``set_output(transform="pandas")`` it returns a DataFrame whose
        columns are ``get_feature_names_out()``.

        Returns
        -------
        ndarray of shape (n_texts, n_features) or DataFrame
            Columns in ``classes_`` order; several outputs side by side. A
            joint read gives each output's option logprobs as vLLM returns them
            under the answer format (normalised over that output's options).
        """
        reads = self._read(X)
        if self._kind() == "single":
            return reads[0].class_logprobs
        return np.hstack([r.class_logprobs for r in reads])

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Names of ``transform``'s columns.

        Parameters
        ----------
        input_features : None
            Ignored (the input is text); present for scikit-learn's API.

        Returns
        -------
        ndarray of str
            ``logprob_<class>`` per class; ``logprob_<j>_<class>`` with
            several outputs (``j`` the output's index).
        """
        if self._kind() == "single":
            return np.array([f"logprob_{c}" for c in self.classes_.tolist()], dtype=object)
        return np.array(
            [f"logprob_{j}_{c}" for j, classes in enumerate(self.classes_) for c in classes.tolist()], dtype=object
        )

    def diagnose(self, X: Any) -> pd.DataFrame:
        """What the model wanted to write, one row per text.

        Returns
        -------
        DataFrame
            ``proba_<class>`` for each class, ``label_mass`` (the
            full-vocabulary probability of the labels' first tokens), ``top_token``
            (the model's own first choice, decoded), ``top_token_is_label``
            and ``predicted``.

        Raises
        ------
        ValueError
            With several outputs: call ``estimators_[j].diagnose(X)`` for
            output ``j`` (a joint read has no label mass to show).
        """
        if self._kind() != "single":
            if "joint_token_ids_" in vars(self):  # a joint read
                raise ValueError(
                    f"diagnose reads one output; this estimator reads {self.n_outputs_} jointly, where the "
                    "label mass is always 1: diagnose a multioutput_read='separate' fit (clf.estimators_[j])"
                )
            raise ValueError(
                f"diagnose reads one output; this estimator has {self.n_outputs_}: "
                "call clf.estimators_[j].diagnose(X) for output j"
            )
        every_output = self._read(X)
        proba = np.exp(self.log_proba_from_reads(every_output)[0])
        reads = every_output[0]
        flat = [t for ids in self.label_token_ids_ for t in ids]
        tokenizer = self._engine().tokenizer
        frame = pd.DataFrame({f"proba_{c}": proba[:, k] for k, c in enumerate(self.classes_)})
        frame["label_mass"] = reads.label_mass()
        frame["top_token"] = [tokenizer.decode([int(t)]) for t in reads.top_token]
        frame["top_token_is_label"] = np.isin(reads.top_token, flat)
        frame["predicted"] = predicted_from("single", proba, self.classes_, log=False, priors=tie_priors(self))
        return frame

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = text_classifier_tags(super().__sklearn_tags__())
        tags.target_tags.multi_output = True
        return tags

"""A fitted plan's reads on Ray's own vLLM stage (``ray.data.llm``): the
preprocess/postprocess pair that stage takes (``LabelReadStages``) and the
whole processor over it (``ray_llm_processor``), for a plan that reads each
text once."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..exceptions import TruncationWarning, warn_user
from ..fitting.shaping import method_result, output_kind
from ..fitting.ties import tie_priors
from ..reading.batches import MAX_LOGPROB_TOKEN_IDS
from ._columns import check_methods, output_frame

__all__ = ["STAGE_OPTIONS", "LabelReadStages", "ray_llm_processor"]

#: The processor settings the pair needs: prompts arrive as token ids, and
#: nothing is detokenized.
STAGE_OPTIONS: dict[str, Any] = {"chat_template_stage": False, "tokenize_stage": False, "detokenize_stage": False}
#: The row field carrying the input column names from preprocess to postprocess.
_COLUMNS = "__llm_label_clf_columns__"
_tokenizers: dict[str, Any] = {}
_tokenizers_lock = threading.Lock()


def _tokenizer(model: str) -> Any:
    """The model's tokenizer (the built-in model's folder, a local folder or a
    hub id), loaded once per process."""
    from transformers import AutoTokenizer

    from ..models.builtin import resolve_model

    with _tokenizers_lock:
        if model not in _tokenizers:
            _tokenizers[model] = AutoTokenizer.from_pretrained(resolve_model(model))
        return _tokenizers[model]


def _max_model_len(model: str) -> int:
    """The model's context length from its config (what vLLM uses unless
    ``max_model_len`` is set in the engine's arguments)."""
    from transformers import AutoConfig

    from ..models.builtin import resolve_model

    return int(AutoConfig.from_pretrained(resolve_model(model)).max_position_embeddings)


def _one_read_plan(estimator: Any) -> tuple[Any, Any]:
    """The estimator's plan and its single read; ValueError naming what makes
    the estimator need more than one request per text."""
    from ..classifier import LLMLabelClassifier
    from ..reading.plan import ReadingPlan

    why = None
    if not isinstance(estimator, LLMLabelClassifier):
        why = f"it is a {type(estimator).__name__}, not an LLMLabelClassifier"
    elif output_kind(estimator) != "single" or len(estimator.plans_) != 1:
        why = "it has several outputs or labels (a read per output or label)"
    elif not isinstance(estimator.plans_[0], ReadingPlan):
        why = "it reads its outputs jointly (an answer format)"
    else:
        plan = estimator.plans_[0]
        if plan.prune_margin is not None:
            why = "it prunes label prefixes (prune_margin)"
        elif len(plan.trie.reads) != 1:
            reads = len(plan.trie.reads)
            why = f"its labels are read whole, {reads} reads a text (label_mode='first_token' or 'options' read one)"
        elif len(plan.trie.reads[0].next_ids) > MAX_LOGPROB_TOKEN_IDS:
            n_ids = len(plan.trie.reads[0].next_ids)
            why = f"it reads {n_ids} label tokens, more than vLLM's {MAX_LOGPROB_TOKEN_IDS} a request"
    if why is not None:
        raise ValueError(
            f"ray.data.llm maps a text to one request, and this estimator needs more: {why}; "
            "score_ray_dataset runs any estimator"
        )
    plan = estimator.plans_[0]
    return plan, plan.trie.reads[0]


class LabelReadStages:
    """The preprocess/postprocess pair of Ray's own vLLM stage for a fitted estimator that reads a text once.

    ``preprocess`` renders a row's prompt as token ids and asks for the label
    tokens' logprobs (``logprob_token_ids``); ``postprocess`` turns them into
    the estimator's outputs with its own arithmetic. Build the processor's
    config over ``model_source`` and ``STAGE_OPTIONS``. Only an estimator
    whose every text needs one read qualifies (one output, labels read by one
    token, at most 128 label tokens, no ``prune_margin``, no joint read).

    Parameters
    ----------
    estimator : LLMLabelClassifier
        A fitted estimator that reads each text once (above). Its ``model``
        is the model the stage must load (``model_source``).
    method : str or list of str, default="predict_proba"
        One or several of ``predict_proba``, ``predict_log_proba``,
        ``predict``, ``decision_function``, ``transform``: they pick the
        columns ``postprocess`` adds, named as ``score_ray_dataset`` names
        them (``proba_<class>`` and ``predicted`` for ``predict_proba``,
        ``get_feature_names_out()`` for ``transform``).
    input_columns : str or list of str, default="text"
        The text column (fills ``{text}``), or a list of columns filling the
        prompt fields of their names.
    id_column : str or None, default=None
        The column that names rows in errors and truncation warnings (else
        they say "a row").
    max_model_len : int or None, default=None
        The engine's context length, which a prompt is cut to fit (or
        refused, with the estimator's ``too_long="raise"``). None: the model
        config's ``max_position_embeddings``, what vLLM uses unless
        ``engine_kwargs["max_model_len"]`` is set; pass that value when it is.

    Attributes
    ----------
    methods : tuple of str
        The methods checked, in the order of their columns.
    plan : ReadingPlan
        The estimator's plan (``estimator.plans_[0]``).
    label_ids : list of int
        The label token ids every request reads (its ``logprob_token_ids``).
    max_model_len : int
        The context length prompts are cut to fit.

    Raises
    ------
    ValueError
        An estimator whose texts need several reads (or not an
        ``LLMLabelClassifier``), naming why; an unknown method.
    NotFittedError
        ``estimator`` is not fitted.

    See Also
    --------
    ray_llm_processor : the whole processor over this pair.
    score_ray_dataset : any estimator, vLLM run inside Ray Data actors.

    Examples
    --------
    >>> import ray  # doctest: +SKIP
    >>> from ray.data.llm import build_processor, vLLMEngineProcessorConfig  # doctest: +SKIP
    >>> from llm_label_clf.distributed.ray_llm import STAGE_OPTIONS  # doctest: +SKIP
    >>> clf = LLMLabelClassifier(prompt="Review: {text}\\nSentiment:").fit(train.text, train.label)  # doctest: +SKIP
    >>> stages = LabelReadStages(clf, id_column="id")  # doctest: +SKIP
    >>> config = vLLMEngineProcessorConfig(model_source=stages.model_source, concurrency=4, batch_size=64,
    ...                                    **STAGE_OPTIONS)  # doctest: +SKIP
    >>> processor = build_processor(config, preprocess=stages.preprocess,
    ...                             postprocess=stages.postprocess)  # doctest: +SKIP
    >>> processor(ray.data.read_parquet("reviews/")).write_parquet("scored/")  # doctest: +SKIP
    """

    def __init__(
        self,
        estimator: Any,
        *,
        method: str | Sequence[str] = "predict_proba",
        input_columns: str | Sequence[str] = "text",
        id_column: str | None = None,
        max_model_len: int | None = None,
    ) -> None:
        self.methods = check_methods(estimator, method)
        self.plan, read = _one_read_plan(estimator)
        self.estimator = estimator
        self.label_ids = [int(i) for i in read.next_ids]
        self.input_columns = input_columns
        self.id_column = id_column
        self.max_model_len = max_model_len or _max_model_len(estimator.model)

    @property
    def model_source(self) -> str:
        """What ``vLLMEngineProcessorConfig(model_source=...)`` loads: the
        built-in model's folder, else the estimator's ``model``."""
        from ..models.builtin import resolve_model

        return resolve_model(self.estimator.model)

    def _name(self, row: Mapping[str, Any]) -> str:
        if self.id_column is None:
            return "a row (pass id_column= to name rows by their ids)"
        value = row.get(self.id_column)
        return f"the row with {self.id_column}={value.item() if isinstance(value, np.generic) else value!r}"

    def _record(self, row: Mapping[str, Any]) -> dict[str, str]:
        import pandas as pd

        from ..fitting.inputs import as_records
        from ._batch import as_x

        return as_records(as_x(pd.DataFrame([row]), self.input_columns))[0]

    def preprocess(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row plus its read's prompt token ids and sampling parameters.

        Parameters
        ----------
        row : dict
            One row of the Dataset, with the ``input_columns``.

        Returns
        -------
        dict
            ``row`` plus ``tokenized_prompt`` (the prompt's token ids),
            ``sampling_params`` (one token, greedy, the logprobs of
            ``label_ids``) and the input column names for ``postprocess``.

        Raises
        ------
        ValueError
            The estimator refuses the row, naming it.

        Warns
        -----
        TruncationWarning
            The row's prompt was cut to fit ``max_model_len``.
        """
        try:
            record = self._record(row)
            encoded = self.plan.encode([record], _tokenizer(self.estimator.model), self.max_model_len)
        except (KeyError, ValueError) as exc:
            raise ValueError(f"preprocess failed on {self._name(row)}: {exc}") from exc
        if encoded.truncated:
            warn_user(
                f"{self._name(row)} was longer than the model reads ({self.plan.prompt_limit(self.max_model_len)} "
                "tokens with the prompt) and was cut at the end; set too_long='raise' to refuse it",
                TruncationWarning,
            )
        params = {"max_tokens": 1, "temperature": 0.0, "logprob_token_ids": self.label_ids, "detokenize": False}
        ids = [int(t) for t in encoded.ids[0]]
        return {**row, "tokenized_prompt": ids, "sampling_params": params, _COLUMNS: list(row)}

    def _label_logprobs(self, row: Mapping[str, Any]) -> tuple[np.ndarray, int]:
        """The read's label logprobs (in ``label_ids`` order) and the sampled token."""
        steps = row.get("logprobs")
        if steps is None or len(steps) == 0:
            raise ValueError(f"postprocess: no logprobs for {self._name(row)} (was the read's request refused?)")
        step = steps[0]
        values = []
        for token in self.label_ids:
            entry = step.get(token, step.get(str(token)))
            if entry is None:
                raise ValueError(f"postprocess: vLLM returned no logprob of token {token} for {self._name(row)}")
            values.append(float(entry["logprob"] if isinstance(entry, Mapping) else entry))
        generated = row.get("generated_tokens")
        top = int(generated[0]) if generated is not None and len(generated) else -1
        return np.array(values, dtype=np.float64), top

    def postprocess(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row's input columns plus the estimator's outputs for it.

        Parameters
        ----------
        row : dict
            A row as the vLLM stage returns it: ``preprocess``'s row plus the
            read's ``logprobs`` and ``generated_tokens``.

        Returns
        -------
        dict
            The row's input columns plus the columns of ``methods``
            (``proba_<class>``, ``predicted``, ...).

        Raises
        ------
        ValueError
            The row has no logprobs, or not those of every label token,
            naming it.
        """
        from ..reading.batches import LabelScores

        values, top = self._label_logprobs(row)
        sequences = self.plan.trie.sequence_logprobs(values[None, :])
        reads = self.plan.finish(LabelScores(sequences, np.array([top], dtype=np.int64)))
        log_probas = self.estimator.log_proba_from_reads([reads])  # calibration and the label-mass check included
        classes = self.estimator.classes_
        results = {
            m: reads.class_logprobs if m == "transform"
            else method_result(m, "single", log_probas, classes, priors=tie_priors(self.estimator))
            for m in self.methods
        }
        scores = output_frame(self.estimator, self.methods, results, 1)
        out = {name: row[name] for name in row.get(_COLUMNS, [])}
        for name in scores.columns:
            value = scores[name].iloc[0]
            out[name] = value.item() if isinstance(value, np.generic) else value
        return out


def ray_llm_processor(
    estimator: Any,
    *,
    method: str | Sequence[str] = "predict_proba",
    input_columns: str | Sequence[str] = "text",
    id_column: str | None = None,
    max_model_len: int | None = None,
    preprocess_map_kwargs: Mapping[str, Any] | None = None,
    postprocess_map_kwargs: Mapping[str, Any] | None = None,
    **config: Any,
) -> Any:
    """A ``ray.data.llm`` processor that scores a Dataset with a fitted estimator on Ray's own vLLM stage.

    ``processor(dataset)`` gives the input columns plus the estimator's
    outputs, one vLLM request per row; the estimator must read each text once
    (``LabelReadStages``).

    Parameters
    ----------
    estimator : LLMLabelClassifier
        A fitted estimator that reads each text once.
    method : str or list of str, default="predict_proba"
        One or several of ``predict_proba``, ``predict_log_proba``,
        ``predict``, ``decision_function``, ``transform``: they pick the
        columns added (``proba_<class>`` and ``predicted`` for
        ``predict_proba``, ``get_feature_names_out()`` for ``transform``).
    input_columns : str or list of str, default="text"
        The text column (fills ``{text}``), or a list of columns filling the
        prompt fields of their names.
    id_column : str or None, default=None
        The column that names rows in errors and truncation warnings.
    max_model_len : int or None, default=None
        The context length prompts are cut to fit. None:
        ``engine_kwargs["max_model_len"]``, else the model config's (what
        vLLM uses).
    preprocess_map_kwargs, postprocess_map_kwargs : dict or None, default=None
        Ray Data's ``map`` arguments for the preprocess and postprocess
        stages (``num_cpus``, ``memory``, ``concurrency``, ...), passed to
        ``build_processor``.
    **config
        ``vLLMEngineProcessorConfig``'s settings (``concurrency``,
        ``batch_size``, ``engine_kwargs``, ``placement_group_config``, ...);
        ``model_source`` defaults to the estimator's model, and
        ``STAGE_OPTIONS`` always apply.

    Returns
    -------
    ray.data.llm.Processor
        Called on a ``ray.data.Dataset``, gives a lazy Dataset of its rows'
        input columns with the scores beside them.

    Raises
    ------
    ValueError, NotFittedError
        As ``LabelReadStages`` raises them: an estimator that needs more
        than one read a text, an unknown method, an unfitted estimator.
    ImportError
        Ray Data is not installed (``pip install "llm_label_clf[ray]"``).

    See Also
    --------
    LabelReadStages : the preprocess/postprocess pair this builds on.
    score_ray_dataset : any estimator, vLLM run inside Ray Data actors.

    Examples
    --------
    >>> import ray  # doctest: +SKIP
    >>> clf = LLMLabelClassifier(prompt="Review: {text}\\nSentiment:").fit(train.text, train.label)  # doctest: +SKIP
    >>> processor = ray_llm_processor(clf, id_column="id", concurrency=4, batch_size=64,
    ...                               engine_kwargs={"max_model_len": 4096})  # doctest: +SKIP
    >>> scored = processor(ray.data.read_parquet("reviews/"))  # 4 engines, a GPU each  # doctest: +SKIP
    >>> scored.write_parquet("scored/")  # id, text, proba_negative, proba_positive, predicted  # doctest: +SKIP
    """
    try:
        from ray.data.llm import build_processor, vLLMEngineProcessorConfig
    except ImportError as exc:
        raise ImportError(
            "ray_llm_processor needs Ray Data: pip install 'llm_label_clf[ray]' (the stage runs the vLLM "
            "installed beside it; Ray's own 'llm' extra pins another vLLM)"
        ) from exc
    engine_kwargs = config.get("engine_kwargs") or {}
    limit = max_model_len or engine_kwargs.get("max_model_len")
    stages = LabelReadStages(
        estimator, method=method, input_columns=input_columns, id_column=id_column, max_model_len=limit
    )
    settings = {"model_source": stages.model_source, **config, **STAGE_OPTIONS}
    return build_processor(
        vLLMEngineProcessorConfig(**settings),
        preprocess=stages.preprocess,
        postprocess=stages.postprocess,
        preprocess_map_kwargs=dict(preprocess_map_kwargs or {}) or None,
        postprocess_map_kwargs=dict(postprocess_map_kwargs or {}) or None,
    )

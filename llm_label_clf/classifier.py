"""``LLMLabelClassifier``: a scikit-learn classifier whose probabilities are
the softmax over the full-vocabulary logprobs of each class's label tokens,
read as the model's next token after a prompt.

The estimator holds plain data only; the engine lives in the process-wide
registry (``engine.get_engine``), so clones share it and pickles never hold it.
"""

from __future__ import annotations

import asyncio
import numbers
import warnings
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._bridge import get_loop, run_sync
from ._inputs import as_records
from ._joint import JointReadMixin, read_joint
from ._learning import LearningMixin
from ._outputs import output_labels, output_prompts
from ._prompting import PromptingMixin
from ._targets import Target, as_target, unique_classes
from .calibration import (
    CALIBRATIONS,
)
from .engine import DEFAULT_MODEL, Engine, get_engine
from .exceptions import LowLabelMassWarning
from .label_tokens import distinct_first_tokens, in_context_verbalizer, label_token_sequences
from .label_trie import LabelTrie
from .options import option_codes
from .prompts import DEFAULT_PROMPT, PromptTemplate
from .scoring import LabelScores, read_sequence_logprobs

__all__ = ["LLMLabelClassifier"]

T = TypeVar("T")


_LOW_MASS_POLICIES = ("ignore", "raise", "warn")
_TOO_LONG_POLICIES = ("raise", "truncate")
_LABEL_MODES = ("auto", "first_token", "full_sequence", "options")
_LENGTH_NORMS = (None, "token", "char")
_MULTIOUTPUT_READS = ("joint", "separate")
#: Fitted attributes that one kind of fit sets and another does not: cleared on refit.
_FIT_ATTRIBUTES = (
    "estimators_", "n_outputs_", "output_kind_", "few_shot_prefix_",
    "joint_names_", "joint_options_", "joint_regex_", "joint_token_ids_",
)
#: What ``engine_options`` may hold with ``base_url``: the remote client's settings.
_REMOTE_OPTIONS = {"max_concurrency", "timeout_s", "max_retries", "api_key_env", "max_batch"}
#: How many training rows are rendered to check that labels tokenize the same after each.
_LABEL_CHECK_ROWS = 4



def _progress_bar(total: int) -> Any:
    """A tqdm bar (notebook widget where available), imported only when shown."""
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="text")


class LLMLabelClassifier(ClassifierMixin, JointReadMixin, PromptingMixin, LearningMixin, BaseEstimator):
    """Zero-shot text classifier over an LLM's next-token label logprobs.

    Parameters
    ----------
    model : str, default="smollm2-135m-instruct"
        A built-in model name, a local Hugging Face folder, or a hub id.
    base_url : str, list of str or None
        None: an embedded vLLM engine in this process. Otherwise the URL of a
        vLLM OpenAI-compatible server (``http://host:8000/v1``) or a list of
        them (load spread, fail-over); ``model`` then names the served model.
    engine_options : dict or None
        vLLM engine arguments (``dtype``, ``max_model_len``, ``tensor_parallel_size``,
        ``data_parallel_size``, ``kv_cache_memory_bytes``, ...). With ``base_url``:
        the client's ``max_concurrency``, ``timeout_s``, ``max_retries`` and
        ``api_key_env`` (the environment variable holding the API key; the key
        itself is never stored). Estimators with equal ``model``, ``base_url``
        and ``engine_options`` share one engine per process.
    labels : mapping or None
        None: the class names from ``y`` are what the model writes. Otherwise a
        mapping class -> label string, or class -> list of alias strings whose
        probabilities are summed into the class.
    label_mode : {"auto", "first_token", "full_sequence", "options"}, default="auto"
        How a class is scored. "full_sequence": log P(all of the label's tokens
        | prompt), exact, from one read per distinct label prefix (the prompt is
        computed once per text thanks to the prefix cache). "first_token": only
        the label's first token is read (one read per text); classes must start
        with distinct tokens. "options": the classes are listed in the prompt as
        lettered options (A., B., ...; zero-padded numbers beyond 26 classes) and
        the option codes are read. "auto": "first_token" when every label is one
        token of its own after the prompt (then both are the same, exact, number),
        else "full_sequence".
    length_norm : {None, "token", "char"}, default=None
        Divide each label's logprob by its length in tokens or characters before
        the softmax (as lm-evaluation-harness's ``acc_norm`` does per character),
        so long labels are not penalised for their length. The result is then a
        normalised score rather than the model's probability.
    prompt : str or None
        A template with ``{text}`` (or, for DataFrame input, fields named after
        columns) and optionally ``{labels}`` (the labels listed, "a, b or c").
        None uses ``"Text: {text}\\nLabel:"``.
    instructions : str or None
        A line put before the prompt (the system message in chat mode).
    chat : bool or "auto", default=False
        Render the prompt as a user turn of the model's chat template and read
        the reply's first token. "auto" uses the template when the model has one.
        False by default: measured better for the built-in model (see README).
    random_state : int, RandomState or None
        Seed for anything sampled (reserved for few-shot selection).
    batch_size : int, default=512
        Texts sent to the engine at once; bounds memory on long inputs.
    progress : bool, default=True
        Show a progress bar when a prediction spans several batches.
    low_mass : {"warn", "raise", "ignore"}, default="warn"
        What to do when the labels' total probability for a text is below
        ``low_mass_threshold`` (the model wanted to answer something else).
    low_mass_threshold : float, default=1e-4
    too_long : {"truncate", "raise"}, default="truncate"
        A text whose prompt is longer than the model reads is cut at its end
        (never the instructions or the answer cue) with a ``TruncationWarning``,
        or refused with an error naming the item.
    threshold : float, default=0.5
        Multi-label ``y``: ``predict`` marks a label when P(it applies) >= threshold.
    few_shot : int, default=0
        Labelled examples per class, drawn from the training data (stratified,
        seeded by ``random_state``) and written before every text in the prompt's
        own format with their answers. The block is the same for every text, so
        the prefix cache computes it once. Fails with a clear error when the
        block leaves fewer than 64 tokens of the model's context.
    calibration : {None, "contextual", "batch", "learned"}, default=None
        Removes the model's bias toward some labels (see ``calibration.py``):
        "contextual" divides by the probabilities of content-free inputs;
        "batch" by each class's mean probability over the texts of the call
        (calls with fewer than 16 texts use the mean over up to 256 training
        texts not shown as examples, estimated at fit, or the content-free bias
        when every training text is an example; a text's probabilities depend
        on its batch-mates); "learned" fits a logistic regression on the label
        log-probabilities of the training texts (not those used as few-shot
        examples), cross-fitted over up to 5 folds.
    multioutput_read : {"separate", "joint"}, default="separate"
        For a 2-D ``y`` (several outputs). "separate": each output is its own
        read of the text (its own prompt, any ``label_mode``), and the reads
        share the text's cached prefix where their prompts start alike. "joint":
        one read per text answers every output: the prompt lists each output's
        classes as lettered options and vLLM's structured outputs hold the
        reply to one letter per line, read at each output's position (the
        core's ``slots``); a later output is read after the model's own answer
        to the earlier ones. Separate is the default: on TREC with the built-in
        model the joint read was 7.8x faster but near chance (the model cannot
        answer by letter), and separate reads are exact per output (README).

    Attributes
    ----------
    classes_ : ndarray
        Class labels; the column order of ``predict_proba``.
    verbalizers_ : list of list of str
        Per class, the strings read after the prompt (leading space included).
    label_token_ids_ : list of list of int
        Per class, the first token id of each verbalizer in context.
    label_sequences_ : list of list of tuple of int
        Per class, all token ids of each verbalizer in context.
    label_mode_ : str
        The scoring mode in use ("first_token", "full_sequence" or "options").
    options_ : list of str or None
        In options mode, each class's option code (in ``classes_`` order).
    prompt_ : str
        The template in use.
    chat_ : bool
        Whether the chat template is used.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        base_url: str | Sequence[str] | None = None,
        engine_options: Mapping[str, Any] | None = None,
        labels: Mapping[Any, str | Sequence[str]] | None = None,
        label_mode: str = "auto",
        length_norm: str | None = None,
        prompt: str | None = None,
        instructions: str | None = None,
        chat: bool | str = False,
        random_state: int | np.random.RandomState | None = None,
        batch_size: int = 512,
        progress: bool = True,
        low_mass: str = "warn",
        low_mass_threshold: float = 1e-4,
        too_long: str = "truncate",
        threshold: float = 0.5,
        few_shot: int = 0,
        calibration: str | None = None,
        multioutput_read: str = "separate",
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.engine_options = engine_options
        self.labels = labels
        self.label_mode = label_mode
        self.length_norm = length_norm
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
        self.multioutput_read = multioutput_read

    # ------------------------------------------------------------------ fit

    def _check_params(self) -> None:
        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"{type(self).__name__}: {name}={getattr(self, name)!r} {why}")

        if not isinstance(self.model, str) or not self.model:
            raise bad("model", "must be a built-in model name, a local folder or a hub id (str)")
        urls = [self.base_url] if isinstance(self.base_url, str) else self.base_url
        if urls is not None and (
            not isinstance(urls, Sequence) or not urls or not all(isinstance(u, str) and u for u in urls)
        ):
            raise bad("base_url", "must be None, a server URL such as 'http://127.0.0.1:8000/v1', or a list of them")
        if self.engine_options is not None and (
            not isinstance(self.engine_options, Mapping) or not all(isinstance(k, str) for k in self.engine_options)
        ):
            raise bad("engine_options", "must be None or a dict of vLLM engine arguments")
        per_output = isinstance(self.labels, Sequence) and not isinstance(self.labels, str)
        for mapping in (self.labels if per_output else [self.labels]):
            if mapping is None:
                continue
            if not isinstance(mapping, Mapping) or not mapping:
                raise bad(
                    "labels",
                    "must be None, a non-empty mapping class -> label or list of aliases, "
                    "or (several outputs) a list of such mappings",
                )
            for cls, value in mapping.items():
                aliases = [value] if isinstance(value, str) else value
                if not isinstance(aliases, Sequence) or not aliases or not all(
                    isinstance(a, str) and a.strip() for a in aliases
                ):
                    raise bad("labels", f"maps class {cls!r} to {value!r}; give a non-empty string or list of them")
        if self.label_mode not in _LABEL_MODES:
            raise bad("label_mode", f"must be one of {sorted(_LABEL_MODES)}")
        if self.length_norm not in _LENGTH_NORMS:
            raise bad("length_norm", "must be None, 'token' or 'char'")
        prompts = [self.prompt] if self.prompt is None or isinstance(self.prompt, str) else self.prompt
        if not isinstance(prompts, Sequence) or not all(p is None or isinstance(p, str) for p in prompts):
            raise bad("prompt", "must be None, a template string with {text}, or (several outputs) a list of them")
        if self.instructions is not None and not isinstance(self.instructions, str):
            raise bad("instructions", "must be None or a string")
        if not (self.chat is True or self.chat is False or self.chat == "auto"):
            raise bad("chat", "must be True, False or 'auto'")
        batch_size = self.batch_size
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise bad("batch_size", "must be a positive integer")
        if not isinstance(self.progress, bool):
            raise bad("progress", "must be True or False")
        if self.low_mass not in _LOW_MASS_POLICIES:
            raise bad("low_mass", f"must be one of {sorted(_LOW_MASS_POLICIES)}")
        if not isinstance(self.low_mass_threshold, numbers.Real) or not 0 <= self.low_mass_threshold < 1:
            raise bad("low_mass_threshold", "must be a number in [0, 1)")
        few_shot = self.few_shot
        if isinstance(few_shot, bool) or not isinstance(few_shot, numbers.Integral) or few_shot < 0:
            raise bad("few_shot", "must be a non-negative integer (examples per class)")
        if self.calibration not in CALIBRATIONS:
            raise bad("calibration", "must be None, 'contextual', 'batch' or 'learned'")
        if not isinstance(self.threshold, numbers.Real) or not 0 < self.threshold < 1:
            raise bad("threshold", "must be a number in (0, 1)")
        if self.multioutput_read not in _MULTIOUTPUT_READS:
            raise bad("multioutput_read", f"must be one of {list(_MULTIOUTPUT_READS)}")
        if self.too_long not in _TOO_LONG_POLICIES:
            raise bad("too_long", f"must be one of {sorted(_TOO_LONG_POLICIES)}")
        try:
            check_random_state(self.random_state)
        except ValueError:
            raise bad("random_state", "must be None, an int or a numpy RandomState") from None
        for template in prompts:
            try:
                PromptTemplate.parse(DEFAULT_PROMPT if template is None else template)
            except ValueError as exc:
                raise ValueError(f"{type(self).__name__}: {exc}") from None

    def _engine(self) -> Engine:
        """The shared engine: embedded, or the remote servers of ``base_url``."""
        if self.base_url is not None:
            from .remote import get_remote_engine

            options = dict(self.engine_options or {})
            unknown = sorted(set(options) - _REMOTE_OPTIONS)
            if unknown:
                raise ValueError(
                    f"{type(self).__name__}: engine_options {unknown} do not apply to remote servers "
                    f"(base_url is set); the remote client takes {sorted(_REMOTE_OPTIONS)}, and the "
                    "servers' own engine options are set where they are started"
                )
            return get_remote_engine(self.base_url, self.model, **options)
        return get_engine(self.model, self.engine_options)

    def fit(self, X: Any, y: Any) -> LLMLabelClassifier:
        """Checks the parameters, sets ``classes_`` and finds each class's label
        tokens after the rendered prompt. No weights are learned (zero-shot).

        ``y`` is one label per text; or one column per output (2-D array or
        DataFrame: then ``classes_`` is a list, one array per output); or
        multi-label: a 0/1 indicator matrix, or one collection of labels per
        text (one yes/no read per label; ``classes_`` holds the labels)."""
        self._check_params()
        records = as_records(X)
        if len(records) == 0:
            raise ValueError("fit needs at least one labelled example; got an empty X")
        target = as_target(y, len(records))
        for name in _FIT_ATTRIBUTES:
            self.__dict__.pop(name, None)
        if target.kind == "single":
            if not (self.prompt is None or isinstance(self.prompt, str)):
                raise ValueError(
                    f"{type(self).__name__}: prompt is a list of {len(self.prompt)} templates but y has "
                    "one output; give one template (a list is for a 2-D y, one per column)"
                )
            if isinstance(self.labels, Sequence) and not isinstance(self.labels, str):
                raise ValueError(
                    f"{type(self).__name__}: labels is a list of {len(self.labels)} mappings but y has one "
                    "output; give one mapping class -> label (a list is for a 2-D y, one per column)"
                )
            return self._fit_output(records, target.columns[0])
        if self.multioutput_read == "joint":
            return self._fit_joint(records, target, self._engine())
        return self._fit_outputs(records, target)

    def _fit_outputs(self, records: list[dict[str, str]], target: Target) -> LLMLabelClassifier:
        """Several outputs: one fitted single-output estimator per column of ``y``
        (or per label of a multi-label ``y``), all on the same shared engine."""
        prompts = output_prompts(self.prompt, self.labels, target)
        estimators = []
        for j, column in enumerate(target.columns):
            sub = clone(self).set_params(prompt=prompts[j], labels=output_labels(self.labels, target, j))
            classes = np.array([0, 1]) if target.kind == "multilabel" else None
            try:
                estimators.append(sub._fit_output(records, column, classes=classes))
            except ValueError as exc:
                name = target.names[j] if target.names is not None else j
                raise ValueError(f"output {name!r}: {exc}") from None
        self.estimators_ = estimators
        self.n_outputs_ = len(estimators)
        self.output_kind_ = target.kind
        if target.kind == "multilabel":
            names = target.names if target.names is not None else list(range(len(estimators)))
            self.classes_ = np.array(names)
        else:
            self.classes_ = [e.classes_ for e in estimators]
        return self

    def _fit_output(
        self, records: list[dict[str, str]], y: np.ndarray, *, classes: np.ndarray | None = None
    ) -> LLMLabelClassifier:
        """One output: ``classes_`` from ``y`` (or given), then the label tokens."""
        template = PromptTemplate.parse(DEFAULT_PROMPT if self.prompt is None else self.prompt)
        if classes is not None:
            self.classes_ = classes
            y_index = np.searchsorted(classes, y)
        else:
            self.classes_, y_index = unique_classes(y)
        class_labels = self._class_labels()
        engine = self._engine()
        self.chat_ = self._uses_chat(engine)
        self.prompt_ = template.template
        self._check_fields(template, records[0])
        if not self.chat_ and not template.suffix.strip():
            raise ValueError(
                f"{type(self).__name__}: prompt={template.template!r} ends with a field; add an "
                "answer cue after it (e.g. '\\nAnswer:') so the label is read in a fixed context"
            )
        prompt_end = "" if self.chat_ else template.suffix
        if self.label_mode == "options":
            self.options_ = option_codes(len(self.classes_))
            spoken = [[code] for code in self.options_]
        else:
            self.options_ = None
            spoken = class_labels
        self.verbalizers_ = [
            [in_context_verbalizer(a, prompt_end, chat=self.chat_) for a in aliases] for aliases in spoken
        ]
        label_fields = self._label_fields()
        self._fit_few_shot(template, records, y_index, label_fields, engine)
        samples = [self._render(template, r, engine, label_fields) for r in records[:_LABEL_CHECK_ROWS]]
        names = self.classes_.tolist()
        self.label_sequences_ = label_token_sequences(
            engine.tokenizer, samples, self.verbalizers_, names, add_special_tokens=not self.chat_
        )
        single = all(len(seq) == 1 for seqs in self.label_sequences_ for seq in seqs)
        if self.label_mode == "auto":
            self.label_mode_ = "first_token" if single else "full_sequence"
        else:
            self.label_mode_ = self.label_mode
        if self.label_mode_ == "first_token":
            self.label_token_ids_ = distinct_first_tokens(
                engine.tokenizer, self.label_sequences_, self.verbalizers_, names
            )
        else:
            self.label_token_ids_ = [list(dict.fromkeys(seq[0] for seq in seqs)) for seqs in self.label_sequences_]
        self._fit_calibration(template, records, y_index)
        return self

    # ----------------------------------------------------------- prediction

    def _scored_sequences(self) -> tuple[list[tuple[int, ...]], np.ndarray]:
        """The token sequences read and the class owning each: each class's
        first tokens in first_token mode, its whole verbalizers otherwise."""
        if self.label_mode_ == "first_token":
            per_class = [[(t,) for t in ids] for ids in self.label_token_ids_]
        else:
            per_class = [[tuple(seq) for seq in seqs] for seqs in self.label_sequences_]
        sequences = [seq for group in per_class for seq in group]
        owner = np.repeat(np.arange(len(per_class)), [len(group) for group in per_class])
        return sequences, owner

    def _trie(self) -> LabelTrie:
        return LabelTrie.build(self._scored_sequences()[0])

    def _chunks(self, n: int) -> list[tuple[int, int]]:
        return [(start, min(start + self.batch_size, n)) for start in range(0, n, self.batch_size)]

    def _read(self, X: Any) -> LabelScores:
        check_is_fitted(self, ["classes_", "label_sequences_"])
        return self._read_records(as_records(X), progress=self.progress)

    def _read_records(self, records: Sequence[Mapping[str, str]], *, progress: bool) -> LabelScores:
        engine = self._engine()
        trie = self._trie()
        parts = self._read_in_chunks(
            records,
            engine,
            lambda prompts, start: read_sequence_logprobs(engine, prompts, trie, offset=start),
            progress=progress,
        )
        return self._concat(parts, len(trie.sequences))

    def _read_in_chunks(
        self,
        records: Sequence[Mapping[str, str]],
        engine: Engine,
        read: Callable[[list[list[int]], int], Coroutine[Any, Any, T]],
        *,
        progress: bool,
    ) -> list[T]:
        """Renders, tokenizes and reads ``batch_size`` records at a time
        (``read(prompt_ids, start)``), so memory stays bounded however long
        ``X`` is; one warning at the end names every truncated text."""
        chunks = self._chunks(len(records))
        bar = _progress_bar(len(records)) if progress and len(chunks) > 1 else None
        truncated: list[int] = []
        parts = []
        try:
            for start, stop in chunks:
                prompts = self._prompt_token_ids(records[start:stop], engine, offset=start, truncated=truncated)
                parts.append(run_sync(read(prompts, start)))
                if bar is not None:
                    bar.update(stop - start)
        finally:
            if bar is not None:
                bar.close()
        self._warn_truncated(truncated, engine)
        return parts

    async def _aread_in_chunks(
        self,
        records: Sequence[Mapping[str, str]],
        engine: Engine,
        read: Callable[[list[list[int]], int], Coroutine[Any, Any, T]],
    ) -> list[T]:
        """``_read_in_chunks`` for callers inside an event loop: the reads run
        on the library loop while the caller's loop stays free."""
        truncated: list[int] = []
        parts = []
        for start, stop in self._chunks(len(records)):
            prompts = self._prompt_token_ids(records[start:stop], engine, offset=start, truncated=truncated)
            future = asyncio.run_coroutine_threadsafe(read(prompts, start), get_loop())
            parts.append(await asyncio.wrap_future(future))
        self._warn_truncated(truncated, engine)
        return parts

    def _reserved_tokens(self) -> int:
        """Tokens the reads add after a prompt: a joint read's answer, else the
        deepest label read's prefix and the token it reads."""
        if self._joint_fitted():
            return 2 * len(self.joint_token_ids_) - 1
        return 1 + self._trie().max_prefix_len

    def _joint_read(self, X: Any) -> list[np.ndarray]:
        """A joint read's slot logprobs, one (n, n_classes) array per output."""
        engine = self._engine()
        parts = self._read_in_chunks(as_records(X), engine, self._joint_chunk(engine), progress=self.progress)
        return self._joint_concat(parts)

    async def _ajoint_read(self, X: Any) -> list[np.ndarray]:
        records = as_records(X)
        engine = await asyncio.get_running_loop().run_in_executor(None, self._engine)
        return self._joint_concat(await self._aread_in_chunks(records, engine, self._joint_chunk(engine)))

    def _joint_chunk(self, engine: Engine) -> Callable[[list[list[int]], int], Coroutine[Any, Any, list[np.ndarray]]]:
        return lambda prompts, start: read_joint(
            engine, prompts, self.joint_token_ids_, self.joint_regex_, offset=start
        )

    def _joint_concat(self, parts: list[list[np.ndarray]]) -> list[np.ndarray]:
        return [
            np.concatenate([p[j] for p in parts]) if parts else np.zeros((0, len(ids)))
            for j, ids in enumerate(self.joint_token_ids_)
        ]

    @staticmethod
    def _normalised(slot_lp: list[np.ndarray]) -> list[np.ndarray]:
        return [lp - logsumexp(lp, axis=1, keepdims=True) if lp.shape[0] else lp for lp in slot_lp]

    async def _aread(self, X: Any) -> LabelScores:
        check_is_fitted(self, ["classes_", "label_sequences_"])
        records = as_records(X)
        engine = await asyncio.get_running_loop().run_in_executor(None, self._engine)
        trie = self._trie()
        parts = await self._aread_in_chunks(
            records, engine, lambda prompts, start: read_sequence_logprobs(engine, prompts, trie, offset=start)
        )
        return self._concat(parts, len(trie.sequences))

    @staticmethod
    def _concat(parts: list[LabelScores], n_ids: int) -> LabelScores:
        if not parts:
            return LabelScores(np.zeros((0, n_ids)), np.zeros(0, dtype=np.int64))
        return LabelScores(
            np.concatenate([p.logprobs for p in parts]), np.concatenate([p.top_token for p in parts])
        )

    def _class_logprobs(self, sequence_lp: np.ndarray) -> np.ndarray:
        """Per class, the log of the summed probability of its sequences."""
        _, owner = self._scored_sequences()
        out = np.empty((sequence_lp.shape[0], len(self.classes_)))
        for k in range(len(self.classes_)):
            out[:, k] = logsumexp(sequence_lp[:, owner == k], axis=1)
        return out

    def _sequence_lengths(self) -> np.ndarray:
        """Each scored sequence's length for ``length_norm``: tokens, or the
        characters of its decoded text (at least 1)."""
        sequences, _ = self._scored_sequences()
        if self.length_norm == "token":
            return np.array([len(seq) for seq in sequences], dtype=np.float64)
        tokenizer = self._engine().tokenizer
        return np.array([max(1, len(tokenizer.decode(list(seq)).strip())) for seq in sequences], dtype=np.float64)

    def _log_proba(self, scores: LabelScores, *, calibrate: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Log-probabilities over the classes (after the low-mass check, any
        length normalisation and the calibration), and the classes' unnormalised
        logprobs. ``calibrate=False`` (estimating the calibration) skips both the
        calibration and the low-mass check."""
        class_lp = self._class_logprobs(scores.logprobs)
        if calibrate:
            self._check_mass(class_lp)
        if class_lp.shape[0] == 0:
            return class_lp, class_lp
        scored = class_lp
        if self.length_norm is not None:
            scored = self._class_logprobs(scores.logprobs / self._sequence_lengths()[None, :])
        log_proba = scored - logsumexp(scored, axis=1, keepdims=True)
        if calibrate:
            log_proba = self._calibrate(log_proba)
        return log_proba, class_lp

    def _check_mass(self, class_lp: np.ndarray) -> None:
        if self.low_mass == "ignore" or class_lp.shape[0] == 0:
            return
        mass = np.exp(logsumexp(class_lp, axis=1))
        low = np.flatnonzero(mass < self.low_mass_threshold)
        if low.size == 0:
            return
        message = (
            f"{low.size} of {mass.size} texts have label mass below {self.low_mass_threshold} "
            f"(item {low[0]}: {mass[low[0]]:.2g}): the model mostly wants to answer something "
            "other than the labels there; reword the prompt or labels, or set low_mass='ignore'"
        )
        if self.low_mass == "raise":
            raise ValueError(message)
        warnings.warn(message, LowLabelMassWarning, stacklevel=3)

    def _outputs(self) -> list[LLMLabelClassifier] | None:
        """The per-output estimators when fitted on several outputs, else None."""
        check_is_fitted(self, ["classes_"])
        return self.__dict__.get("estimators_")

    def predict_log_proba(self, X: Any) -> np.ndarray | list[np.ndarray]:
        """Log-probabilities, columns in ``classes_`` order (several outputs: a
        list, one array per output; multi-label: log P(label applies), (n, n_labels))."""
        if self._is_joint():
            return self._normalised(self._joint_read(X))
        outputs = self._outputs()
        if outputs is None:
            return self._log_proba(self._read(X))[0]
        if self.output_kind_ == "multilabel":
            return np.log(self.predict_proba(X))
        return [e.predict_log_proba(X) for e in outputs]

    def predict_proba(self, X: Any) -> np.ndarray | list[np.ndarray]:
        """Probabilities (rows sum to 1), columns in ``classes_`` order. Several
        outputs: a list of such arrays, one per output (as scikit-learn's
        multi-output classifiers return). Multi-label: P(label applies) per
        label, shape (n, n_labels), from each label's yes/no read."""
        outputs = self._outputs()
        if outputs is None:
            log_proba = self.predict_log_proba(X)
            return [np.exp(lp) for lp in log_proba] if self._is_joint() else np.exp(log_proba)
        probas = [e.predict_proba(X) for e in outputs]
        return self._combine(probas)

    def _combine(self, probas: list[np.ndarray]) -> np.ndarray | list[np.ndarray]:
        if self.output_kind_ == "multilabel":
            return np.column_stack([p[:, 1] for p in probas]) if probas else np.zeros((0, 0))
        return probas

    async def apredict_proba(self, X: Any) -> np.ndarray | list[np.ndarray]:
        """``predict_proba`` for callers already inside an event loop; it does
        not block that loop while the engine works."""
        if self._is_joint():
            return [np.exp(lp) for lp in self._normalised(await self._ajoint_read(X))]
        outputs = self._outputs()
        if outputs is None:
            return np.exp(self._log_proba(await self._aread(X))[0])
        return self._combine([await e.apredict_proba(X) for e in outputs])

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each text. Several outputs: shape
        (n, n_outputs). Multi-label: the 0/1 indicator of P >= ``threshold``."""
        if self._is_joint():
            log_probas = self.predict_log_proba(X)
            return np.column_stack([c[np.argmax(lp, axis=1)] for c, lp in zip(self.classes_, log_probas, strict=True)])
        outputs = self._outputs()
        if outputs is None:
            log_proba = self.predict_log_proba(X)
            return self.classes_[np.argmax(log_proba, axis=1)]
        if self.output_kind_ == "multilabel":
            return (self.predict_proba(X) >= self.threshold).astype(np.int64)
        return np.column_stack([e.predict(X) for e in outputs])

    def decision_function(self, X: Any) -> np.ndarray | list[np.ndarray]:
        """Binary: the log-odds of ``classes_[1]``, shape (n,). Otherwise the
        log-probabilities, shape (n, n_classes). Multi-label: each label's
        log-odds, (n, n_labels); several outputs: a list, one per output."""
        if self._is_joint():
            return [lp[:, 1] - lp[:, 0] if lp.shape[1] == 2 else lp for lp in self.predict_log_proba(X)]
        outputs = self._outputs()
        if outputs is not None:
            scores = [e.decision_function(X) for e in outputs]
            return np.column_stack(scores) if self.output_kind_ == "multilabel" else scores
        log_proba = self.predict_log_proba(X)
        if len(self.classes_) == 2:
            return log_proba[:, 1] - log_proba[:, 0]
        return log_proba

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy; with several outputs or labels, the share of texts
        whose every output (label) is right, as scikit-learn's multi-output
        classifiers and ``accuracy_score`` on indicators count it."""
        outputs = self._outputs()
        if outputs is None and not self._is_joint():
            return super().score(X, y, sample_weight=sample_weight)
        pred = self.predict(X)
        target = as_target(y, pred.shape[0])
        truth = np.column_stack(target.columns)
        known = self.classes_.tolist() if self.output_kind_ == "multilabel" else []
        if target.names is not None and known and set(target.names) <= set(known):
            aligned = np.zeros((truth.shape[0], len(known)), dtype=truth.dtype)
            for j, name in enumerate(target.names):
                aligned[:, known.index(name)] = truth[:, j]
            truth = aligned
        if truth.shape != pred.shape:
            raise ValueError(f"y has shape {truth.shape} but the predictions have shape {pred.shape}")
        return float(np.average(np.all(truth == pred, axis=1), weights=sample_weight))

    def transform(self, X: Any) -> np.ndarray:
        """The label-logprob features: per class, log P(its label | prompt)
        over the full vocabulary (summed over aliases, not normalised over the
        classes), columns in ``classes_`` order; several outputs side by side.
        Feeds any scikit-learn model (stacking, ``FeatureUnion``). A joint read
        gives each output's option logprobs as vLLM returns them under the
        answer format (normalised over that output's options)."""
        if self._is_joint():
            return np.hstack(self._joint_read(X))
        outputs = self._outputs()
        if outputs is not None:
            return np.hstack([e.transform(X) for e in outputs])
        return self._class_logprobs(self._read(X).logprobs)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Names of ``transform``'s columns: ``logprob_<class>`` (with the
        output index when there are several)."""
        outputs = self._outputs()
        if outputs is None and not self._is_joint():
            return np.array([f"logprob_{c}" for c in self.classes_.tolist()], dtype=object)
        return np.array(
            [f"logprob_{j}_{c}" for j, classes in enumerate(self.classes_) for c in classes.tolist()], dtype=object
        )

    def diagnose(self, X: Any) -> pd.DataFrame:
        """One row per text: ``proba_<class>`` for each class, ``label_mass``
        (the full-vocabulary probability on all label tokens), ``top_token``
        (the model's own first choice, decoded), ``top_token_is_label`` and
        ``predicted``. For one output (``estimators_[j].diagnose`` for others)."""
        if self._is_joint():
            raise ValueError(
                f"diagnose reads one output; this estimator reads {self.n_outputs_} jointly, where the "
                "label mass is always 1: diagnose a multioutput_read='separate' fit (clf.estimators_[j])"
            )
        if self._outputs() is not None:
            raise ValueError(
                f"diagnose reads one output; this estimator has {self.n_outputs_}: "
                "call clf.estimators_[j].diagnose(X) for output j"
            )
        scores = self._read(X)
        log_proba, class_lp = self._log_proba(scores)
        proba = np.exp(log_proba)
        flat = [t for ids in self.label_token_ids_ for t in ids]
        engine = self._engine()
        frame = pd.DataFrame({f"proba_{c}": proba[:, k] for k, c in enumerate(self.classes_)})
        frame["label_mass"] = np.exp(logsumexp(class_lp, axis=1)) if len(frame) else []
        frame["top_token"] = [engine.tokenizer.decode([int(t)]) for t in scores.top_token]
        frame["top_token_is_label"] = np.isin(scores.top_token, flat)
        frame["predicted"] = self.classes_[np.argmax(proba, axis=1)] if len(frame) else []
        return frame

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = super().__sklearn_tags__()
        tags.input_tags.one_d_array = True
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        tags.non_deterministic = False
        tags.target_tags.multi_output = True
        return tags

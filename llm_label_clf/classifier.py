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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ._bridge import get_loop, run_sync
from ._inputs import as_records
from .engine import DEFAULT_MODEL, Engine, get_engine
from .exceptions import LowLabelMassWarning, TruncationWarning
from .label_tokens import in_context_verbalizer, label_token_ids
from .prompts import DEFAULT_PROMPT, LABELS_FIELD, PromptTemplate, join_labels, render_chat
from .scoring import LabelScores, read_label_logprobs

__all__ = ["LLMLabelClassifier"]


_LOW_MASS_POLICIES = ("ignore", "raise", "warn")
_TOO_LONG_POLICIES = ("raise", "truncate")
#: How many training rows are rendered to check that labels tokenize the same after each.
_LABEL_CHECK_ROWS = 4


def _progress_bar(total: int) -> Any:
    """A tqdm bar (notebook widget where available), imported only when shown."""
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="text")


class LLMLabelClassifier(ClassifierMixin, BaseEstimator):
    """Zero-shot text classifier over an LLM's next-token label logprobs.

    Parameters
    ----------
    model : str, default="smollm2-135m-instruct"
        A built-in model name, a local Hugging Face folder, or a hub id.
    engine_options : dict or None
        vLLM engine arguments (``dtype``, ``max_model_len``, ``tensor_parallel_size``,
        ``kv_cache_memory_bytes``, ...). Estimators with equal ``model`` and
        ``engine_options`` share one engine per process.
    labels : mapping or None
        None: the class names from ``y`` are what the model writes. Otherwise a
        mapping class -> label string, or class -> list of alias strings whose
        probabilities are summed into the class.
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

    Attributes
    ----------
    classes_ : ndarray
        Class labels; the column order of ``predict_proba``.
    verbalizers_ : list of list of str
        Per class, the strings read after the prompt (leading space included).
    label_token_ids_ : list of list of int
        Per class, the token id of each verbalizer in context.
    prompt_ : str
        The template in use.
    chat_ : bool
        Whether the chat template is used.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        engine_options: Mapping[str, Any] | None = None,
        labels: Mapping[Any, str | Sequence[str]] | None = None,
        prompt: str | None = None,
        instructions: str | None = None,
        chat: bool | str = False,
        random_state: int | np.random.RandomState | None = None,
        batch_size: int = 512,
        progress: bool = True,
        low_mass: str = "warn",
        low_mass_threshold: float = 1e-4,
        too_long: str = "truncate",
    ) -> None:
        self.model = model
        self.engine_options = engine_options
        self.labels = labels
        self.prompt = prompt
        self.instructions = instructions
        self.chat = chat
        self.random_state = random_state
        self.batch_size = batch_size
        self.progress = progress
        self.low_mass = low_mass
        self.low_mass_threshold = low_mass_threshold
        self.too_long = too_long

    # ------------------------------------------------------------------ fit

    def _check_params(self) -> PromptTemplate:
        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"{type(self).__name__}: {name}={getattr(self, name)!r} {why}")

        if not isinstance(self.model, str) or not self.model:
            raise bad("model", "must be a built-in model name, a local folder or a hub id (str)")
        if self.engine_options is not None and (
            not isinstance(self.engine_options, Mapping) or not all(isinstance(k, str) for k in self.engine_options)
        ):
            raise bad("engine_options", "must be None or a dict of vLLM engine arguments")
        if self.labels is not None:
            if not isinstance(self.labels, Mapping) or not self.labels:
                raise bad("labels", "must be None or a non-empty mapping class -> label or list of aliases")
            for cls, value in self.labels.items():
                aliases = [value] if isinstance(value, str) else value
                if not isinstance(aliases, Sequence) or not aliases or not all(
                    isinstance(a, str) and a.strip() for a in aliases
                ):
                    raise bad("labels", f"maps class {cls!r} to {value!r}; give a non-empty string or list of them")
        if self.prompt is not None and not isinstance(self.prompt, str):
            raise bad("prompt", "must be None or a template string with {text}")
        if self.instructions is not None and not isinstance(self.instructions, str):
            raise bad("instructions", "must be None or a string")
        if not (self.chat is True or self.chat is False or self.chat == "auto"):
            raise bad("chat", "must be True, False or 'auto'")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, numbers.Integral) or self.batch_size < 1:
            raise bad("batch_size", "must be a positive integer")
        if not isinstance(self.progress, bool):
            raise bad("progress", "must be True or False")
        if self.low_mass not in _LOW_MASS_POLICIES:
            raise bad("low_mass", f"must be one of {sorted(_LOW_MASS_POLICIES)}")
        if not isinstance(self.low_mass_threshold, numbers.Real) or not 0 <= self.low_mass_threshold < 1:
            raise bad("low_mass_threshold", "must be a number in [0, 1)")
        if self.too_long not in _TOO_LONG_POLICIES:
            raise bad("too_long", f"must be one of {sorted(_TOO_LONG_POLICIES)}")
        try:
            check_random_state(self.random_state)
        except ValueError:
            raise bad("random_state", "must be None, an int or a numpy RandomState") from None
        try:
            return PromptTemplate.parse(DEFAULT_PROMPT if self.prompt is None else self.prompt)
        except ValueError as exc:
            raise ValueError(f"{type(self).__name__}: {exc}") from None

    def _engine(self) -> Engine:
        return get_engine(self.model, self.engine_options)

    def fit(self, X: Any, y: Any) -> LLMLabelClassifier:
        """Checks the parameters, sets ``classes_`` and finds each class's label
        tokens after the rendered prompt. No weights are learned (zero-shot)."""
        template = self._check_params()
        records = as_records(X)
        y = column_or_1d(y, warn=True)
        if len(records) != len(y):
            raise ValueError(f"X has {len(records)} texts but y has {len(y)} labels")
        if len(records) == 0:
            raise ValueError("fit needs at least one labelled example; got an empty X")
        for i, value in enumerate(y):
            if value is None or (isinstance(value, float) and np.isnan(value)):
                raise ValueError(f"y item {i} is missing ({value!r}); every text needs a label")
        try:
            self.classes_ = np.unique(y)
        except TypeError:
            kinds = sorted({type(v).__name__ for v in y})
            raise ValueError(
                f"y mixes label types {kinds}; use one type for every label (e.g. all str)"
            ) from None
        class_labels = self._class_labels()
        engine = self._engine()
        self.chat_ = bool(engine.tokenizer.chat_template) if self.chat == "auto" else bool(self.chat)
        self.prompt_ = template.template
        self._check_fields(template, records[0])
        if not self.chat_ and not template.suffix.strip():
            raise ValueError(
                f"{type(self).__name__}: prompt={template.template!r} ends with a field; add an "
                "answer cue after it (e.g. '\\nAnswer:') so the label is read in a fixed context"
            )
        prompt_end = "" if self.chat_ else template.suffix
        self.verbalizers_ = [
            [in_context_verbalizer(a, prompt_end, chat=self.chat_) for a in aliases] for aliases in class_labels
        ]
        listed = self._listed_labels()
        samples = [self._render(template, r, engine, listed) for r in records[:_LABEL_CHECK_ROWS]]
        self.label_token_ids_ = label_token_ids(
            engine.tokenizer, samples, self.verbalizers_, self.classes_.tolist(), add_special_tokens=not self.chat_
        )
        return self

    def _class_labels(self) -> list[list[str]]:
        if self.labels is None:
            return [[str(c)] for c in self.classes_.tolist()]
        known = set(self.classes_.tolist())
        unknown = [c for c in self.labels if c not in known]
        if unknown:
            raise ValueError(
                f"{type(self).__name__}: labels has classes {unknown!r} that are not in y "
                f"(classes in y: {self.classes_.tolist()!r})"
            )
        missing = [c for c in self.classes_.tolist() if c not in self.labels]
        if missing:
            raise ValueError(f"{type(self).__name__}: labels has no label for classes {missing!r} of y")
        out = []
        for c in self.classes_.tolist():
            value = self.labels[c]
            out.append([value] if isinstance(value, str) else list(value))
        return out

    def _check_fields(self, template: PromptTemplate, record: Mapping[str, str]) -> None:
        missing = [f for f in template.fields if f != LABELS_FIELD and f not in record]
        if missing:
            raise ValueError(
                f"{type(self).__name__}: prompt field(s) {missing} have no input: X provides "
                f"{sorted(record)} (a list of texts fills {{text}}; a DataFrame fills its column names)"
            )

    # ------------------------------------------------------------ rendering

    def _listed_labels(self) -> str:
        """What ``{labels}`` renders to: each class's first label, listed."""
        return join_labels([aliases[0].strip() for aliases in self.verbalizers_])

    def _render(self, template: PromptTemplate, record: Mapping[str, str], engine: Engine, listed: str) -> str:
        body = template.render({LABELS_FIELD: listed, **record})
        if self.chat_:
            return render_chat(engine.tokenizer, body, self.instructions)
        return f"{self.instructions}\n{body}" if self.instructions else body

    def _prompt_token_ids(self, records: Sequence[Mapping[str, str]], engine: Engine) -> list[list[int]]:
        template = PromptTemplate.parse(self.prompt_)
        if records:
            self._check_fields(template, records[0])
        listed = self._listed_labels()
        texts = [self._render(template, r, engine, listed) for r in records]
        ids = engine.tokenizer(texts, add_special_tokens=not self.chat_)["input_ids"] if texts else []
        limit = engine.max_model_len - 1
        truncated = []
        for i, row in enumerate(ids):
            if len(row) <= limit:
                continue
            if self.too_long == "raise":
                raise ValueError(
                    f"X item {i} is {len(row)} tokens with the prompt; the model reads at most "
                    f"{limit}: shorten the text, raise engine_options['max_model_len'], or set "
                    "too_long='truncate'"
                )
            ids[i] = self._truncate(i, template, records[i], engine, listed, limit)
            truncated.append(i)
        if truncated:
            shown = truncated if len(truncated) <= 10 else [*truncated[:10], "..."]
            warnings.warn(
                f"{len(truncated)} text(s) were longer than the model reads ({limit} tokens with the "
                f"prompt) and were cut at the end: items {shown}. Set too_long='raise' to refuse them",
                TruncationWarning,
                stacklevel=4,
            )
        return ids

    def _truncate(
        self, i: int, template: PromptTemplate, record: Mapping[str, str], engine: Engine, listed: str, limit: int
    ) -> list[int]:
        """Cuts the end of the record's longest field until the rendered prompt fits
        ``limit`` tokens; the instructions and the answer cue are never cut."""
        tokenizer = engine.tokenizer
        fields = [f for f in template.fields if f in record]
        field = max(fields, key=lambda f: len(record[f]))
        value = record[field]
        for _ in range(8):  # re-tokenizing at the cut can add a token or two; converge
            row = tokenizer.encode(
                self._render(template, {**record, field: value}, engine, listed), add_special_tokens=not self.chat_
            )
            if len(row) <= limit:
                return row
            value_ids = tokenizer.encode(value, add_special_tokens=False)
            if not value_ids:
                break
            value = tokenizer.decode(value_ids[: max(0, len(value_ids) - (len(row) - limit) - 2)])
        raise ValueError(
            f"X item {i} cannot be truncated to fit: the prompt around field {{{field}}} is already "
            f"too long for the model's {limit} tokens; shorten the instructions or the other fields"
        )

    # ----------------------------------------------------------- prediction

    def _flat_label_ids(self) -> tuple[list[int], np.ndarray]:
        flat = [t for ids in self.label_token_ids_ for t in ids]
        owner = np.repeat(np.arange(len(self.label_token_ids_)), [len(ids) for ids in self.label_token_ids_])
        return flat, owner

    def _chunks(self, n: int) -> list[tuple[int, int]]:
        return [(start, min(start + self.batch_size, n)) for start in range(0, n, self.batch_size)]

    def _read(self, X: Any) -> LabelScores:
        check_is_fitted(self, ["classes_", "label_token_ids_"])
        records = as_records(X)
        engine = self._engine()
        prompts = self._prompt_token_ids(records, engine)
        flat, _ = self._flat_label_ids()
        parts: list[LabelScores] = []
        chunks = self._chunks(len(prompts))
        bar = _progress_bar(len(prompts)) if self.progress and len(chunks) > 1 else None
        try:
            for start, stop in chunks:
                parts.append(run_sync(read_label_logprobs(engine, prompts[start:stop], flat, offset=start)))
                if bar is not None:
                    bar.update(stop - start)
        finally:
            if bar is not None:
                bar.close()
        return self._concat(parts, len(flat))

    async def _aread(self, X: Any) -> LabelScores:
        check_is_fitted(self, ["classes_", "label_token_ids_"])
        records = as_records(X)
        loop = asyncio.get_running_loop()
        engine = await loop.run_in_executor(None, self._engine)
        prompts = self._prompt_token_ids(records, engine)
        flat, _ = self._flat_label_ids()
        parts = []
        for start, stop in self._chunks(len(prompts)):
            future = asyncio.run_coroutine_threadsafe(
                read_label_logprobs(engine, prompts[start:stop], flat, offset=start), get_loop()
            )
            parts.append(await asyncio.wrap_future(future))
        return self._concat(parts, len(flat))

    @staticmethod
    def _concat(parts: list[LabelScores], n_ids: int) -> LabelScores:
        if not parts:
            return LabelScores(np.zeros((0, n_ids)), np.zeros(0, dtype=np.int64))
        return LabelScores(
            np.concatenate([p.logprobs for p in parts]), np.concatenate([p.top_token for p in parts])
        )

    def _class_logprobs(self, scores: LabelScores) -> np.ndarray:
        """Per class, the log of the summed probability of its aliases (unnormalised)."""
        _, owner = self._flat_label_ids()
        n_classes = len(self.classes_)
        out = np.empty((scores.logprobs.shape[0], n_classes))
        for k in range(n_classes):
            out[:, k] = logsumexp(scores.logprobs[:, owner == k], axis=1)
        return out

    def _log_proba(self, class_lp: np.ndarray) -> np.ndarray:
        """Normalises per-class logprobs over the classes, after the low-mass check."""
        self._check_mass(class_lp)
        if class_lp.shape[0] == 0:
            return class_lp
        return class_lp - logsumexp(class_lp, axis=1, keepdims=True)

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

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """Log-probabilities, columns in ``classes_`` order."""
        return self._log_proba(self._class_logprobs(self._read(X)))

    def predict_proba(self, X: Any) -> np.ndarray:
        """Probabilities (rows sum to 1), columns in ``classes_`` order."""
        return np.exp(self.predict_log_proba(X))

    async def apredict_proba(self, X: Any) -> np.ndarray:
        """``predict_proba`` for callers already inside an event loop; it does
        not block that loop while the engine works."""
        return np.exp(self._log_proba(self._class_logprobs(await self._aread(X))))

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each text."""
        log_proba = self.predict_log_proba(X)
        return self.classes_[np.argmax(log_proba, axis=1)]

    def decision_function(self, X: Any) -> np.ndarray:
        """Binary: the log-odds of ``classes_[1]``, shape (n,). Otherwise the
        log-probabilities, shape (n, n_classes)."""
        log_proba = self.predict_log_proba(X)
        if len(self.classes_) == 2:
            return log_proba[:, 1] - log_proba[:, 0]
        return log_proba

    def diagnose(self, X: Any) -> pd.DataFrame:
        """One row per text: ``proba_<class>`` for each class, ``label_mass``
        (the full-vocabulary probability on all label tokens), ``top_token``
        (the model's own first choice, decoded), ``top_token_is_label`` and
        ``predicted``."""
        scores = self._read(X)
        class_lp = self._class_logprobs(scores)
        proba = np.exp(self._log_proba(class_lp))
        flat, _ = self._flat_label_ids()
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
        return tags

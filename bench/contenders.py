"""The contenders of ``bench/run.py``, one class each: raw ``vllm.LLM.generate``
label reads (the floor), ``LLMLabelClassifier.predict_proba``, skorch's
``ZeroShotClassifier`` and a hand-written transformers batched forward.
Tasks: ``sst2``, ``agnews`` and ``length:N`` (texts of N tokens, throughput
only). Generate-and-parse as scikit-llm does it (``genparse`` in
``summary.json``) left in issue 53; commit 75ea201 holds it."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from scipy.special import softmax

from bench.common import (
    DEMO_INSTRUCTIONS,
    DEMO_PROMPT,
    FULL,
    MODEL,
    SST2_LABELS,
    SST2_PROMPT,
    Sizes,
    Task,
    agnews,
    label_paths,
    label_trie,
    length_texts,
    path_logprobs,
    render,
    scores,
    skorch_sst2,
    sst2,
    timed_passes,
    warmup_texts,
)

#: transformers contenders load the model in its stored dtype, the one vLLM uses.
HF_DTYPE = "bfloat16"
HF_BATCH = 32


def _model_path() -> str:
    from llm_label_clf.models.builtin import resolve_model

    return resolve_model(MODEL)


class Contender:
    """``start`` loads the model (timed); ``run_pass`` warms a task up once on
    other texts, empties any cache, then times one pass over its texts."""

    name = ""

    def __init__(self, size: Sizes) -> None:
        self.size = size
        self._tasks: dict[str, Task] = {}
        self._warm: set[str] = set()

    def _start(self) -> None:
        raise NotImplementedError

    def tokenizer(self) -> Any:
        raise NotImplementedError

    def predict(self, task: Task, texts: Sequence[str]) -> dict[str, Any]:
        """``proba`` (columns in ``task.classes`` order) and/or ``pred``, plus extras."""
        raise NotImplementedError

    def reset(self, task: Task) -> None:
        """Empties caches that would let a repeated pass skip work."""

    def dataset(self, name: str) -> Task:
        return {"sst2": sst2, "agnews": agnews}[name](self.size)

    def start(self) -> dict[str, Any]:
        began = time.perf_counter()
        self._start()
        return {"name": self.name, "startup_s": time.perf_counter() - began}

    def task(self, name: str) -> Task:
        if name not in self._tasks:
            if name.startswith("length:"):
                target = int(name.split(":")[1])
                texts = length_texts(self.tokenizer(), target, self.size.length_texts[target])
                y = np.array(["positive"] * len(texts))  # unused: throughput only
                self._tasks[name] = Task(name, texts, y, SST2_PROMPT, SST2_LABELS)
            else:
                self._tasks[name] = self.dataset(name)
        return self._tasks[name]

    def run_pass(self, name: str) -> dict[str, Any]:
        task = self.task(name)
        if name not in self._warm:
            self.predict(task, warmup_texts(self.size))
            self._warm.add(name)
        self.reset(task)
        load_start, began = os.getloadavg()[0], time.perf_counter()
        out = self.predict(task, task.texts)
        seconds = time.perf_counter() - began
        meta = {"task": name, "seconds": seconds, "load_avg_1m_start": load_start,
                "load_avg_1m_end": os.getloadavg()[0]}
        if name.startswith("length:"):
            tok = self.tokenizer()
            prompt_tokens = float(np.mean([len(tok.encode(render(task, t))) for t in task.texts]))
            return {**meta, "texts": len(task.texts), "texts_per_s": len(task.texts) / seconds,
                    "prompt_tokens": prompt_tokens}
        return {**meta, **scores(task, durations=[seconds], **out)}


def start_llm() -> Any:
    """``vllm.LLM`` on the built-in model with the estimator's engine options and environment."""
    from vllm import LLM

    from llm_label_clf.engines.local import cpu_defaults, prepare_environment

    prepare_environment()
    return LLM(model=_model_path(), disable_log_stats=True, **cpu_defaults())


def label_reads(tok: Any, task: Task, constrained: bool = False) -> tuple[list[list[int]], dict[Any, list[int]]]:
    """Each class's label tokens and the trie of prefixes to read (``constrained``: where labels branch)."""
    paths = label_paths(tok, task)
    trie = label_trie(paths)
    if constrained:
        trie = {prefix: ids for prefix, ids in trie.items() if not prefix or len(ids) > 1}
    return paths, trie


def raw_reads(llm: Any, task: Task, texts: Sequence[str], constrained: bool = False) -> np.ndarray:
    """Each class's logprob per text: one ``logprob_token_ids`` read per trie
    node, one ``LLM.generate`` call per trie level, shallow first (deeper reads
    find the prompt cached); ``constrained``: renormalised where labels branch."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    tok = llm.get_tokenizer()
    paths, trie = label_reads(tok, task, constrained)
    params = {prefix: SamplingParams(max_tokens=1, temperature=0, logprob_token_ids=ids, detokenize=False)
              for prefix, ids in trie.items()}
    prompts = [tok.encode(render(task, t)) for t in texts]
    reads: list[dict[tuple[int, ...], dict[int, float]]] = [{} for _ in prompts]
    for depth in sorted({len(prefix) for prefix in trie}):
        keys = [(i, prefix) for i in range(len(prompts)) for prefix in trie if len(prefix) == depth]
        inputs = [TokensPrompt(prompt_token_ids=prompts[i] + list(prefix)) for i, prefix in keys]
        outs = llm.generate(inputs, [params[prefix] for _, prefix in keys], use_tqdm=False)
        for (i, prefix), out in zip(keys, outs, strict=True):
            first = out.outputs[0].logprobs[0]
            logprobs = np.array([first[t].logprob for t in trie[prefix]])
            if constrained:
                logprobs = logprobs - np.logaddexp.reduce(logprobs)
            reads[i][prefix] = dict(zip(trie[prefix], logprobs, strict=True))
    return np.array([path_logprobs(r, paths) for r in reads])


class RawVllm(Contender):
    """The floor: label reads straight from ``vllm.LLM.generate``."""

    name = "raw vllm.LLM.generate (logprob_token_ids)"
    constrained = False

    def _start(self) -> None:
        self.llm = start_llm()

    def tokenizer(self) -> Any:
        return self.llm.get_tokenizer()

    def predict(self, task: Task, texts: Sequence[str]) -> dict[str, Any]:
        reads = len(label_reads(self.tokenizer(), task, self.constrained)[1])
        return {"proba": softmax(raw_reads(self.llm, task, texts, self.constrained), axis=1), "reads_per_text": reads}

    def reset(self, task: Task) -> None:
        self.llm.reset_prefix_cache()


class RawConstrained(RawVllm):
    """Raw reads only where the labels branch: the constrained reading's speed anchor."""

    name = "raw vllm.LLM.generate, constrained prefixes"
    constrained = True


def make_estimator(task: Task, **params: Any) -> Any:
    """``LLMLabelClassifier`` for ``task``'s prompt and labels."""
    from llm_label_clf import LLMLabelClassifier

    return LLMLabelClassifier(prompt=task.prompt, labels=task.labels, progress=False, low_mass="ignore", **params)


def empty_prefix_cache(engine_options: dict[str, Any] | None = None) -> None:
    """Empties the prefix cache of the estimator's shared engine (a bench-only reach inside)."""
    from llm_label_clf.engines.local import get_engine
    from llm_label_clf.engines.loop import run_sync

    run_sync(get_engine(MODEL, engine_options).client.reset_prefix_cache())


def one_read_s(n_sst2: int, engine_options: dict[str, Any] | None = None) -> float:
    """The many-label benches' yardstick: seconds per SST-2 dev text (``n_sst2``
    of them) read once with the demo's prompt, from an empty prefix cache."""
    from llm_label_clf import LLMLabelClassifier

    sst = sst2(replace(FULL, sst2=n_sst2 + 16))
    yard = LLMLabelClassifier(prompt=DEMO_PROMPT, instructions=DEMO_INSTRUCTIONS, progress=False,
                              engine_options=engine_options)
    yard.fit(sst.texts[:16], sst.y[:16])
    yard.predict_proba(sst.texts[:16])  # warm-up
    _, (seconds,) = timed_passes(lambda: yard.predict_proba(sst.texts[16:]), 1,
                                 lambda: empty_prefix_cache(engine_options))
    return seconds / n_sst2


def tagged_pass(clf: Any, texts: Sequence[str], y: Any, tag: Any, cold: bool = False) -> tuple[float, float]:
    """Texts/s and accuracy of one ``predict_proba`` over ``texts`` prefixed by
    ``(tag)`` (no other pass's prompts cached; ``cold``: the cache emptied too)."""
    if cold:
        empty_prefix_cache(clf.engine_options)
    began = time.perf_counter()
    proba = clf.predict_proba([f"({tag}) {t}" for t in texts])
    seconds = time.perf_counter() - began
    return len(texts) / seconds, float((clf.classes_[proba.argmax(axis=1)] == y).mean())


class Estimator(Contender):
    """``LLMLabelClassifier.predict_proba``; start-up is the first ``fit``."""

    name = "LLMLabelClassifier.predict_proba"

    def _start(self) -> None:
        self._fitted: dict[str, Any] = {}
        self._fit(self.task("sst2"))

    def _fit(self, task: Task) -> Any:
        key = "sst2" if task.name.startswith("length:") else task.name
        if key not in self._fitted:
            source = self.task(key)
            self._fitted[key] = make_estimator(source).fit(source.texts, source.y)
        return self._fitted[key]

    def tokenizer(self) -> Any:
        from llm_label_clf.engines.local import get_engine

        return get_engine(MODEL, None).tokenizer

    def predict(self, task: Task, texts: Sequence[str]) -> dict[str, Any]:
        fitted = self._fit(task)
        return {"proba": fitted.predict_proba(texts), "label_mode": getattr(fitted, "label_mode_", None)}

    def reset(self, task: Task) -> None:
        empty_prefix_cache()


class _Transformers(Contender):
    """The model loaded with transformers in ``HF_DTYPE``."""

    def _start(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = AutoModelForCausalLM.from_pretrained(_model_path(), dtype=getattr(torch, HF_DTYPE)).eval()
        self.tok = AutoTokenizer.from_pretrained(_model_path())

    def start(self) -> dict[str, Any]:
        import torch

        return {**super().start(), "torch_threads": torch.get_num_threads()}

    def tokenizer(self) -> Any:
        return self.tok


class Skorch(_Transformers):
    """skorch's ``ZeroShotClassifier`` on a subset; ``y`` holds the labels with
    their leading space, so that skorch (which tokenizes each label alone) reads
    the same tokens as the others."""

    name = f"skorch ZeroShotClassifier (transformers {HF_DTYPE})"

    def _start(self) -> None:
        super()._start()
        self._fitted: dict[str, Any] = {}

    def dataset(self, name: str) -> Task:
        if name == "sst2":
            return skorch_sst2(self.size)
        return agnews(self.size, self.size.skorch_agnews_per_class)

    def _fit(self, task: Task) -> Any:
        from skorch.llm import ZeroShotClassifier

        if task.name not in self._fitted:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "prompt has no {labels}"
                fitted = ZeroShotClassifier(model=self.model, tokenizer=self.tok, prompt=task.prompt)
                fitted.fit(None, [" " + task.labels[c] for c in task.y])
            assert [c.strip() for c in fitted.classes_] == [task.labels[c] for c in task.classes]
            self._fitted[task.name] = fitted
        return self._fitted[task.name]

    def predict(self, task: Task, texts: Sequence[str]) -> dict[str, Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # generation-config notes
            return {"proba": self._fit(task).predict_proba(list(texts))}

    def reset(self, task: Task) -> None:
        self._fit(task).clear_model_cache()


def hf_reads(model: Any, tok: Any, task: Task, texts: Sequence[str]) -> np.ndarray:
    """Each class's logprob from batched forward passes (left padding, sorted by
    length); a multi-token label adds a sequence per text (the prompt and the
    label but its last token), reading all its tokens in one pass."""
    import torch

    paths = label_paths(tok, task)
    prompts = [tok.encode(render(task, t)) for t in texts]
    longer = [k for k, p in enumerate(paths) if len(p) > 1]
    # (text, class whose continuation is appended or -1) per sequence
    jobs = [(i, k) for i in range(len(prompts)) for k in (longer or [-1])]
    seqs = [prompts[i] + (paths[k][:-1] if k >= 0 else []) for i, k in jobs]
    keep = max(len(p) for p in paths)
    pad = tok.pad_token_id
    tails: list[np.ndarray] = [np.empty(0)] * len(seqs)  # per sequence: logprobs of its last `keep` positions
    order = sorted(range(len(seqs)), key=lambda s: len(seqs[s]))
    with torch.inference_mode():
        for b in range(0, len(order), HF_BATCH):
            batch = order[b : b + HF_BATCH]
            width = max(len(seqs[s]) for s in batch)
            ids = torch.tensor([[pad] * (width - len(seqs[s])) + seqs[s] for s in batch])
            mask = torch.tensor([[0] * (width - len(seqs[s])) + [1] * len(seqs[s]) for s in batch])
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
            logprobs = torch.log_softmax(logits.float(), dim=-1).numpy()
            for row, s in enumerate(batch):
                tails[s] = logprobs[row]
    out = np.empty((len(prompts), len(paths)))
    for (i, k), tail in zip(jobs, tails, strict=True):
        if k < 0 or k == longer[0]:
            # the prompt's last position: -1, or before the appended label tokens
            first = tail[-1 - (len(paths[k]) - 1 if k >= 0 else 0)]
            for c, path in enumerate(paths):
                if len(path) == 1:
                    out[i, c] = first[path[0]]
        if k >= 0:
            path = paths[k]
            out[i, k] = sum(tail[len(tail) - len(path) + j][t] for j, t in enumerate(path))
    return out


class HfForward(_Transformers):
    """A hand-written transformers batched forward pass over the same prompts."""

    name = f"transformers batched forward ({HF_DTYPE}, batch {HF_BATCH})"

    def predict(self, task: Task, texts: Sequence[str]) -> dict[str, Any]:
        return {"proba": softmax(hf_reads(self.model, self.tok, task, texts), axis=1)}


CONTENDERS: dict[str, type[Contender]] = {
    "raw": RawVllm,
    "clf": Estimator,
    "skorch": Skorch,
    "hf": HfForward,
}

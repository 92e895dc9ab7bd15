"""Side-by-side benchmark: ``LLMLabelClassifier.predict_proba`` against raw
``vllm.LLM.generate`` with ``logprob_token_ids`` over the same prompts, same
model and engine options, on SST-2 dev. Each contender runs in its own process
(so peak memory is its own), alternating for ``--rounds`` rounds; the summary
reports medians and the ratio. Writes ``bench/results/summary.json`` and
``bench/results/summary.md``.

Run: ``make bench`` (or ``python bench/run.py --rounds 2``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

PROMPT = "Review: {text}\nSentiment (positive or negative):"
RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"


def datasets_dir() -> Path:
    return Path(os.environ.get("LLM_LABEL_CLF_DATASETS") or DEFAULT_DATASETS)


class PeakRSS:
    """Samples the resident memory of this process and its children (vLLM's
    engine core runs in a child) and keeps the peak."""

    def __init__(self, every_s: float = 0.2) -> None:
        import psutil

        self._proc = psutil.Process()
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)

    def _run(self, every_s: float) -> None:
        while not self._stop.is_set():
            try:
                total = self._proc.memory_info().rss + sum(
                    c.memory_info().rss for c in self._proc.children(recursive=True)
                )
            except Exception:  # a child exiting between listing and reading
                continue
            self.peak = max(self.peak, total)
            self._stop.wait(every_s)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def load_sst2():
    import pandas as pd

    frame = pd.read_csv(datasets_dir() / "sst2_dev.csv")
    warmup = pd.read_csv(datasets_dir() / "agnews_test.csv")["text"].iloc[:16].tolist()
    return frame["text"].tolist(), frame["label"].to_numpy(), warmup


def worker_raw() -> dict:
    """The floor: one ``LLM.generate`` call over all prompts, read the same way."""
    import numpy as np
    from scipy.special import softmax
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from llm_label_clf.builtin_model import resolve_model
    from llm_label_clf.engine import _prepare_environment, cpu_defaults

    texts, y, warmup = load_sst2()
    with PeakRSS() as rss:
        _prepare_environment()
        start = time.perf_counter()
        llm = LLM(model=resolve_model("smollm2-135m-instruct"), disable_log_stats=True, **cpu_defaults())
        startup = time.perf_counter() - start
        tok = llm.get_tokenizer()
        prompt0 = PROMPT.format(text=texts[0])
        base = tok.encode(prompt0)
        ids = [tok.encode(prompt0 + label)[len(base)] for label in (" negative", " positive")]
        params = SamplingParams(max_tokens=1, temperature=0, logprobs=2, logprob_token_ids=ids, detokenize=False)

        def run(batch):
            prompts = [TokensPrompt(prompt_token_ids=tok.encode(PROMPT.format(text=t))) for t in batch]
            outs = llm.generate(prompts, params, use_tqdm=False)
            return np.array([[o.outputs[0].logprobs[0][i].logprob for i in ids] for o in outs])

        run(warmup)
        timings = []
        for _ in range(2):
            start = time.perf_counter()
            logprobs = run(texts)
            timings.append(time.perf_counter() - start)
    proba = softmax(logprobs, axis=1)
    return _result("raw vllm.LLM.generate", texts, y, proba, np.array(["negative", "positive"]), timings, startup, rss.peak)


def worker_clf() -> dict:
    """``LLMLabelClassifier.predict_proba`` on the same prompts."""
    from llm_label_clf import LLMLabelClassifier

    texts, y, warmup = load_sst2()
    with PeakRSS() as rss:
        start = time.perf_counter()
        clf = LLMLabelClassifier(prompt=PROMPT, progress=False, low_mass="ignore").fit(texts, y)
        startup = time.perf_counter() - start
        clf.predict_proba(warmup)
        timings = []
        for _ in range(2):
            start = time.perf_counter()
            proba = clf.predict_proba(texts)
            timings.append(time.perf_counter() - start)
    return _result("LLMLabelClassifier.predict_proba", texts, y, proba, clf.classes_, timings, startup, rss.peak)


def _result(name, texts, y, proba, classes, timings, startup, peak) -> dict:
    from sklearn.metrics import accuracy_score, log_loss

    pred = classes[proba.argmax(axis=1)]
    return {
        "name": name,
        "texts": len(texts),
        "cold_texts_per_s": len(texts) / timings[0],
        "warm_texts_per_s": len(texts) / timings[1],
        "accuracy": float(accuracy_score(y, pred)),
        "log_loss": float(log_loss(y, proba, labels=classes)),
        "startup_s": startup,
        "peak_rss_gib": peak / 2**30,
    }


WORKERS = {"raw": worker_raw, "clf": worker_clf}


def run_worker(name: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", name], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", choices=sorted(WORKERS))
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker]()), flush=True)
        return
    runs: dict[str, list[dict]] = {"raw": [], "clf": []}
    for round_number in range(args.rounds):
        for name in ("raw", "clf"):
            result = run_worker(name)
            runs[name].append(result)
            print(f"round {round_number}: {result}", flush=True)
    summary = {
        name: {key: (statistics.median(r[key] for r in rs) if isinstance(rs[0][key], float) else rs[0][key])
               for key in rs[0]}
        for name, rs in runs.items()
    }
    ratio = summary["clf"]["cold_texts_per_s"] / summary["raw"]["cold_texts_per_s"]
    warm_ratio = summary["clf"]["warm_texts_per_s"] / summary["raw"]["warm_texts_per_s"]
    document = {
        "ratio_vs_raw_vllm": ratio,
        "ratio_vs_raw_vllm_warm_cache": warm_ratio,
        "rounds": args.rounds,
        "dataset": "sst2_dev.csv (872 texts)",
        "prompt": PROMPT,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "contenders": summary,
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "summary.json").write_text(json.dumps(document, indent=2))
    lines = [
        f"SST-2 dev, {summary['clf']['texts']} texts, built-in model, {os.cpu_count()} CPUs, "
        f"median of {args.rounds} rounds, each contender in its own process.",
        "",
        "| contender | texts/s (cold) | texts/s (warm cache) | accuracy | log-loss | start-up s | peak RSS GiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in summary.values():
        lines.append(
            f"| {r['name']} | {r['cold_texts_per_s']:.1f} | {r['warm_texts_per_s']:.1f} | {r['accuracy']:.3f} "
            f"| {r['log_loss']:.3f} | {r['startup_s']:.1f} | {r['peak_rss_gib']:.2f} |"
        )
    lines += ["", f"predict_proba / raw engine: **{ratio:.2f}x** cold, {warm_ratio:.2f}x warm."]
    (RESULTS / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

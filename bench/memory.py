"""Memory over long runs: ``predict_proba`` on 1k, 10k (and, with
``--sizes 1000 10000 100000``, 100k) texts in one process, reporting the
peak resident memory of the process tree (the engine runs in a child) after
each size. Texts stream through the engine in ``batch_size`` chunks, so the
peak should stay flat as the input grows. Texts are SST-2 dev sentences,
repeated with a pass number so that every prompt is distinct.

Run: ``python bench/memory.py [--sizes 1000 10000]``. Writes
``bench/results/memory.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def tree_rss(root: Any = None) -> int:
    """Resident bytes of ``root`` (a ``psutil.Process``; default this process)
    and all its descendants, now; 0 once ``root`` has exited."""
    import psutil

    root = root or psutil.Process()
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:  # a child exiting between listing and reading
            continue
    return total


def main() -> None:
    import threading

    import pandas as pd

    from llm_label_clf import LLMLabelClassifier
    from llm_label_clf.testing import datasets_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    args = parser.parse_args()
    frame = pd.read_csv(datasets_dir() / "sst2_dev.csv")
    texts, labels = frame["text"].tolist(), frame["label"].to_numpy()
    clf = LLMLabelClassifier(prompt="Review: {text}\nSentiment:", progress=False).fit(texts, labels)
    clf.predict_proba(texts[:32])
    peak = {"value": tree_rss()}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            peak["value"] = max(peak["value"], tree_rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rows = []
    for n in args.sizes:
        # every prompt distinct (a pass number after the first pass over SST-2
        # dev), so the prefix cache cannot serve repeated texts whole
        X = [texts[i] if i < len(texts) else f"{texts[i % len(texts)]} ({i // len(texts)})" for i in range(n)]
        start = time.perf_counter()
        proba = clf.predict_proba(X)
        seconds = time.perf_counter() - start
        assert proba.shape == (n, 2)
        rows.append(
            {
                "n": n,
                "seconds": seconds,
                "texts_per_s": n / seconds,
                "peak_rss_gib": peak["value"] / 2**30,
                "load_avg": os.getloadavg()[0],
            }
        )
        print(rows[-1], flush=True)
    stop.set()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "memory.json").write_text(json.dumps({"batch_size": clf.batch_size, "rows": rows}, indent=2) + "\n")
    lines = ["| texts | seconds | texts/s | peak RSS, process tree (GiB) |", "|---:|---:|---:|---:|"]
    lines += [f"| {r['n']:,} | {r['seconds']:.0f} | {r['texts_per_s']:.1f} | {r['peak_rss_gib']:.2f} |" for r in rows]
    (RESULTS / "memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

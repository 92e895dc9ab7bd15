"""Memory over long runs: ``predict_proba`` on 1k, 10k (or ``--sizes``) SST-2
dev texts in one process (every prompt distinct), the process tree's peak RSS
after each size: texts stream through the engine in ``batch_size`` chunks, so
it should stay flat as the input grows.

Run: ``python bench/memory.py [--sizes 1000 10000]``; writes
``bench/results/memory.json`` and ``.md``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import results  # noqa: E402
from bench.common import PeakRSS, csv  # noqa: E402


def markdown(doc: dict[str, Any]) -> str:
    lines = ["| texts | seconds | texts/s | peak RSS, process tree (GiB) |", "|---:|---:|---:|---:|"]
    lines += [f"| {r['n']:,} | {r['seconds']:.0f} | {r['texts_per_s']:.1f} | {r['peak_rss_gib']:.2f} |"
              for r in doc["rows"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = results.parser(__doc__)
    args = results.arguments(parser, markdown, "memory", sizes=[1000, 10000])
    from llm_label_clf import LLMLabelClassifier

    frame = csv("sst2_dev.csv")
    texts, labels = frame["text"].tolist(), frame["label"].to_numpy()
    doc = results.record(rows=[])
    clf = LLMLabelClassifier(prompt="Review: {text}\nSentiment:", progress=False).fit(texts, labels)
    clf.predict_proba(texts[:32])
    doc["batch_size"] = clf.batch_size
    with PeakRSS() as rss:
        for n in args.sizes:
            # every prompt distinct (a pass number after the first pass over SST-2
            # dev), so the prefix cache cannot serve repeated texts whole
            X = [texts[i] if i < len(texts) else f"{texts[i % len(texts)]} ({i // len(texts)})" for i in range(n)]
            start = time.perf_counter()
            proba = clf.predict_proba(X)
            seconds = time.perf_counter() - start
            assert proba.shape == (n, 2)
            doc["rows"].append({"n": n, "seconds": seconds, "texts_per_s": n / seconds,
                                "peak_rss_gib": rss.gib, "load_avg": os.getloadavg()[0]})
            print(doc["rows"][-1], flush=True)
    print(results.write("memory", doc, markdown))


if __name__ == "__main__":
    main()

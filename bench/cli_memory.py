"""Does ``llm-label-clf classify`` stay flat in memory as the input grows?
Each in a fresh process, peak RSS sampled every 0.1 s:

1. the command's own path (survey pass, chunked reader, per-chunk
   ``predict_proba``, writer, progress file) on 10,000 and 1,000,000 rows,
   with the fitted classifier replaced by a stub returning fixed
   probabilities (the engine's memory does not depend on the rows:
   ``bench/memory.py``; a million rows through it would take hours);
2. the real command with its engine on the first 10,000 rows: its own
   process and its process tree (the engine's processes included).

Input: SST-2 dev texts cycled, each prefixed with its row number, CSV.

Run: ``python bench/cli_memory.py [--sizes 10000 1000000] [--engine-rows 10000]``
(``--engine-rows 0`` skips 2); writes ``bench/results/cli_memory.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import results  # noqa: E402
from bench.common import csv, run_child  # noqa: E402

PROMPT = "Review: {text}\nSentiment:"
LABELS = "negative,positive"


def make_input(path: Path, rows: int) -> None:
    """``rows`` rows of distinct short texts, written a block at a time."""
    import pandas as pd

    texts = csv("sst2_dev.csv")["text"].tolist()
    with open(path, "w", encoding="utf-8", newline="") as out:
        for start in range(0, rows, 100_000):
            ids = range(start, min(rows, start + 100_000))
            block = pd.DataFrame({"id": ids, "text": [f"{i}. {texts[i % len(texts)]}" for i in ids]})
            block.to_csv(out, index=False, header=start == 0)


def stub_child(source: str, target: str) -> None:
    """Measurement 1, in this process: the command with a stub classifier."""
    import numpy as np

    import llm_label_clf.cli.stream as stream
    from llm_label_clf import cli

    class Stub:
        def __init__(self, labels: list[str]) -> None:
            self.classes_ = np.array(sorted(labels), dtype=object)

        def predict_proba(self, X: Any) -> Any:
            return np.tile([0.25, 0.75], (len(X), 1))

    stream._fitted = lambda job: Stub(job.labels)  # the one thing replaced: no engine
    code = cli.main(["classify", source, "--labels", LABELS, "--prompt", PROMPT, "--no-progress", "-o", target])
    sys.exit(code)


def measured(command: list[str]) -> dict[str, Any]:
    """Runs ``command``; its seconds and the peak RSS of its process and of its tree."""
    ran = run_child(command, every_s=0.1, message=False)
    return {"seconds": ran.seconds, "peak_rss_gib": ran.memory.root_peak / 2**30,
            "peak_tree_rss_gib": ran.memory.peak / 2**30}


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--child", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    args = results.arguments(parser, markdown, "cli_memory", sizes=[10_000, 1_000_000], engine_rows=10_000)
    if args.child:
        stub_child(*args.child)
        return
    doc = results.record(stub=[], engine=None)
    with tempfile.TemporaryDirectory() as folder:
        for rows in args.sizes:
            source, target = Path(folder) / f"in_{rows}.csv", Path(folder) / f"out_{rows}.csv"
            make_input(source, rows)
            doc["stub"].append({"rows": rows, **measured([sys.executable, __file__, "--child", str(source),
                                                          str(target)])})
            print(doc["stub"][-1], flush=True)
        if args.engine_rows:
            source, target = Path(folder) / "in_engine.csv", Path(folder) / "out_engine.csv"
            make_input(source, args.engine_rows)
            command = [sys.executable, "-m", "llm_label_clf", "classify", str(source), "--labels", LABELS,
                       "--prompt", PROMPT, "--no-progress", "-o", str(target)]
            doc["engine"] = {"rows": args.engine_rows, **measured(command)}
            print(doc["engine"], flush=True)
    print(results.write("cli_memory", doc, markdown))


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        f"Measured {doc['date']} on {m['cpu_model']} ({m['cores_usable']} cores usable, "
        f"capability {m['cpu_capability']}), dtype {doc['dtype']}, load average "
        f"{doc['load_avg_start']:.1f} at the start and {doc['load_avg_end']:.1f} at the end.",
        "",
        "| run | rows | seconds | peak RSS, command's process (GiB) | peak RSS, process tree (GiB) |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in doc["stub"]:
        lines.append(f"| stub classifier | {r['rows']:,} | {r['seconds']:.0f} | {r['peak_rss_gib']:.3f} | "
                     f"{r['peak_tree_rss_gib']:.3f} |")
    if doc["engine"]:
        r = doc["engine"]
        lines.append(f"| engine (vLLM) | {r['rows']:,} | {r['seconds']:.0f} | {r['peak_rss_gib']:.3f} | "
                     f"{r['peak_tree_rss_gib']:.3f} |")
    else:
        lines += ["", "The engine run (measurement 2) was not made this time (`--engine-rows 0`)."]
    stub = doc["stub"]
    if len(stub) > 1:
        ratio = stub[-1]["peak_rss_gib"] / stub[0]["peak_rss_gib"]
        lines += ["", f"Peak RSS at {stub[-1]['rows']:,} rows / at {stub[0]['rows']:,} rows (stub): {ratio:.3f}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

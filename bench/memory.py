"""Does the command line's memory stay flat as the input grows? ``--cli``:
``llm-label-clf classify`` in fresh processes, sampled every 0.1 s: the
command's own path (survey pass, chunked reader, per-chunk ``predict_proba``,
writer, progress file) on 10,000 and 1,000,000 rows (``--rows``), the fitted
classifier replaced by a stub returning fixed probabilities (the engine's
memory does not depend on the rows, and a million rows through it would take
hours); then the real command with its engine on the first ``--engine-rows``
rows (0 skips it), its own process and its process tree. Input: SST-2 dev
texts cycled, each prefixed with its row number, CSV.

Run: ``python bench/memory.py --cli [--rows 10000 1000000] [--engine-rows 10000]``
writes ``bench/results/cli_memory.json`` and ``.md``. ``python bench/memory.py
--render`` rewrites ``memory.md``, the estimator's own run (``predict_proba`` on
1,000 to 100,000 texts in one process); that run left in issue 53 (the command
line's run above covers the streaming path with a full machine record), and
commit 75ea201 holds it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

PROMPT = "Review: {text}\nSentiment:"
LABELS = "negative,positive"


def markdown(doc: dict[str, Any]) -> str:
    lines = ["| texts | seconds | texts/s | peak RSS, process tree (GiB) |", "|---:|---:|---:|---:|"]
    lines += [f"| {r['n']:,} | {r['seconds']:.0f} | {r['texts_per_s']:.1f} | {r['peak_rss_gib']:.2f} |"
              for r in doc["rows"]]
    return "\n".join(lines) + "\n"


def make_input(path: Path, rows: int) -> None:
    """``rows`` rows of distinct short texts, written a block at a time."""
    import pandas as pd

    texts = common.csv("sst2_dev.csv")["text"].tolist()
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
    ran = common.run_child(command, every_s=0.1, message=False)
    return {"seconds": ran.seconds, "peak_rss_gib": ran.memory.root_peak / 2**30,
            "peak_tree_rss_gib": ran.memory.peak / 2**30}


def cli_markdown(doc: dict[str, Any]) -> str:
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


def command_line(sizes: list[int], engine_rows: int) -> dict[str, Any]:
    """``--cli``: the stub runs over ``sizes`` rows, then the engine's over ``engine_rows``."""
    doc = common.record(stub=[], engine=None)
    with tempfile.TemporaryDirectory() as folder:
        for rows in sizes:
            source, target = Path(folder) / f"in_{rows}.csv", Path(folder) / f"out_{rows}.csv"
            make_input(source, rows)
            doc["stub"].append({"rows": rows, **measured([sys.executable, __file__, "--child", str(source),
                                                          str(target)])})
            print(doc["stub"][-1], flush=True)
        if engine_rows:
            source, target = Path(folder) / "in_engine.csv", Path(folder) / "out_engine.csv"
            make_input(source, engine_rows)
            command = [sys.executable, "-m", "llm_label_clf", "classify", str(source), "--labels", LABELS,
                       "--prompt", PROMPT, "--no-progress", "-o", str(target)]
            doc["engine"] = {"rows": engine_rows, **measured(command)}
            print(doc["engine"], flush=True)
    return doc


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--child", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    args = common.arguments(parser, lambda doc: (cli_markdown if "stub" in doc else markdown)(doc),
                            lambda a: "cli_memory" if a.cli else "memory", cli=False,
                            rows=[10_000, 1_000_000], engine_rows=10_000)
    if args.child:
        stub_child(*args.child)
    elif args.cli:
        print(common.write("cli_memory", command_line(args.rows, args.engine_rows), cli_markdown))
    else:
        sys.exit("memory.md: only --render is here; the estimator's run is at commit 75ea201 (run --cli)")


if __name__ == "__main__":
    main()

"""Side-by-side benchmark of ``LLMLabelClassifier`` against the raw engine and
the alternatives, with the built-in model on SST-2 dev and an AG News sample:

1. raw ``vllm.LLM.generate`` with ``logprob_token_ids`` (the floor);
2. ``LLMLabelClassifier.predict_proba``;
3. skorch's ``ZeroShotClassifier`` (transformers, bf16), on a subset;
4. a hand-written transformers batched forward pass;
5. generate-and-parse as scikit-llm does it (vLLM, a few greedy tokens).

Plus scenarios of the estimator (few-shot with the prefix cache on and off,
``cross_val_score``, text length, ``batch_size`` and threads). Each contender
runs in its own process (``--worker NAME``) so its peak memory is its own;
raw vLLM and the estimator run ``--rounds`` times, alternating, and the
summary shows medians. Writes ``bench/results/summary.json`` and
``summary.md`` and refreshes the README's performance section.

Run: ``make bench`` (or ``python bench/run.py``; ``--quick`` for a smoke run of
a few texts, written to ``bench/results/quick/`` and not to the README).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
#: Contenders repeated each round (cheap, and the ratio that matters); the rest run once.
REPEATED = ("raw", "clf")


def schedule(rounds: int) -> list[str]:
    """Worker order: the repeated pair alternates its order round to round, and
    the single-run contenders sit between the first two rounds."""
    order: list[str] = []
    for r in range(rounds):
        order += list(REPEATED if r % 2 == 0 else REPEATED[::-1])
        if r == 0:
            order += ["hf", "genparse", "skorch"]
    return [*order, "scenarios"]


def run_worker(name: str, quick: bool, log: Path) -> dict[str, Any]:
    """Runs one worker in a fresh process; its stderr goes to ``log``. Returns
    its result with the wall time and the 1-minute load average at start and end
    (or an ``error`` entry when the process failed)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", name] + (["--quick"] if quick else [])
    load_start, start = os.getloadavg()[0], time.perf_counter()
    with log.open("w") as err:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT, check=False)
    meta = {"worker": name, "wall_s": time.perf_counter() - start, "load_avg_1m_start": load_start,
            "load_avg_1m_end": os.getloadavg()[0]}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = log.read_text().strip().splitlines()[-3:]
        return {"name": name, "error": f"exit code {proc.returncode}: {' | '.join(tail)} (log: {log})", **meta}
    return {**json.loads(lines[-1]), **meta}


def worker(name: str, quick: bool) -> dict[str, Any]:
    from bench.common import sizes
    from bench.contenders import WORKERS
    from bench.scenarios import scenarios

    return {**WORKERS, "scenarios": scenarios}[name](sizes(quick))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run on a few texts")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of raw vLLM and the estimator")
    parser.add_argument("--only", nargs="+", help="run only these workers (no README update)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.worker:
        print(json.dumps(worker(args.worker, args.quick)), flush=True)
        return

    from bench import readme, report
    from bench.common import sizes

    size = sizes(args.quick)
    rounds = args.rounds or (1 if args.quick else 2)
    out = RESULTS / "quick" if args.quick else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        (out / ".gitignore").write_text("*\n")
    began, start = time.strftime("%Y-%m-%d %H:%M"), time.perf_counter()
    runs: dict[str, list[dict[str, Any]]] = {}
    order = [w for w in schedule(rounds) if not args.only or w in args.only]
    for i, name in enumerate(order):
        result = run_worker(name, args.quick, out / f"{name}-{len(runs.get(name, []))}.log")
        runs.setdefault(name, []).append(result)
        status = result.get("error") or f"{result['wall_s']:.0f} s"
        print(f"[{i + 1}/{len(order)}] {name}: {status}", flush=True)
    contenders = {k: report.summarize_contender(v) for k, v in runs.items() if k != "scenarios"}
    document: dict[str, Any] = {}
    document.update(report.ratios(contenders))
    document.update({
        "goals": {},
        "started": began,
        "finished": time.strftime("%Y-%m-%d %H:%M"),
        "wall_s": time.perf_counter() - start,
        "quick": args.quick,
        "rounds": rounds,
        "sizes": {**vars(size), "length_texts": {str(k): v for k, v in size.length_texts.items()}},
        "machine": report.machine(),
        "contenders": contenders,
        "scenarios": (runs.get("scenarios") or [{}])[0],
        "runs": runs,
    })
    document["goals"] = report.goals(document)
    text = report.markdown(document)
    (out / "summary.json").write_text(json.dumps(document, indent=2) + "\n")
    (out / "summary.md").write_text(text)
    print(text)
    if not args.quick and not args.only:
        readme.update(text)


if __name__ == "__main__":
    main()

"""What the estimator costs over raw vLLM, and whether a change moved it:
``LLMLabelClassifier.predict_proba`` and raw ``vllm.LLM.generate`` label reads
over the same SST-2 prompts, interleaved pass by pass (order rotating, prefix
cache emptied before each pass) in one run; with ``--baseline DIR`` (a
checkout of an older commit, e.g. ``git worktree add /tmp/base HEAD~1``) that
checkout's estimator joins the rotation, so before and after are measured
under the same load. Reports each contender's texts/s and its ratio to raw
vLLM per pass (median over passes), with the CPU, its capability and dtype.

Run: ``python bench/overhead.py [--baseline DIR] [--passes N] [--quick] [--tag NAME]``;
writes ``bench/results/overhead[-NAME].json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import machine  # noqa: E402
from bench.run import ANCHOR, RESULTS, Session  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="a checkout of the commit to compare against")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="48 texts instead of all 872")
    parser.add_argument("--tag", default="", help="written to overhead-TAG.json / .md")
    args = parser.parse_args()
    from llm_label_clf.engines.hardware import choose_cpu_dtype, cpu_info

    cpu = cpu_info()
    _, why = choose_cpu_dtype(cpu)
    out = RESULTS / "quick" if args.quick else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    sessions = {ANCHOR: Session(ANCHOR, args.quick, out / "overhead-raw.log"),
                "clf": Session("clf", args.quick, out / "overhead-clf.log")}
    if args.baseline:
        log = out / "overhead-baseline.log"
        sessions["clf_baseline"] = Session("clf", args.quick, log, root=args.baseline.resolve())
    names = list(sessions)
    cycles = []
    for p in range(args.passes):
        order = names[p % len(names):] + names[: p % len(names)]
        cycle = {name: sessions[name].run_pass("sst2") for name in order}
        cycles.append({"order": order, **{n: r.get("texts_per_s") for n, r in cycle.items()}})
        print(f"pass {p + 1}: " + ", ".join(f"{n} {cycle[n].get('texts_per_s', 0):.1f} texts/s" for n in order),
              flush=True)
    closed = {name: session.close() for name, session in sessions.items()}
    ratios = {
        name: statistics.median(c[name] / c[ANCHOR] for c in cycles if c.get(name) and c.get(ANCHOR))
        for name in names if name != ANCHOR
    }
    from transformers import AutoTokenizer

    from bench.common import SST2_PROMPT, sizes, sst2
    from bench.roofline import model_gflop_per_token, peak_gflops

    from llm_label_clf.engines.local import engine_settings
    from llm_label_clf.models.builtin import DEFAULT_MODEL, resolve_model

    model_dir = resolve_model(DEFAULT_MODEL)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    texts = sst2(sizes(args.quick)).texts
    prompt_tokens = statistics.mean(len(tokenizer.encode(SST2_PROMPT.format(text=t))) for t in texts)
    work = model_gflop_per_token(model_dir)
    gflop_per_text = prompt_tokens * work["per_token"] + work["per_read"]
    settings = engine_settings()
    ran_dtype = str(settings.get("dtype", "bfloat16"))  # "auto": the built-in model's bf16
    peak = peak_gflops(cpu.capability, cpu.cores, ran_dtype)
    document = {
        "machine": {**machine(), "cpu_capability": cpu.capability, "dtype": ran_dtype, "dtype_reason": why,
                    "engine_settings": settings},
        "roofline": {**peak, "prompt_tokens_mean": prompt_tokens, "gflop_per_text": gflop_per_text,
                     "model_work": work},
        "baseline": str(args.baseline) if args.baseline else None,
        "passes": cycles,
        "median_texts_per_s": {n: statistics.median(c[n] for c in cycles if c.get(n)) for n in names},
        "median_ratio_to_raw": ratios,
        "fraction_of_peak": {
            n: (statistics.median(c[n] for c in cycles if c.get(n)) * gflop_per_text / peak["gflops"])
            if peak["gflops"] else None
            for n in names
        },
        "load_avg_1m": os.getloadavg()[0],
        "wall_s": time.perf_counter() - began,
        "workers": closed,
    }
    (out / f"overhead{'-' + args.tag if args.tag else ''}.json").write_text(json.dumps(document, indent=1, default=str))
    m = document["machine"]
    peak_text = f"{peak['gflops']:.0f} GFLOP/s" if peak["gflops"] else "unknown"
    lines = [
        f"# predict_proba / raw vLLM ({m['cpu_model']}, {m['cpu_capability']}, {m['cores_usable']} cores, "
        f"dtype {ran_dtype}: {why})",
        "",
        f"SST-2 dev, {len(texts)} texts, {prompt_tokens:.1f} prompt tokens on average ({gflop_per_text:.2f} GFLOP "
        f"per text); estimated peak {peak_text} (bench/roofline.py); engine settings {settings}.",
        "",
        "| contender | texts/s (median) | / raw vLLM (median of passes) | of peak |",
        "|---|---:|---:|---:|",
    ]
    for name in names:
        ratio = "1" if name == ANCHOR else f"{ratios[name]:.3f}"
        frac = document["fraction_of_peak"][name]
        shown = f"{frac:.1%}" if frac is not None else "?"
        lines.append(f"| {name} | {document['median_texts_per_s'][name]:.1f} | {ratio} | {shown} |")
    (out / f"overhead{'-' + args.tag if args.tag else ''}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

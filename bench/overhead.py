"""What the estimator costs over raw vLLM, and whether a change moved it:
``predict_proba`` and raw ``vllm.LLM.generate`` label reads over the same
SST-2 prompts, interleaved pass by pass (order rotating, prefix cache emptied
before each pass); with ``--baseline DIR`` (a checkout of an older commit,
``git worktree add /tmp/base HEAD~1``) its estimator joins the rotation.
Reports texts/s, the median ratio to raw vLLM over passes and the share of
the estimated peak (``bench/roofline.py``).

Run: ``python bench/overhead.py [--baseline DIR] [--passes N] [--quick] [--tag NAME]``;
writes ``bench/results/overhead[-NAME].json`` and ``.md``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import results  # noqa: E402
from bench.run import ANCHOR, Session  # noqa: E402


def interleaved(sessions: dict[str, Session], passes: int) -> list[dict[str, Any]]:
    """``passes`` passes of every contender over SST-2, the order rotating; each pass's texts/s."""
    names = list(sessions)
    cycles = []
    for p in range(passes):
        order = names[p % len(names):] + names[: p % len(names)]
        cycle = {name: sessions[name].run_pass("sst2") for name in order}
        cycles.append({"order": order, **{n: r.get("texts_per_s") for n, r in cycle.items()}})
        print(f"pass {p + 1}: " + ", ".join(f"{n} {cycle[n].get('texts_per_s', 0):.1f} texts/s" for n in order),
              flush=True)
    return cycles


def roofline(quick: bool, capability: str, cores: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The engine's settings and the estimated peak, and the work of one SST-2 text (``bench/roofline.py``)."""
    from transformers import AutoTokenizer

    from bench.common import SST2_PROMPT, sizes, sst2
    from bench.roofline import model_gflop_per_token, peak_gflops

    from llm_label_clf.engines.local import engine_settings
    from llm_label_clf.models.builtin import DEFAULT_MODEL, resolve_model

    model_dir = resolve_model(DEFAULT_MODEL)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    texts = sst2(sizes(quick)).texts
    prompt_tokens = statistics.mean(len(tokenizer.encode(SST2_PROMPT.format(text=t))) for t in texts)
    work = model_gflop_per_token(model_dir)
    gflop_per_text = prompt_tokens * work["per_token"] + work["per_read"]
    settings = engine_settings()
    peak = peak_gflops(capability, cores, str(settings.get("dtype", "bfloat16")))  # "auto": the model's bf16
    return settings, {**peak, "prompt_tokens_mean": prompt_tokens, "gflop_per_text": gflop_per_text,
                      "model_work": work}


def speeds(cycles: list[dict[str, Any]], roof: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per contender the median texts/s, median ratio to raw vLLM pass by pass, and share of the peak."""
    names = [n for n in cycles[0] if n != "order"]
    medians = {n: statistics.median(c[n] for c in cycles if c.get(n)) for n in names}
    ratios = {n: statistics.median(c[n] / c[ANCHOR] for c in cycles if c.get(n) and c.get(ANCHOR))
              for n in names if n != ANCHOR}
    peak = {n: medians[n] * roof["gflop_per_text"] / roof["gflops"] if roof["gflops"] else None for n in names}
    return {"median_texts_per_s": medians, "median_ratio_to_raw": ratios, "fraction_of_peak": peak}


def markdown(doc: dict[str, Any]) -> str:
    m, peak = doc["machine"], doc["roofline"]
    names = list(doc["median_texts_per_s"])
    peak_text = f"{peak['gflops']:.0f} GFLOP/s" if peak["gflops"] else "unknown"
    lines = [
        f"# predict_proba / raw vLLM ({m['cpu_model']}, {m['cpu_capability']}, {m['cores_usable']} cores, "
        f"dtype {m['dtype']}: {m['dtype_reason']})",
        "",
        f"SST-2 dev, {doc['workers'][ANCHOR]['passes'][0]['texts']} texts, {peak['prompt_tokens_mean']:.1f} prompt "
        f"tokens on average ({peak['gflop_per_text']:.2f} GFLOP per text); estimated peak {peak_text} "
        f"(bench/roofline.py); engine settings {m['engine_settings']}.",
        "",
        "| contender | texts/s (median) | / raw vLLM (median of passes) | of peak |",
        "|---|---:|---:|---:|",
    ]
    for name in names:
        ratio = "1" if name == ANCHOR else f"{doc['median_ratio_to_raw'][name]:.3f}"
        frac = doc["fraction_of_peak"][name]
        shown = f"{frac:.1%}" if frac is not None else "?"
        lines.append(f"| {name} | {doc['median_texts_per_s'][name]:.1f} | {ratio} | {shown} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--baseline", type=Path, help="a checkout of the commit to compare against")
    args = results.arguments(parser, markdown, lambda a: ("quick/" if a.quick else "") + "overhead"
                             + (f"-{a.tag}" if a.tag else ""), passes=3, quick=False, tag="")
    out = results.RESULTS / "quick" if args.quick else results.RESULTS
    from llm_label_clf.engines.hardware import cpu_info

    cpu = cpu_info()
    out.mkdir(parents=True, exist_ok=True)
    doc = results.record(baseline=str(args.baseline) if args.baseline else None)
    began = time.perf_counter()
    sessions = {ANCHOR: Session(ANCHOR, args.quick, out / "overhead-raw.log"),
                "clf": Session("clf", args.quick, out / "overhead-clf.log")}
    if args.baseline:
        sessions["clf_baseline"] = Session("clf", args.quick, out / "overhead-baseline.log",
                                           root=args.baseline.resolve())
    cycles = interleaved(sessions, args.passes)
    workers = {name: session.close() for name, session in sessions.items()}
    settings, found = roofline(args.quick, cpu.capability, cpu.cores)
    doc["dtype"] = str(settings.get("dtype", "bfloat16"))
    doc["machine"].update(dtype=doc["dtype"], dtype_reason=doc["machine"]["default_dtype_reason"],
                          engine_settings=settings)
    doc.update(roofline=found, passes=cycles, **speeds(cycles, found), wall_s=time.perf_counter() - began,
               workers=workers)
    print(results.write(args.name, doc, markdown))


if __name__ == "__main__":
    main()

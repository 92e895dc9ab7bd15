"""What the estimator costs over raw vLLM, and whether a change moved it:
``predict_proba`` and raw ``vllm.LLM.generate`` label reads over the same
SST-2 prompts, interleaved pass by pass (order rotating, prefix cache emptied
before each pass); to see whether a change moved it, run it in a checkout of
the commit before and compare the ratios. Reports texts/s, the median ratio to raw vLLM over passes and the share of
a rough roofline's peak: the machine's arithmetic rate from its capability,
cores and clock (per core and cycle, two FMA ports: float32 AVX2 32 FLOP,
AVX-512 64; bfloat16 AMX 1024, AVX512_BF16 128, else float32's rate; the
clock from the model name's "@ x.xxGHz", else "cpu MHz"), and the model's
work per text (2 FLOP per non-embedding weight per prompt token, plus the LM
head once per read; attention over these short prompts left out). A rough
guide: memory bandwidth, not arithmetic, bounds small batches.

Run: ``python bench/overhead.py [--passes N] [--quick] [--tag NAME]``;
writes ``bench/results/overhead[-NAME].json`` and ``.md``.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402
from bench.run import ANCHOR, Session  # noqa: E402

FLOP_PER_CYCLE = {
    ("float32", "AMX"): 64, ("float32", "AVX512_BF16"): 64, ("float32", "AVX512"): 64, ("float32", "AVX2"): 32,
    ("bfloat16", "AMX"): 1024, ("bfloat16", "AVX512_BF16"): 128, ("bfloat16", "AVX512"): 64,
    ("bfloat16", "AVX2"): 32,
}


def clock_ghz() -> float | None:
    """The CPU's nominal clock from /proc/cpuinfo (model name, else cpu MHz)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    named = re.search(r"model name\s*:.*@\s*([\d.]+)\s*GHz", text)
    if named:
        return float(named.group(1))
    mhz = re.search(r"cpu MHz\s*:\s*([\d.]+)", text)
    return float(mhz.group(1)) / 1000 if mhz else None


def peak_gflops(capability: str, cores: int, dtype: str) -> dict[str, Any]:
    """The estimated peak (GFLOP/s) for ``dtype`` on ``cores`` cores, with what it was computed from."""
    dtype = {"bf16": "bfloat16", "auto": "bfloat16", "fp32": "float32"}.get(dtype, dtype)
    flop = FLOP_PER_CYCLE.get((dtype, capability))
    ghz = clock_ghz()
    if flop is None or ghz is None:
        return {"gflops": None, "why": f"no estimate for {dtype} on {capability}"}
    return {"gflops": cores * flop * ghz, "flop_per_cycle_per_core": flop, "ghz": ghz, "cores": cores,
            "dtype": dtype, "capability": capability}


def model_gflop_per_token(model_dir: str) -> dict[str, float]:
    """GFLOP per prompt token and per read (the LM head), from a Llama-style ``config.json``."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or hidden // heads
    attention = hidden * (2 * heads * head_dim + 2 * kv_heads * head_dim)
    mlp = 3 * hidden * config["intermediate_size"]
    return {"per_token": 2 * layers * (attention + mlp) / 1e9, "per_read": 2 * hidden * config["vocab_size"] / 1e9}


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
    """The engine's settings and the estimated peak, and the work of one SST-2 text."""
    from transformers import AutoTokenizer

    from llm_label_clf.engines.local import engine_settings
    from llm_label_clf.models.builtin import DEFAULT_MODEL, resolve_model

    model_dir = resolve_model(DEFAULT_MODEL)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    texts = common.sst2(common.sizes(quick)).texts
    prompt_tokens = statistics.mean(len(tokenizer.encode(common.SST2_PROMPT.format(text=t))) for t in texts)
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
    m, peak = doc["machine"], doc.get("roofline")
    names = list(doc["median_texts_per_s"])
    lines = [
        f"# predict_proba / raw vLLM ({m['cpu_model']}, {m['cpu_capability']}, {m['cores_usable']} cores, "
        f"dtype {m['dtype']}: {m['dtype_reason']})",
        "",
    ]
    if peak:  # records before the roofline have neither the line nor the column
        peak_text = f"{peak['gflops']:.0f} GFLOP/s" if peak["gflops"] else "unknown"
        lines += [f"SST-2 dev, {doc['workers'][ANCHOR]['passes'][0]['texts']} texts, {peak['prompt_tokens_mean']:.1f} "
                  f"prompt tokens on average ({peak['gflop_per_text']:.2f} GFLOP per text); estimated peak "
                  f"{peak_text} (the roofline of bench/overhead.py); engine settings {m['engine_settings']}.", ""]
    lines += ["| contender | texts/s (median) | / raw vLLM (median of passes) |" + (" of peak |" if peak else ""),
              "|---|---:|---:|" + ("---:|" if peak else "")]
    for name in names:
        ratio = "1" if name == ANCHOR else f"{doc['median_ratio_to_raw'][name]:.3f}"
        frac = doc["fraction_of_peak"][name] if peak else None
        shown = (f" {frac:.1%} |" if frac is not None else " ? |") if peak else ""
        lines.append(f"| {name} | {doc['median_texts_per_s'][name]:.1f} | {ratio} |{shown}")
    return "\n".join(lines) + "\n"


def main() -> None:
    args = common.arguments(__doc__, markdown, lambda a: ("quick/" if a.quick else "") + "overhead"
                             + (f"-{a.tag}" if a.tag else ""), passes=3, quick=False, tag="")
    out = common.RESULTS / "quick" if args.quick else common.RESULTS
    from llm_label_clf.engines.hardware import cpu_info

    cpu = cpu_info()
    out.mkdir(parents=True, exist_ok=True)
    doc = common.record()
    began = time.perf_counter()
    sessions = {ANCHOR: Session(ANCHOR, args.quick, out / "overhead-raw.log"),
                "clf": Session("clf", args.quick, out / "overhead-clf.log")}
    cycles = interleaved(sessions, args.passes)
    workers = {name: session.close() for name, session in sessions.items()}
    settings, found = roofline(args.quick, cpu.capability, cpu.cores)
    doc["dtype"] = str(settings.get("dtype", "bfloat16"))
    doc["machine"].update(dtype=doc["dtype"], dtype_reason=doc["machine"]["default_dtype_reason"],
                          engine_settings=settings)
    doc.update(roofline=found, passes=cycles, **speeds(cycles, found), wall_s=time.perf_counter() - began,
               workers=workers)
    print(common.write(args.name, doc, markdown))


if __name__ == "__main__":
    main()

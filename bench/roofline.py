"""A rough roofline for ``bench/overhead.py``: the machine's peak arithmetic
rate from its capability, cores and clock (per core and cycle, two FMA ports:
float32 AVX2 32 FLOP, AVX-512 64; bfloat16 AMX 1024, AVX512_BF16 128, else
emulated at float32's rate; the clock from the model name's "@ x.xxGHz",
else "cpu MHz"), and the model's work per text (2 FLOP per non-embedding
weight per prompt token, plus the LM head once per read; attention over these
short prompts left out). A rough guide: memory bandwidth, not arithmetic,
bounds small batches."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

__all__ = ["model_gflop_per_token", "peak_gflops"]

_FLOP_PER_CYCLE = {
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
    flop = _FLOP_PER_CYCLE.get((dtype, capability))
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

"""The CPU the embedded engine runs on, and the dtype it implies: with no
``dtype`` given, bfloat16 only where the CPU computes it natively
(AVX512_BF16 or AMX), float32 elsewhere; ``LLM_LABEL_CLF_DTYPE`` and
``engine_options`` win."""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass

__all__ = ["DTYPE_ENV", "CpuInfo", "choose_cpu_dtype", "cpu_info"]

#: Environment variable naming the dtype of embedded engines ("float32",
#: "bfloat16", "auto" for the model's own), for engines whose options give none
#: (on CPU and GPU alike).
DTYPE_ENV = "LLM_LABEL_CLF_DTYPE"
#: oneDNN ISA caps (``ONEDNN_MAX_CPU_ISA``) below which bf16 is emulated.
_EMULATING_ISA_CAPS = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")


@dataclass(frozen=True)
class CpuInfo:
    """What matters of the CPU: its model name, core count (those this process
    may use) and instruction-set flags."""

    model: str
    cores: int
    flags: frozenset[str]

    @property
    def capability(self) -> str:
        """The best of AMX / AVX512_BF16 / AVX512 / AVX2 (x86), or NEON_BF16 /
        NEON (ARM), or the machine name."""
        for name, flag in (("AMX", "amx_bf16"), ("AVX512_BF16", "avx512_bf16"), ("AVX512", "avx512f"),
                           ("AVX2", "avx2"), ("NEON_BF16", "bf16"), ("NEON", "asimd")):
            if flag in self.flags:
                return name
        return platform.machine() or "unknown"

    @property
    def native_bf16(self) -> bool:
        """Whether bf16 arithmetic runs in hardware (and oneDNN is not capped
        below it with ``ONEDNN_MAX_CPU_ISA``)."""
        cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
        if cap in _EMULATING_ISA_CAPS:
            return False
        return bool(self.flags & {"amx_bf16", "avx512_bf16", "bf16"})


@functools.cache
def cpu_info() -> CpuInfo:
    """This machine's CPU, read from ``/proc/cpuinfo`` where there is one."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "cpu model") and model in ("", platform.machine()):
                    model = value.strip()
                elif key in ("flags", "features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return CpuInfo(model or "unknown", cores, frozenset(flags))


def choose_cpu_dtype(cpu: CpuInfo) -> tuple[str, str]:
    """The dtype for a CPU engine whose options name none, and why."""
    if chosen := os.environ.get(DTYPE_ENV):
        return chosen, f"set by {DTYPE_ENV}"
    if cpu.native_bf16:
        return "auto", f"the model's own dtype: the CPU computes bf16 natively ({cpu.capability})"
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if cap in _EMULATING_ISA_CAPS and cpu.flags & {"amx_bf16", "avx512_bf16", "bf16"}:
        return "float32", (f"float32: ONEDNN_MAX_CPU_ISA={cap} caps this {cpu.capability} CPU below native bf16, "
                           "where bf16 is emulated (~4x slower)")
    return "float32", f"float32: the CPU has no native bf16 ({cpu.capability}), where bf16 is emulated (~4x slower)"

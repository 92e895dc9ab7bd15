"""Engine defaults chosen by the hardware: bf16 only where the CPU computes it
natively, float32 elsewhere; the environment and the user's options win; what
was chosen is reported by ``engine_info``."""

from __future__ import annotations

import pytest

from llm_label_clf import engine_info
from llm_label_clf.engines.hardware import DTYPE_ENV, CpuInfo, choose_cpu_dtype, cpu_info
from llm_label_clf.engines.local import engine_settings

AVX2 = CpuInfo("an AVX2 CPU", 2, frozenset({"sse4_2", "avx", "avx2", "fma"}))
AMX = CpuInfo("an AMX CPU", 2, frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}))
AVX512 = CpuInfo("an AVX-512 CPU without bf16", 2, frozenset({"avx2", "avx512f", "avx512bw"}))


@pytest.fixture
def no_overrides(monkeypatch):
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("LLM_LABEL_CLF_GPU_MEMORY_UTILIZATION", raising=False)


@pytest.mark.parametrize(
    ("cpu", "capability", "dtype"),
    [(AVX2, "AVX2", "float32"), (AVX512, "AVX512", "float32"), (AMX, "AMX", "auto")],
)
def test_bf16_only_where_the_cpu_computes_it(no_overrides, cpu, capability, dtype):
    assert cpu.capability == capability
    chosen, why = choose_cpu_dtype(cpu)
    assert chosen == dtype
    assert capability in why


def test_a_onednn_cap_below_bf16_counts_as_emulated(no_overrides, monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    chosen, why = choose_cpu_dtype(AMX)
    assert chosen == "float32" and "ONEDNN_MAX_CPU_ISA=AVX2 caps this AMX CPU below native bf16" in why


def test_the_environment_and_the_users_options_win(no_overrides, monkeypatch):
    monkeypatch.setenv(DTYPE_ENV, "bfloat16")
    assert choose_cpu_dtype(AVX2) == ("bfloat16", f"set by {DTYPE_ENV}")
    assert engine_settings({"dtype": "float16"})["dtype"] == "float16"
    assert engine_settings({})["dtype"] == "bfloat16"


def test_gpus_keep_vllms_defaults_but_the_environments_dtype(no_overrides, monkeypatch):
    from llm_label_clf.engines import local

    monkeypatch.setattr(local, "cpu_platform", lambda: False)  # what vLLM (or its record) says on a GPU
    assert engine_settings({}) == {}
    monkeypatch.setenv(DTYPE_ENV, "auto")
    assert engine_settings({}) == {}
    monkeypatch.setenv(DTYPE_ENV, "float32")
    assert engine_settings({}) == {"dtype": "float32"}
    assert engine_settings({"dtype": "bfloat16", "enforce_eager": True}) == {"dtype": "bfloat16", "enforce_eager": True}
    monkeypatch.setenv(local.GPU_MEMORY_ENV, "0.2")
    assert engine_settings({})["gpu_memory_utilization"] == 0.2
    assert engine_settings({"gpu_memory_utilization": 0.5})["gpu_memory_utilization"] == 0.5


def test_this_machine_is_read_and_the_engines_settings_reported(engine):
    cpu = cpu_info()
    assert cpu.cores >= 1 and cpu.model
    info = engine_info()
    assert info["cpu_capability"] == cpu.capability
    (started,) = [e for e in info["engines"] if e["options"] == {}]
    assert started["settings"]["dtype"] == engine.settings["dtype"] == "float32"  # the suite's LLM_LABEL_CLF_DTYPE
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        assert started["settings"]["block_size"] == 32
    else:  # GPUs keep vLLM's own block size
        assert "block_size" not in started["settings"]

"""Where a model comes from (``llm_label_clf.models.source``): a missing local
path and a hub id that cannot be had offline fail in seconds, with what to do,
before vLLM is imported or any engine starts. No network is used: the hub is
a closed or listening port on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time

import pytest

from llm_label_clf import LLMLabelClassifier, ModelNotFoundError, ModelUnavailableError
from llm_label_clf.engines import local
from llm_label_clf.models import source as model_source
from llm_label_clf.models.builtin import DEFAULT_MODEL
from llm_label_clf.models.source import check_model_source, hub_cache_dir, hub_unreachable, looks_like_path
from llm_label_clf.testing import free_port

PROXY_ENVS = ["http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"]
HUB_ENVS = ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT",
            "VLLM_USE_MODELSCOPE"]


@pytest.fixture(autouse=True)
def clean_hub_environment(monkeypatch, tmp_path):
    """An empty hub cache, no proxies, no offline flags, nothing remembered."""
    for name in PROXY_ENVS + HUB_ENVS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setattr(model_source, "_checked", set())


def _cache_snapshot(tmp_path, repo_id: str, filename: str = "config.json") -> None:
    snapshot = tmp_path / "hf_home" / "hub" / f"models--{repo_id.replace('/', '--')}" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / filename).write_text("{}")


@pytest.mark.parametrize(
    ("model", "is_path"),
    [
        ("/models/llama", True),
        ("./llama", True),
        ("../llama", True),
        ("~/llama", True),
        (".", True),
        ("weights.gguf", True),
        ("Model.SAFETENSORS", True),
        ("models/meta/llama", True),
        ("my model", True),
        ("C:\\models\\llama", True),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", False),
        ("gpt2", False),
        ("org_1/model.v2", False),
    ],
)
def test_looks_like_path(model, is_path):
    assert looks_like_path(model) is is_path


def test_hub_cache_dir_follows_huggingface_hub(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "legacy"))
    assert hub_cache_dir() == tmp_path / "legacy"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert hub_cache_dir() == tmp_path / "hub"


# --- local paths ------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["./no-such-model", "{tmp}/no-such-model", "~/no-such-model", "weights.gguf",
                                   "models/org/name", "model.safetensors"])
def test_missing_local_path_names_the_path(monkeypatch, tmp_path, model):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    model = model.format(tmp=tmp_path)
    with pytest.raises(ModelNotFoundError, match="looks like a local path, but .* does not exist") as caught:
        check_model_source(model)
    assert repr(model) in str(caught.value)
    assert str(tmp_path) in str(caught.value) or str(tmp_path.resolve()) in str(caught.value)
    assert "'smollm2-135m-instruct'" in str(caught.value)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, FileNotFoundError)


def test_existing_folder_and_gguf_file_pass(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "my-model").mkdir()
    (tmp_path / "weights.gguf").write_bytes(b"")
    for model in ["my-model", "./my-model", str(tmp_path / "my-model"), "weights.gguf"]:
        check_model_source(model)


def test_builtin_model_passes_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    check_model_source(DEFAULT_MODEL)


# --- hub ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_uncached_hub_id_offline_fails_at_once(monkeypatch, tmp_path, flag):
    monkeypatch.setenv(flag, "1")
    began = time.monotonic()
    with pytest.raises(ModelUnavailableError) as caught:
        check_model_source("HuggingFaceTB/SmolLM2-360M-Instruct")
    assert time.monotonic() - began < 1.0
    message = str(caught.value)
    assert f"{flag}=1 forbids downloading it" in message
    assert str(tmp_path / "hf_home" / "hub") in message
    assert "local folder" in message and "'smollm2-135m-instruct'" in message
    assert isinstance(caught.value, OSError)


def test_cached_hub_id_passes_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _cache_snapshot(tmp_path, "org/cached-model")
    check_model_source("org/cached-model")
    _cache_snapshot(tmp_path, "mistral-format", "params.json")
    check_model_source("mistral-format")
    _cache_snapshot(tmp_path, "org/tokenizer-only", "tokenizer.json")
    with pytest.raises(ModelUnavailableError):
        check_model_source("org/tokenizer-only")


def test_unreachable_hub_fails_in_seconds(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    began = time.monotonic()
    with pytest.raises(ModelUnavailableError, match=r"the hub at http://127\.0\.0\.1:\d+ cannot be reached") as caught:
        check_model_source("org/some-model")
    assert time.monotonic() - began < 5.0
    assert "set HF_HUB_OFFLINE=1 and give model= a local folder" in str(caught.value)
    assert "'smollm2-135m-instruct'" in str(caught.value)


def test_reachable_hub_lets_vllm_download(monkeypatch):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        check_model_source("org/some-model")
    assert "org/some-model" in model_source._checked  # remembered: no second probe


def test_a_misspelt_builtin_name_is_suggested(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError, match="the built-in model 'smollm2-135m-instruct'"):
        check_model_source("smollm2-135m")


def test_modelscope_ids_are_left_to_vllm(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VLLM_USE_MODELSCOPE", "true")
    check_model_source("qwen/Qwen2-0.5B")


def test_probe_gives_up_at_its_deadline(monkeypatch):
    def hang(*args, **kwargs):
        time.sleep(3)  # a name lookup that hangs; the abandoned thread ends later
        raise OSError("too late")

    monkeypatch.setattr(model_source.socket, "create_connection", hang)
    began = time.monotonic()
    why = hub_unreachable("https://huggingface.co", timeout_s=0.2)
    assert time.monotonic() - began < 2.0
    assert why == "no connection to huggingface.co:443 within 0.2 s"


def test_probe_goes_to_the_proxy_unless_exempt(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert model_source._probe_target("https://huggingface.co") == ("proxy.example", 3128)
    monkeypatch.setenv("NO_PROXY", "huggingface.co")
    assert model_source._probe_target("https://huggingface.co") == ("huggingface.co", 443)
    assert model_source._probe_target("http://mirror.local:8080") == ("mirror.local", 8080)


# --- before any engine ------------------------------------------------------------------------


def test_errors_come_before_the_engine(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the engine was being set up")

    monkeypatch.setattr(local, "engine_settings", refuse)
    monkeypatch.setattr(local, "_resolve_engine", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError):
        local.get_engine("./no-such-model")
    with pytest.raises(ModelUnavailableError):
        local.get_engine("org/not-cached")
    with pytest.raises(ModelNotFoundError):
        LLMLabelClassifier(model="/no/such/model", progress=False).fit(["a", "b"], ["x", "y"])


_NO_VLLM_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.modules["vllm"] = None  # any import of vLLM fails at once
    from llm_label_clf import LLMLabelClassifier, ModelUnavailableError
    try:
        LLMLabelClassifier(model="org/not-cached", progress=False).fit(["a", "b"], ["x", "y"])
    except ModelUnavailableError as exc:
        print("RAISED", "HF_HUB_OFFLINE=1 forbids" in str(exc), "torch" in sys.modules)
    """
)


def test_fit_fails_without_importing_vllm_or_torch(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", _NO_VLLM_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["RAISED", "True", "False"], out.stderr[-2000:]

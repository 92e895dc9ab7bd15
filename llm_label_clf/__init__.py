"""llm_label_clf: any causal LLM served by vLLM as a scikit-learn classifier."""

from .classifier import LLMLabelClassifier
from .classifier_cv import LLMLabelClassifierCV
from .distributed import LabelReadStages, ray_llm_processor, score_dask_dataframe, score_ray_dataset
from .engines import engine_info, get_engine, get_remote_engine, shutdown_engines, shutdown_remote_engines
from .exceptions import (
    GenerationError,
    LabelWordsWarning,
    LowLabelMassWarning,
    ModelNotFoundError,
    ModelUnavailableError,
    NotFittedError,
    TruncationWarning,
)
from .label_reads import LabelRead, next_token_label_reads

__all__ = [
    "GenerationError",
    "LLMLabelClassifier",
    "LLMLabelClassifierCV",
    "LabelRead",
    "LabelReadStages",
    "LabelWordsWarning",
    "LowLabelMassWarning",
    "ModelNotFoundError",
    "ModelUnavailableError",
    "NotFittedError",
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
__version__ = "0.1.0"

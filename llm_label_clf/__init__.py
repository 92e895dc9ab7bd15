"""llm_label_clf: any causal LLM served by vLLM as a scikit-learn classifier."""

from . import exceptions
from .classifier import LLMLabelClassifier
from .distributed import LabelReadStages, ray_llm_processor, score_dask_dataframe, score_ray_dataset
from .engines import engine_info, get_engine, get_remote_engine, shutdown_engines, shutdown_remote_engines
from .exceptions import *  # noqa: F403  (every exception and warning is public: exceptions.__all__)
from .label_reads import LabelRead, next_token_label_reads
from .selection.search import LLMLabelClassifierCV

__all__ = [
    "LLMLabelClassifier",
    "LLMLabelClassifierCV",
    "LabelRead",
    "LabelReadStages",
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
__all__ += exceptions.__all__
__version__ = "0.1.0"

"""Past one machine: a fitted estimator scoring a Ray Data ``Dataset``
(``ray_data``), a Dask DataFrame (``dask_frames``), or on Ray's own vLLM
stage (``ray_llm``). Importing it imports neither Ray nor Dask."""

from ._columns import METHODS, empty_output
from .dask_frames import score_dask_dataframe
from .ray_data import score_ray_dataset
from .ray_llm import LabelReadStages, ray_llm_processor

__all__ = [
    "METHODS",
    "LabelReadStages",
    "empty_output",
    "ray_llm_processor",
    "score_dask_dataframe",
    "score_ray_dataset",
]

"""Past one machine: a fitted estimator scoring a Ray Data ``Dataset``
(``ray_data``) or a Dask DataFrame (``dask_frames``) on a cluster, one engine
per actor or worker process, with the output columns both name the same way
(``_columns``) and one batch scorer that names failing rows by their ids
(``_batch``). For Ray's own vLLM stage (``ray.data.llm``), ``ray_llm`` turns
a plan that reads a text once into that stage's preprocess/postprocess pair.

Importing this package imports neither Ray nor Dask: each is imported when
its function is called (extras ``llm_label_clf[ray]``, ``llm_label_clf[dask]``).
"""

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

"""Raw label logprobs (``transform``, ``calibration=None``) of 200 SST-2 and
200 AG News texts under the engine environment this process was started
with, saved to ``argv[1]`` for a bit-for-bit comparison (``eqcheck.sh``)."""

import os
import sys
import time

import numpy as np
import pandas as pd

began = time.perf_counter()
from llm_label_clf import LLMLabelClassifier  # noqa: E402  (timed from the process's start)

folder = os.environ["LLM_LABEL_CLF_DATASETS"]
out = {}
for name, file in (("sst2", "sst2_dev.csv"), ("ag", "agnews_test.csv")):
    frame = pd.read_csv(f"{folder}/{file}")
    texts = frame["text"].astype(str).tolist()[:200]
    labels = sorted(frame["label"].astype(str).unique())
    clf = LLMLabelClassifier(labels=labels, calibration=None).fit(texts[:8])
    start = time.perf_counter()
    out[name] = clf.transform(texts)
    print(f"{name}: first transform done {time.perf_counter() - began:.1f} s since start; "
          f"{time.perf_counter() - start:.1f} s for 200", flush=True)
np.savez(sys.argv[1], **out)

"""Reads for ens_offline.py: per draw of ``bench/selection.py`` (its seeds and
rows), four readers (the two plain default prompts, few-shot 4 and zero-shot)
fitted on the draw's texts read the same 1000 "wide" texts drawn from the pool
rows the draw did not train on. Saves {dataset}_{n}_{draw}.npz in
``ens_offline.WIDE_READS``, the cache folder outside the repository.

usage: ens_reads.py DATASET SIZE DRAWS   (starts the engine)"""

import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE))
from ens_offline import WIDE_READS

from bench import selection as S

from llm_label_clf import LLMLabelClassifier
from llm_label_clf.selection.candidates import DEFAULT_PROMPTS

READERS = (
    ("default", 0, 4),
    ("instruction", 1, 4),
    ("default0", 0, 0),
    ("instruction0", 1, 0),
)


def main():
    name, n, draws = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    WIDE_READS.mkdir(parents=True, exist_ok=True)
    _, pool = S.test_and_pool(name, 300)
    for d in range(draws):
        start = time.time()
        seed, train = S.training_draw(name, n, d, pool)
        X, y = train["text"].tolist(), train["label"].to_numpy()
        rest = pool.drop(train.index)
        Xw, yw = S.wide_texts(rest, 1000, seed)
        reads = {}
        for pname, which, shots in READERS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                clf = LLMLabelClassifier(
                    progress=False, low_mass="ignore", random_state=seed, few_shot=shots, **DEFAULT_PROMPTS[which]
                ).fit(X, y)
                reads[pname] = clf.predict_log_proba(Xw)
        classes = list(clf.classes_)
        np.savez_compressed(
            str(WIDE_READS / f"{name}_{n}_{d}.npz"),
            yw=np.array([classes.index(v) for v in yw]),
            **reads,
        )
        print(name, n, d, f"{time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()

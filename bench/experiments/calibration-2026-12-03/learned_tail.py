"""Why is a few-shot + learned refit overconfident on new texts?

Variants of the learned calibrator on the same reads; saves the reads in the cache folder outside the
repository (``calib.TAIL_ARRAYS``) and the variants' scores in learned_tail2_{DATASET}_{SIZE}.json here.

usage: learned_tail.py DATASET SIZE DRAWS   (starts the engine)"""

import json
import sys
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE))
from calib import TAIL_ARRAYS

from bench import selection as S

from llm_label_clf import LLMLabelClassifier
from llm_label_clf.fitting.calibration import LearnedCalibrator, learned_seed
from llm_label_clf.reading.cache import ReadCache
from llm_label_clf.selection.candidates import DEFAULT_PROMPTS


def variants(F, y, Fw, K, seed):
    out = {}
    base = LearnedCalibrator.fit(F, y, K, random_state=seed)
    out["current"] = np.exp(base.log_proba(Fw, K))
    lo, hi = F.min(0), F.max(0)
    out["clipped"] = np.exp(base.log_proba(np.clip(Fw, lo, hi), K))
    C = F - F.mean(1, keepdims=True)
    Cw = Fw - Fw.mean(1, keepdims=True)
    cen = LearnedCalibrator.fit(C, y, K, random_state=seed)
    out["centered"] = np.exp(cen.log_proba(Cw, K))
    out["centered_clipped"] = np.exp(cen.log_proba(np.clip(Cw, C.min(0), C.max(0)), K))
    out["C"] = (base.C, cen.C)
    return out


def main():
    name, n, draws = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    test, pool = S.test_and_pool(name, 300)
    res = {}
    TAIL_ARRAYS.mkdir(parents=True, exist_ok=True)
    with ReadCache().active():
        for d in range(draws):
            seed, train = S.training_draw(name, n, d, pool)
            X, y = train["text"].tolist(), train["label"].to_numpy()
            rest = pool.drop(train.index)
            Xw, yw = S.wide_texts(rest, 1000, seed)
            for pname, prompt, shots in (
                ("default", DEFAULT_PROMPTS[0], 4),
                ("instruction", DEFAULT_PROMPTS[1], 4),
                ("default0", DEFAULT_PROMPTS[0], 0),
                ("instruction0", DEFAULT_PROMPTS[1], 0),
            ):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    raw = LLMLabelClassifier(
                        progress=False, low_mass="ignore", random_state=seed, few_shot=shots, **prompt
                    ).fit(X, y)
                    shown = set(raw.few_shot_rows_)
                    keep = np.array([i for i in range(len(X)) if i not in shown])
                    F = raw.predict_log_proba([X[i] for i in keep])
                    Fw = raw.predict_log_proba(Xw)
                    learned = LLMLabelClassifier(
                        progress=False,
                        low_mass="ignore",
                        random_state=seed,
                        few_shot=shots,
                        calibration="learned",
                        **prompt,
                    ).fit(X, y)
                    ref = learned.predict_proba(Xw)
                cls = list(raw.classes_)
                yi = np.array([cls.index(v) for v in y[keep]])
                ywi = np.array([cls.index(v) for v in yw])
                K = len(cls)
                np.savez_compressed(
                    str(TAIL_ARRAYS / f"{name}_{n}_{d}_{pname}.npz"),
                    F=F,
                    Fw=Fw,
                    y=yi,
                    yw=ywi,
                    seed=learned_seed(seed),
                )
                v = variants(F, yi, Fw, K, learned_seed(seed))
                Cs = v.pop("C")
                row = {
                    "C": Cs,
                    "match_refit": float(np.abs(v["current"] - ref).max()),
                    "train_range": [F.min(0).tolist(), F.max(0).tolist()],
                    "wide_out_of_range": float(((Fw < F.min(0)) | (Fw > F.max(0))).any(1).mean()),
                }
                for k, P in v.items():
                    row[k] = S.scores(np.arange(K), P, ywi)
                res[f"{name}/{n}/{d}/{pname}"] = row
                print(
                    d,
                    pname,
                    "C",
                    Cs,
                    "match {:.1e}".format(row["match_refit"]),
                    "out-of-range {:.2f}".format(row["wide_out_of_range"]),
                    " ".join(
                        f"{k} ece {row[k]['ece']:.3f} ll {row[k]['log_loss']:.3f} over {row[k]['overconfidence']:+.3f}"
                        for k in v
                    ),
                    flush=True,
                )
    json.dump(res, open(HERE / f"learned_tail2_{name}_{n}.json", "w"))


if __name__ == "__main__":
    main()

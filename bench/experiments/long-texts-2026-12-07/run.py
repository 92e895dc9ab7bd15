"""Issue 54 item 5 end to end: the default search on 64 long newsgroup posts
over 20 classes, called as a new user would, then 100 other posts predicted.

Writes nothing; prints what ``output.txt`` beside it holds (the run of
2026-12-07). Needs ``newsgroups.csv`` from ``bench/public_sets.py``.
"""

import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import accuracy_score, log_loss

from llm_label_clf import LLMLabelClassifier, LLMLabelClassifierCV

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.public_sets import CACHE  # noqa: E402  (where the public sets are built, $LLM_LABEL_CLF_PUBLIC_SETS)

df = pd.read_csv(CACHE / "newsgroups.csv", dtype=str, keep_default_na=False)
train = df.sample(64, random_state=3)
test = df.drop(train.index).sample(100, random_state=3)
lengths = train.text.str.len()
print("train classes:", train.label.nunique(), "median chars:", int(lengths.median()), "max:", lengths.max())
t0 = time.time()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cv = LLMLabelClassifierCV(LLMLabelClassifier(random_state=0)).fit(train.text, train.label)
fit_s = time.time() - t0
for w in caught:
    print("WARNING:", str(w.message)[:600])
print("fit s:", round(fit_s), "chose:", cv.best_params_)
print("best_score_", cv.best_score_, "held_out_score_", cv.held_out_score_, "sem", cv.held_out_score_sem_)
print("readers:", [r.get("few_shot") for r in cv.readers_],
      "skipped:", [r.get("few_shot") for r in cv.skipped_readers_])
t0 = time.time()
proba = cv.predict_proba(test.text)
pred_s = time.time() - t0
y = test.label.to_numpy()
acc = accuracy_score(y, cv.classes_[proba.argmax(1)])
ll = log_loss(y, proba, labels=cv.classes_)
print("test 100: accuracy", round(acc, 3), "log-loss", round(ll, 3), "ln 20 =", round(np.log(20), 3),
      "predict s", round(pred_s))
print("estimate - test:", round(ll + cv.held_out_score_, 3), "2 SE:", round(2 * cv.held_out_score_sem_, 3))

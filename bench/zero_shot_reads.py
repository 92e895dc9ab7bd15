"""Reads for choosing the zero-shot default: per dataset and prompt, the label
log-probabilities of a fixed design test set, of the unlabelled fit texts of
``--draws`` random draws, of the content-free inputs (contextual
calibration) and of each draw's domain-context inputs (random in-domain
words, Fei et al. 2023), all uncalibrated, from the engine through the
library's own plans (``calibration=None``), stored in the read store and
saved as arrays in a cache outside the repository. ``zero_shot.py`` does the
arithmetic on them.

Every dataset is split once (seed 0, stratified): a design test set (the
texts the default is chosen on), a report test set (only reported, by
``zero_shot.py table``) and the pool the fit texts are drawn from. A draw
is ``--fit`` texts drawn at random from the pool (unlabelled: a user's texts
are not stratified).

Run: ``python bench/zero_shot_reads.py [--sets ...] [--prompts ...] [--draws 10]``.
The cache: ``~/.cache/llm_label_clf/experiments/zero-shot/`` (``$ZERO_SHOT_CACHE``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CACHE = Path(os.environ.get("ZERO_SHOT_CACHE", Path.home() / ".cache/llm_label_clf/experiments/zero-shot"))
STORE = CACHE / "reads.sqlite"
SPLIT_SEED = 0
N_TEST = 300
#: Domain-context inputs per draw (Fei et al. 2023 average 20).
N_DOMAIN = 20

#: name -> (where, file, pool file or None). "shared": ../shared/datasets; "public": bench/public_sets.py's cache.
SETS: dict[str, tuple[str, str, str | None]] = {
    "sst2": ("shared", "sst2_dev.csv", None),
    "ag_news": ("shared", "agnews_test.csv", None),
    "trec": ("shared", "trec_train.csv", None),
    "emotion": ("shared", "emotion_val.csv", None),
    "banking77": ("shared", "banking77_test.csv", None),
    "hate_speech": ("public", "hate_speech.csv", None),
    "dbpedia": ("public", "dbpedia.csv", None),
    "bbc_news": ("public", "bbc_news.csv", None),
}

#: Sets whose draws come from a fixed random part of the pool (Banking77: 141 reads per text).
SMALL_POOLS = {"banking77": 160}

#: The prompt candidates: estimator parameters (prompt, instructions, chat).
PROMPTS: dict[str, dict[str, Any]] = {
    "plain": {"prompt": "Text: {text}\nLabel:"},
    "list": {"prompt": "Classify the text as {labels}.\nText: {text}\nLabel:"},
    "list_chat": {"prompt": "Classify the text as {labels}.\nText: {text}\nLabel:", "chat": True},
    "question": {"prompt": "Text: {text}\nQuestion: Is this text {labels}?\nAnswer:"},
    "text_list": {"prompt": "Text: {text}\nLabel ({labels}):"},
    "text_oneof": {"prompt": "Text: {text}\nThe text is one of: {labels}.\nLabel:"},
    "chat_list_after": {"prompt": "Text: {text}\nLabel this text as {labels}.", "chat": True},
    "chat_instruct": {
        "prompt": "Text: {text}\n\nWhich one is it: {labels}?",
        "instructions": "You label texts. Answer with the label only.",
        "chat": True,
    },
}


def frame(name: str) -> Any:
    """The dataset ``name`` as a DataFrame with ``text`` and ``label``."""
    import pandas as pd

    from llm_label_clf.testing import datasets_dir

    where, file, _ = SETS[name]
    if where == "shared":
        folder = datasets_dir()
    else:
        folder = Path(os.environ.get("LLM_LABEL_CLF_PUBLIC_SETS", Path.home() / ".cache/llm_label_clf/datasets"))
        if not (folder / file).is_file():
            raise FileNotFoundError(f"{folder / file} is missing: build it with python bench/public_sets.py")
    return pd.read_csv(folder / file, keep_default_na=False)[["text", "label"]]


def split(name: str) -> dict[str, np.ndarray]:
    """Row positions of the design test set, the report test set and the pool (fixed, seed 0)."""
    from sklearn.model_selection import train_test_split

    labels = frame(name)["label"].to_numpy()
    rows = np.arange(len(labels))
    rest, design = train_test_split(rows, test_size=N_TEST, stratify=labels, random_state=SPLIT_SEED)
    pool, report = train_test_split(rest, test_size=N_TEST, stratify=labels[rest], random_state=SPLIT_SEED)
    return {"design": np.sort(design), "report": np.sort(report), "pool": np.sort(pool)}


def draw_rows(name: str, pool: np.ndarray, n: int, draw: int, kind: str = "design") -> np.ndarray:
    """Draw ``draw``'s ``n`` fit rows, at random from ``pool`` (a stable seed per set, kind and draw)."""
    seed = zlib.crc32(f"zero-shot/{kind}/{name}/{n}/{draw}".encode()) & 0x7FFFFFFF
    return np.sort(np.random.default_rng(seed).choice(pool, n, replace=False))


def domain_texts(texts: list[str], n: int, seed: int) -> list[str]:
    """Fei et al.'s domain-context inputs: ``n`` strings of random words drawn
    from ``texts`` (each as long as their mean length in words)."""
    words = [w for t in texts for w in t.split()]
    length = max(1, round(len(words) / max(1, len(texts))))
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(words, length)) for _ in range(n)]


def read_plans_of(clf: Any, texts: list[str]) -> list[Any]:
    """Every output's uncalibrated reads (``ClassReads``) of ``texts`` through ``clf``'s plans."""
    from llm_label_clf import get_engine
    from llm_label_clf.fitting.inputs import as_records
    from llm_label_clf.reading.driver import read_plans

    return read_plans(clf.plans_, as_records(texts), get_engine(clf.model, clf.engine_options), batch_size=256,
                      progress=True)


def read(clf: Any, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Class logprobs (n, K) and label mass (n,) of ``texts`` through ``clf``'s plan."""
    reads = read_plans_of(clf, texts)[0]
    return reads.class_logprobs, reads.label_mass()


def collect(name: str, prompt: str, draws: int, n_fit: int) -> Path:
    """Reads every text one (dataset, prompt) needs; saves them to the cache."""
    from llm_label_clf import LLMLabelClassifier
    from llm_label_clf.fitting.calibration import CONTENT_FREE_INPUTS

    out = CACHE / f"{name}--{prompt}--{draws}x{n_fit}.npz"
    if out.is_file():
        print(f"{out.name}: cached")
        return out
    data = frame(name)
    texts, labels = data["text"].tolist(), data["label"].to_numpy()
    parts = split(name)
    classes = sorted(set(labels.tolist()))
    clf = LLMLabelClassifier(labels=classes, **PROMPTS[prompt], low_mass="ignore", progress=False,
                             read_store=STORE).fit(texts[:8])
    pool = parts["pool"]
    if name in SMALL_POOLS:  # many reads per text: the draws share a smaller pool
        pool = np.sort(np.random.default_rng(SPLIT_SEED).choice(pool, SMALL_POOLS[name], replace=False))
    draw_rows_ = np.stack([draw_rows(name, pool, n_fit, d) for d in range(draws)])
    fit_rows = np.unique(draw_rows_)
    started = time.time()
    test_lp, test_mass = read(clf, [texts[i] for i in parts["design"]])
    fit_lp, fit_mass = read(clf, [texts[i] for i in fit_rows])
    cf_lp, _ = read(clf, list(CONTENT_FREE_INPUTS))
    domain = [domain_texts([texts[i] for i in rows], N_DOMAIN, seed=d) for d, rows in enumerate(draw_rows_)]
    dc_lp, _ = read(clf, [t for block in domain for t in block])
    seconds = time.time() - started
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        out, classes=np.array(classes, dtype=object), verbalizers=np.array([v[0] for v in clf.verbalizers_]),
        label_mode=clf.label_mode_, test_rows=parts["design"], test_y=labels[parts["design"]],
        test_lp=test_lp, test_mass=test_mass, fit_rows=fit_rows, fit_y=labels[fit_rows], fit_lp=fit_lp,
        fit_mass=fit_mass, draw_rows=draw_rows_, cf_lp=cf_lp,
        dc_lp=dc_lp.reshape(draws, N_DOMAIN, -1), seconds=seconds,
    )
    print(f"{out.name}: {len(parts['design']) + len(fit_rows) + 3 + draws * N_DOMAIN} texts in {seconds:.0f} s")
    return out


#: Multi-label sets (bench/public_sets.py): name -> (file, test split, pool split).
MULTILABEL: dict[str, tuple[str, str, str]] = {
    "reuters": ("reuters.csv", "test", "train"),
    "semeval_ec": ("semeval_ec.csv", "test", "train"),
}


def collect_multilabel(name: str, draws: int, n_fit: int) -> Path:
    """A multi-label set's yes/no reads under the default multi-label prompt,
    uncalibrated: 300 test texts drawn from its test split, the fit texts of
    ``draws`` random draws from its training split and each draw's
    domain-context inputs; saved to the cache."""
    import pandas as pd

    from llm_label_clf import LLMLabelClassifier

    out = CACHE / f"{name}--multilabel--{draws}x{n_fit}.npz"
    if out.is_file():
        print(f"{out.name}: cached")
        collect_choice(name, out)
        return out
    file, test_split, pool_split = MULTILABEL[name]
    folder = Path(os.environ.get("LLM_LABEL_CLF_PUBLIC_SETS", Path.home() / ".cache/llm_label_clf/datasets"))
    data = pd.read_csv(folder / file, keep_default_na=False)
    sets = [frozenset(s.split("|")) - {""} for s in data["labels"]]
    names = sorted(set().union(*sets))
    y = pd.DataFrame([[int(n in s) for n in names] for s in sets], columns=names)
    rng = np.random.default_rng(SPLIT_SEED)
    test = np.sort(rng.choice(np.flatnonzero(data["split"] == test_split), N_TEST, replace=False))
    pool = np.flatnonzero(data["split"] == pool_split)
    rows = np.stack([draw_rows(name, pool, n_fit, d, kind="multilabel") for d in range(draws)])
    fit_rows = np.unique(rows)
    texts = data["text"].tolist()
    clf = LLMLabelClassifier(calibration=None, low_mass="ignore", progress=False, read_store=STORE)
    clf.fit(texts[:8], y.iloc[:8])
    started = time.time()
    parts = {}
    for part, which in (("test", test), ("fit", fit_rows)):
        reads = read_plans_of(clf, [texts[i] for i in which])
        parts[f"{part}_lp"] = np.stack([r.class_logprobs for r in reads], axis=1)  # (n, labels, [no, yes])
        parts[f"{part}_mass"] = np.stack([r.label_mass() for r in reads], axis=1)
        parts[f"{part}_y"] = y.to_numpy()[which]
    domain = [t for d, r in enumerate(rows) for t in domain_texts([texts[i] for i in r], N_DOMAIN, seed=d)]
    reads = read_plans_of(clf, domain)
    parts["dc_lp"] = np.stack([r.class_logprobs for r in reads], axis=1).reshape(draws, N_DOMAIN, len(names), 2)
    seconds = time.time() - started
    np.savez_compressed(out, names=np.array(names), test_rows=test, fit_rows=fit_rows, draw_rows=rows,
                        seconds=seconds, **parts)
    print(f"{out.name}: {len(test) + len(fit_rows)} texts x {len(names)} labels in {seconds:.0f} s")
    collect_choice(name, out)
    return out


def collect_choice(name: str, yes_no: Path) -> Path:
    """The same texts' choice read (every label listed, the default
    single-label prompt, uncalibrated): the labels' log-probabilities,
    softmaxed over the labels, beside ``yes_no``'s file."""
    import pandas as pd

    from llm_label_clf import LLMLabelClassifier

    out = yes_no.with_name(yes_no.name.replace("--multilabel--", "--choice--"))
    if out.is_file():
        return out
    with np.load(yes_no, allow_pickle=True) as saved:
        names, test, fit_rows = [str(n) for n in saved["names"]], saved["test_rows"], saved["fit_rows"]
    folder = Path(os.environ.get("LLM_LABEL_CLF_PUBLIC_SETS", Path.home() / ".cache/llm_label_clf/datasets"))
    texts = pd.read_csv(folder / MULTILABEL[name][0], keep_default_na=False)["text"].tolist()
    clf = LLMLabelClassifier(labels=names, calibration=None, low_mass="ignore", progress=False, read_store=STORE)
    clf.fit(texts[:8])
    np.savez_compressed(out, test_lp=clf.predict_log_proba([texts[i] for i in test]),
                        fit_lp=clf.predict_log_proba([texts[i] for i in fit_rows]))
    print(f"{out.name}: the choice read of the same texts")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=[*SETS, *MULTILABEL])
    parser.add_argument("--prompts", nargs="+", default=list(PROMPTS), choices=list(PROMPTS))
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--fit", type=int, default=64)
    args = parser.parse_args()
    for name in args.sets:
        if name in MULTILABEL:
            collect_multilabel(name, args.draws, args.fit)
            continue
        for prompt in args.prompts:
            collect(name, prompt, args.draws, args.fit)


if __name__ == "__main__":
    main()

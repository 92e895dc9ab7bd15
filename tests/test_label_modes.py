"""Label modes on the real engine: whole multi-token labels scored exactly
(checked against a transformers fp32 forward pass), first-token reads, options
listed in the prompt, length normalisation, and label sets larger than vLLM's
128 ids a request."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.special import log_softmax, softmax

from helpers import hf_logprob_rows, make_classifier, read_label_logprobs
from llm_label_clf.reading.cache import ReadCache
from llm_label_clf.reading.label_trie import LabelTrie

AGNEWS_PROMPT = "Article: {text}\nTopic:"
N_TEXTS = 8
#: fp32 engine vs transformers fp32, summed over a label's tokens: each token
#: differs by at most ~2.4e-5 nats (test_label_reads), so a 3-token label by < 1e-4.
FP32_TOLERANCE = 2e-4


@pytest.fixture(scope="module")
def agnews(datasets_dir):
    frame = pd.read_csv(datasets_dir / "agnews_test.csv")
    # one of each class first, so that fit sees every class
    firsts = frame.groupby("label").head(2).head(N_TEXTS)
    return firsts["text"].tolist(), firsts["label"].to_numpy()


def in_context_tokens(tokenizer, prompt: str, label: str) -> list[int]:
    ids = tokenizer.encode(prompt)
    full = tokenizer.encode(prompt + label)
    assert full[: len(ids)] == ids
    return full[len(ids) :]


@pytest.fixture(scope="module")
def reference(agnews, hf_model_fp32):
    """Per text, per class (sorted), log P(label tokens | prompt) from one
    transformers fp32 forward pass over prompt + label, and the label lengths."""
    X, _ = agnews
    tokenizer = hf_model_fp32.tokenizer
    classes = sorted(set(agnews[1]))
    rows, lengths = [], None
    for text in X:
        prompt = AGNEWS_PROMPT.format(text=text)
        ids = tokenizer.encode(prompt)
        row, lens = [], []
        for label in classes:
            tokens = in_context_tokens(tokenizer, prompt, " " + label)
            lp = hf_logprob_rows(hf_model_fp32, ids + tokens)
            row.append(sum(float(lp[len(ids) - 1 + j, t]) for j, t in enumerate(tokens)))
            lens.append(len(tokens))
        rows.append(row)
        lengths = lens
    return np.array(rows), np.array(lengths, dtype=float), classes


def test_trie_reads_each_distinct_prefix_once():
    trie = LabelTrie.build([(1, 2, 3), (1, 2, 4), (5,), (1, 6)])
    assert [(r.prefix, r.next_ids) for r in trie.reads] == [((), (1, 5)), ((1,), (2, 6)), ((1, 2), (3, 4))]
    assert trie.levels == [[0], [1], [2]]
    assert trie.max_prefix_len == 2
    columns = np.array([[-1.0, -2.0, -0.5, -3.0, -0.25, -4.0]])
    np.testing.assert_allclose(trie.sequence_logprobs(columns), [[-1.75, -5.5, -2.0, -4.0]])
    with pytest.raises(ValueError, match="label sequence 1 is empty"):
        LabelTrie.build([(1,), ()])


def test_full_sequence_equals_transformers_fp32(fp32_engine, agnews, reference):
    X, y = agnews
    want, _, classes = reference
    clf = make_classifier(prompt=AGNEWS_PROMPT, engine_options={"dtype": "float32"}).fit(X, y)
    assert clf.label_mode_ == "full_sequence"  # " Sci/Tech" is three tokens
    assert list(clf.classes_) == classes
    tokenizer = fp32_engine.tokenizer
    prompt0 = AGNEWS_PROMPT.format(text=X[0])
    assert clf.label_sequences_ == [[tuple(in_context_tokens(tokenizer, prompt0, " " + c))] for c in classes]
    assert max(len(s[0]) for s in clf.label_sequences_) > 1
    got = clf.predict_log_proba(X)
    diff = np.max(np.abs(got - log_softmax(want, axis=1)))
    print(f"full_sequence fp32 engine vs transformers fp32: max abs diff {diff:.3g} nats")
    assert diff < FP32_TOLERANCE
    # the label mass is the labels' first tokens' probability: at least the
    # whole labels' (each label continues one of those first tokens), at most 1
    mass = clf.diagnose(X)["label_mass"].to_numpy()
    assert np.all(mass >= np.exp(want).sum(axis=1) * (1 - 1e-3)) and np.all(mass <= 1 + 1e-6)


@pytest.mark.parametrize("norm", ["token", "char"])
def test_length_norm_divides_each_label_logprob(fp32_engine, agnews, reference, norm):
    X, y = agnews
    want, lengths, classes = reference
    if norm == "char":
        lengths = np.array([len(c) for c in classes], dtype=float)
    clf = make_classifier(prompt=AGNEWS_PROMPT, engine_options={"dtype": "float32"}, length_norm=norm).fit(X, y)
    got = clf.predict_proba(X)
    np.testing.assert_allclose(got, softmax(want / lengths, axis=1), atol=1e-4)
    plain = softmax(want, axis=1)
    assert np.max(np.abs(got - plain)) > 1e-3  # normalising changed something


def test_first_token_mode_reads_only_the_first_token(engine, agnews):
    X, y = agnews
    clf = make_classifier(prompt=AGNEWS_PROMPT, label_mode="first_token").fit(X, y)
    assert clf.label_mode_ == "first_token"
    firsts = [s[0][0] for s in clf.label_sequences_]
    assert [ids for ids in clf.label_token_ids_] == [[t] for t in firsts]
    prompts = [engine.tokenizer.encode(AGNEWS_PROMPT.format(text=t)) for t in X]
    expected = softmax(np.array(read_label_logprobs(engine, prompts, firsts)), axis=1)
    # float32 reads of prompts cached by other reads (AMX machines: 4.4e-7 seen)
    np.testing.assert_allclose(clf.predict_proba(X), expected, rtol=0, atol=1e-5)


def test_auto_uses_first_token_when_every_label_is_one_token(engine, sst2_all):
    X, y = sst2_all[0][:12], sst2_all[1][:12]
    auto = make_classifier().fit(X, y)
    assert auto.label_mode_ == "first_token"
    full = make_classifier(label_mode="full_sequence").fit(X, y)
    assert full.label_mode_ == "full_sequence"
    np.testing.assert_allclose(auto.predict_proba(X), full.predict_proba(X), atol=1e-12)


def test_shared_first_token_needs_full_sequence(engine, agnews):
    X, _ = agnews
    y = np.array(["Sci/Tech", "Sci-Fi"] * (len(X) // 2))
    with pytest.raises(ValueError, match=r"class 'Sci-Fi' and label ' Sci/Tech' .* same token ' Sci'.*full_sequence"):
        make_classifier(prompt=AGNEWS_PROMPT, label_mode="first_token").fit(X, y)
    clf = make_classifier(prompt=AGNEWS_PROMPT, low_mass="ignore").fit(X, y)
    assert clf.label_mode_ == "full_sequence"
    assert clf.label_token_ids_[0] == clf.label_token_ids_[1]  # same first token, told apart later
    proba = clf.predict_proba(X)
    assert proba.shape == (len(X), 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)


def test_options_mode_lists_lettered_options_and_reads_the_letters(engine, agnews):
    X, y = agnews
    clf = make_classifier(prompt=AGNEWS_PROMPT, label_mode="options").fit(X, y)
    assert clf.label_mode_ == "options"
    assert clf.options_ == ["A", "B", "C", "D"]
    assert clf.verbalizers_ == [[" A"], [" B"], [" C"], [" D"]]
    listing = "\n".join(f"{code}. {c}" for code, c in zip("ABCD", clf.classes_, strict=True))
    tok = engine.tokenizer
    prompts = [tok.encode(f"Options:\n{listing}\nArticle: {t}\nTopic:") for t in X]
    letters = [in_context_tokens(tok, "Topic:", f" {c}")[0] for c in "ABCD"]
    expected = softmax(np.array(read_label_logprobs(engine, prompts, letters)), axis=1)
    np.testing.assert_allclose(clf.predict_proba(X), expected, atol=1e-9)


def test_options_field_places_the_list(engine, agnews):
    X, y = agnews
    prompt = "Choose one of:\n{options}\nArticle: {text}\nAnswer:"
    clf = make_classifier(prompt=prompt, label_mode="options").fit(X, y)
    listing = "\n".join(f"{code}. {c}" for code, c in zip("ABCD", clf.classes_, strict=True))
    tok = engine.tokenizer
    prompts = [tok.encode(prompt.replace("{options}", listing).replace("{text}", t)) for t in X[:2]]
    letters = [t[0] for seqs in clf.label_sequences_ for t in seqs]
    expected = softmax(np.array(read_label_logprobs(engine, prompts, letters)), axis=1)
    np.testing.assert_allclose(clf.predict_proba(X[:2]), expected, atol=1e-9)
    with pytest.raises(ValueError, match=r"\{options\} is filled only with label_mode='options'"):
        make_classifier(prompt=prompt).fit(X, y)


def test_options_beyond_26_classes_are_numbered(engine, datasets_dir):
    frame = pd.read_csv(datasets_dir / "banking77_test.csv").groupby("label").head(1)
    X, y = frame["text"].tolist(), frame["label"].to_numpy()
    clf = make_classifier(prompt="Query: {text}\nIntent:", label_mode="options", low_mass="ignore").fit(X, y)
    assert len(clf.classes_) == 77
    assert clf.options_[:2] == ["01", "02"] and clf.options_[-1] == "77"
    lengths = {len(seqs[0]) for seqs in clf.label_sequences_}
    assert len(lengths) == 1  # equal-width codes: none is a prefix of another
    proba = clf.predict_proba(X[:3])
    assert proba.shape == (3, 77)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-9)


def test_more_label_tokens_than_one_request_allows(engine, sst2_all):
    """vLLM reads at most 128 ids a request: 130 classes are read in two groups
    over the same prompt, nothing truncated."""
    X = sst2_all[0][:130]
    pieces = (engine.tokenizer.decode([t]) for t in range(1000, 4000))
    words = sorted({p[1:] for p in pieces if p.startswith(" ") and p[1:].isalpha() and len(p) > 4})
    y = np.array(words[:130])
    clf = make_classifier(prompt="Text: {text}\nWord:", low_mass="ignore").fit(X, y)
    assert clf.label_mode_ == "first_token"
    ids = [first[0] for first in clf.label_token_ids_]
    assert len(set(ids)) == 130
    tok = engine.tokenizer
    prompts = [tok.encode(f"Text: {t}\nWord:") for t in X[:3]]
    parts = [np.array(read_label_logprobs(engine, prompts, ids[i : i + 100])) for i in (0, 100)]
    expected = softmax(np.concatenate(parts, axis=1), axis=1)
    np.testing.assert_allclose(clf.predict_proba(X[:3]), expected, atol=1e-9)


def test_pruned_read_keeps_the_top_labels_exact(engine, datasets_dir):
    """prune_margin reads only the label prefixes within the margin of the best
    label: the predictions equal the exact read's, and so do the log-odds
    between any two labels within the margin of the top one (both read to
    their end); the rest are approximate but still a distribution."""
    frame = pd.read_csv(datasets_dir / "banking77_test.csv").groupby("label").head(1)
    X, y = frame["text"].tolist(), frame["label"].to_numpy()
    params = {"prompt": "Query: {text}\nIntent:", "label_mode": "full_sequence", "low_mass": "ignore"}
    exact = make_classifier(**params).fit(X, y)
    texts = X[:2]  # 141 reads a text read exactly
    margin = 3.0
    pruned = make_classifier(prune_margin=margin, **params).fit(X, y)
    assert pruned.plans_[0].prune_margin == margin and len(pruned.plans_[0].trie.reads) > 100
    with ReadCache().active():  # predict is arithmetic on the reads predict_log_proba made (a pruned read is keyed apart)
        want = exact.predict_log_proba(texts)
        got = pruned.predict_log_proba(texts)
        np.testing.assert_array_equal(pruned.predict(texts), exact.predict(texts))
    np.testing.assert_allclose(np.exp(got).sum(axis=1), 1.0, atol=1e-9)
    top = want.argmax(axis=1)
    for i in range(len(texts)):
        near = np.flatnonzero(want[i] >= want[i, top[i]] - margin)
        assert len(near) >= 1
        np.testing.assert_allclose(got[i, near] - got[i, top[i]], want[i, near] - want[i, top[i]], atol=1e-4)
    assert np.abs(got - want).max() > 1e-3  # something was approximated: the read was pruned


@pytest.mark.parametrize("margin", [-1.0, float("inf"), "3", True])
def test_prune_margin_must_be_a_finite_number_of_nats(margin, agnews):
    with pytest.raises(ValueError, match=r"prune_margin=.* must be None \(read every label prefix\)"):
        make_classifier(prune_margin=margin).fit(*agnews)


# --- label_mode="constrained": reads only where the labels branch -------------------------------

#: AG News classes with aliases, so that labels branch after a shared first
#: token (" World news" / " World affairs"), run on without a branch (" Sci" "/"
#: "Tech") and combine as aliases (logsumexp, as full_sequence does).
CONSTRAINED_LABELS = {
    "Business": "Business",
    "Sci/Tech": ["Sci/Tech", "Science"],
    "Sports": ["Sports", "Sport"],
    "World": ["World news", "World affairs"],
}


def test_constrained_trie_reads_the_root_and_branches_only():
    sequences = [(1, 2, 3), (1, 2, 4), (5,), (1, 6, 7), (8, 9, 10)]
    trie = LabelTrie.build(sequences, constrained=True)
    # (1, 6), (8,) and (8, 9) have one continuation each: not read
    assert [(r.prefix, r.next_ids) for r in trie.reads] == [((), (1, 5, 8)), ((1,), (2, 6)), ((1, 2), (3, 4))]
    assert trie.mode_key == ("constrained",) and LabelTrie.build(sequences).mode_key == ()
    columns = np.log(np.array([[0.2, 0.1, 0.1, 0.3, 0.1, 0.5, 0.25]]))  # raw full-vocabulary reads
    root = np.array([0.2, 0.1, 0.1]) / 0.4
    branch1, branch2 = np.array([0.3, 0.1]) / 0.4, np.array([0.5, 0.25]) / 0.75
    want = [root[0] * branch1[0] * branch2[0], root[0] * branch1[0] * branch2[1], root[1],
            root[0] * branch1[1], root[2]]
    np.testing.assert_allclose(np.exp(trie.sequence_logprobs(columns)), [want], rtol=1e-12)
    np.testing.assert_allclose(np.exp(trie.sequence_logprobs(columns)).sum(), 1.0, rtol=1e-12)


def _fake_reads(seed: int):
    """An async stand-in for one trie read: reproducible logprobs per (prompt, prefix, token)."""
    from llm_label_clf.reading.batches import LabelScores

    async def read(engine, prompts, label_ids, *, offset=0):
        rows = []
        for p in prompts:
            rng = np.random.default_rng(abs(hash((seed, tuple(p)))) % 2**32)
            vocab = rng.normal(scale=3.0, size=64)
            rows.append((vocab - np.log(np.exp(vocab).sum()))[list(label_ids)])
        return LabelScores(np.array(rows), np.zeros(len(prompts), dtype=np.int64))

    return read


@pytest.mark.parametrize("margin", [0.0, 2.0])
def test_pruned_constrained_search_keeps_the_argmax(monkeypatch, margin):
    """On random tries and random reads, the pruned constrained read's argmax
    equals the exact constrained read's, labels within the margin of the top
    are exact, and it reads fewer prefixes (arithmetic on fake reads)."""
    from llm_label_clf.engines.loop import run_sync
    from llm_label_clf.reading import batches, pruned

    saved = 0
    for seed in range(20):
        monkeypatch.setattr(batches, "read_label_logprobs", _fake_reads(seed))
        monkeypatch.setattr(pruned, "read_label_logprobs", _fake_reads(seed))
        rng = np.random.default_rng(seed)
        sequences = {tuple(int(t) for t in rng.integers(1, 6, size=rng.integers(1, 5))) for _ in range(30)}
        sequences = sorted(s for s in sequences if not any(o != s and o[: len(s)] == s for o in sequences))
        trie = LabelTrie.build(sequences, constrained=True)
        prompts = [[100 + seed, k] for k in range(8)]
        exact = run_sync(batches.read_sequence_logprobs(None, prompts, trie)).logprobs
        got = run_sync(pruned.read_sequence_logprobs_pruned(None, prompts, trie, margin))
        np.testing.assert_array_equal(got.scores.logprobs.argmax(axis=1), exact.argmax(axis=1))
        np.testing.assert_allclose(np.exp(exact).sum(axis=1), 1.0, atol=1e-12)
        for i in range(len(prompts)):
            near = exact[i] >= exact[i].max() - margin
            np.testing.assert_allclose(got.scores.logprobs[i, near], exact[i, near], atol=1e-12)
        saved += len(trie.reads) * len(prompts) - int(got.reads_per_prompt.sum())
    assert saved > 0


@pytest.fixture(scope="module")
def constrained_reference(agnews, hf_model_fp32):
    """Per text, per class (sorted): the constrained log-probability from
    transformers fp32 forward passes over prompt + label, each branching
    prefix's next-token logprobs renormalised over the label tokens allowed
    there (aliases: logsumexp); and the number of branching prefixes."""
    from scipy.special import logsumexp

    X, _ = agnews
    tokenizer = hf_model_fp32.tokenizer
    classes = sorted(CONSTRAINED_LABELS)
    rows, n_branching = [], 0
    for text in X:
        prompt = AGNEWS_PROMPT.format(text=text)
        ids = tokenizer.encode(prompt)
        labels = {c: [in_context_tokens(tokenizer, prompt, " " + a) for a in np.atleast_1d(CONSTRAINED_LABELS[c])]
                  for c in classes}
        children: dict[tuple[int, ...], set[int]] = {}
        vocab_rows: dict[tuple[int, ...], np.ndarray] = {}
        for seqs in labels.values():
            for seq in seqs:
                lp = hf_logprob_rows(hf_model_fp32, ids + seq).numpy()
                for d, token in enumerate(seq):
                    children.setdefault(tuple(seq[:d]), set()).add(token)
                    vocab_rows[tuple(seq[:d])] = lp[len(ids) - 1 + d]
        branching = {p: sorted(c) for p, c in children.items() if len(c) > 1}
        n_branching = len(branching)

        def constrained(seq, branching=branching, vocab_rows=vocab_rows):
            total = 0.0
            for d, token in enumerate(seq):
                allowed = branching.get(tuple(seq[:d]))
                if allowed is not None:
                    total += vocab_rows[tuple(seq[:d])][token] - logsumexp(vocab_rows[tuple(seq[:d])][allowed])
            return total

        rows.append([logsumexp([constrained(s) for s in labels[c]]) for c in classes])
    return np.array(rows), n_branching, classes


def test_constrained_equals_transformers_fp32_renormalised_at_branches(fp32_engine, agnews, constrained_reference):
    X, y = agnews
    want, n_branching, classes = constrained_reference
    clf = make_classifier(prompt=AGNEWS_PROMPT, engine_options={"dtype": "float32"}, label_mode="constrained",
                          labels=CONSTRAINED_LABELS, low_mass="ignore").fit(X, y)
    assert clf.label_mode_ == "constrained" and list(clf.classes_) == classes
    trie = clf.plans_[0].trie
    assert n_branching == 2 and len(trie.reads) == n_branching  # the root and " World": " Sci" "/" is not read
    full = make_classifier(prompt=AGNEWS_PROMPT, label_mode="full_sequence", labels=CONSTRAINED_LABELS).fit(X, y)
    assert len(full.plans_[0].trie.reads) == 4
    got = clf.transform(X)  # the constrained log-probabilities, before any softmax
    np.testing.assert_allclose(np.exp(got).sum(axis=1), 1.0, atol=1e-9)
    diff = np.max(np.abs(got - want))
    print(f"constrained fp32 engine vs transformers fp32: max abs diff {diff:.3g} nats")
    assert diff < FP32_TOLERANCE
    # a second read of the same prompts, now cached: float32 reads differ by ~1e-5 with the cache state
    np.testing.assert_allclose(clf.predict_log_proba(X), got, atol=1e-4)


def test_constrained_refuses_a_label_that_starts_another(engine, agnews):
    X, y = agnews
    labels = {**CONSTRAINED_LABELS, "World": ["World", "World news"]}
    with pytest.raises(ValueError, match=r"label ' World' of class 'World' is the start of label ' World news'"):
        make_classifier(prompt=AGNEWS_PROMPT, label_mode="constrained", labels=labels).fit(X, y)


def test_pruned_constrained_predict_equals_unpruned(engine, datasets_dir):
    """Banking77 (77 intents written as words): the constrained read makes far
    fewer reads than full_sequence's 141, and prune_margin keeps predict."""
    frame = pd.read_csv(datasets_dir / "banking77_test.csv").groupby("label").head(1)
    X, y = frame["text"].tolist(), frame["label"].to_numpy()
    params = {"prompt": "Query: {text}\nIntent:", "label_mode": "constrained", "low_mass": "ignore"}
    exact = make_classifier(**params).fit(X, y)
    assert len(exact.plans_[0].trie.reads) <= 20
    texts = X[:4]
    want = exact.predict_log_proba(texts)
    pruned = make_classifier(prune_margin=2.0, **params).fit(X, y)
    got = pruned.predict_log_proba(texts)
    np.testing.assert_array_equal(pruned.predict(texts), exact.predict(texts))
    top = want.argmax(axis=1)
    for i in range(len(texts)):
        near = np.flatnonzero(want[i] >= want[i, top[i]] - 2.0)
        np.testing.assert_allclose(got[i, near] - got[i, top[i]], want[i, near] - want[i, top[i]], atol=1e-4)


@pytest.mark.filterwarnings("ignore:LLMLabelClassifierCV. held_out_score_ is NaN")  # 8 texts: 2 folds
def test_constrained_is_a_cv_candidate(engine, agnews):
    from llm_label_clf import LLMLabelClassifierCV

    X, y = agnews
    base = make_classifier(prompt=AGNEWS_PROMPT, low_mass="ignore")
    search = LLMLabelClassifierCV(base, few_shots=(0,), calibrations=(None,), class_weights=(None,), stack=False,
                                  label_modes=["full_sequence", "constrained"], cv=2, small_data="search").fit(X, y)
    modes = [p["label_mode"] for p in search.cv_results_["params"]]
    assert set(modes) == {"constrained", "full_sequence"}
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    assert search.predict_proba(X[:2]).shape == (2, 4)

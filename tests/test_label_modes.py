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
    texts = X[:4]
    want = exact.predict_log_proba(texts)
    margin = 3.0
    pruned = make_classifier(prune_margin=margin, **params).fit(X, y)
    assert pruned.plans_[0].prune_margin == margin and len(pruned.plans_[0].trie.reads) > 100
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

"""Label mapping against the built-in model's real tokenizer (no engine):
property-based checks that any label string either maps to the exact tokens it
adds after the prompt or gets an error naming its class, and that labels which
become the same tokens after normalisation are refused."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_label_clf.reading.label_tokens import distinct_first_tokens, in_context_verbalizer, label_token_sequences
from llm_label_clf.reading.label_trie import LabelTrie

PROMPTS = ["Review: a fine film\nSentiment:", "Review: dull {braces} and \u00e9t\u00e9\nSentiment:"]


@pytest.fixture(scope="module")
def tokenizer(model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


labels_strategy = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FFF), min_size=1, max_size=12
).filter(lambda s: s.strip())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(labels=st.lists(labels_strategy, min_size=1, max_size=4, unique=True))
def test_any_labels_map_to_their_tokens_in_context_or_name_the_class(tokenizer, labels):
    verbalizers = [[in_context_verbalizer(label, "Sentiment:", chat=False)] for label in labels]
    try:
        sequences = label_token_sequences(tokenizer, PROMPTS, verbalizers, labels)
    except ValueError as exc:
        assert any(repr(label) in str(exc) for label in labels), str(exc)
        return
    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt)
        for (seq,), (verbalizer,) in zip(sequences, verbalizers, strict=True):
            assert list(seq) == tokenizer.encode(prompt + verbalizer)[len(ids) :]
    assert len({seqs[0] for seqs in sequences}) == len(labels)  # distinct, or it raised
    trie = LabelTrie.build([seqs[0] for seqs in sequences])
    assert sum(len(r.next_ids) for r in trie.reads) == trie.n_columns
    assert all(len(path) == len(seq) for path, seq in zip(trie.paths, trie.sequences, strict=True))


def test_labels_that_normalise_to_the_same_tokens_are_refused(tokenizer):
    names = ["positive", " positive"]
    verbalizers = [[in_context_verbalizer(n, "Sentiment:", chat=False)] for n in names]
    assert verbalizers == [[" positive"], [" positive"]]
    with pytest.raises(ValueError, match=r"class 'positive' and label ' positive' of class ' positive' are the same"):
        label_token_sequences(tokenizer, PROMPTS, verbalizers, names)


def test_shared_first_tokens_are_named(tokenizer):
    names = ["Sci/Tech", "Sci-Fi"]
    verbalizers = [[" Sci/Tech"], [" Sci-Fi"]]
    sequences = label_token_sequences(tokenizer, PROMPTS, verbalizers, names)
    assert sequences[0][0][0] == sequences[1][0][0]
    with pytest.raises(ValueError, match=r"start with the same token ' Sci'"):
        distinct_first_tokens(tokenizer, sequences, verbalizers, names)


def test_a_label_that_merges_with_the_prompt_end_is_refused(tokenizer):
    with pytest.raises(ValueError, match=r"label 'ment' of class 'x' merges with the end of the prompt"):
        label_token_sequences(tokenizer, ["Review: ok\nSenti"], [["ment"]], ["x"])

"""LLMLabelClassifier on the real engine and built-in model: probabilities,
label tokens in context, inputs, diagnostics and the low-mass policy."""

from __future__ import annotations

import asyncio
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp, softmax

from helpers import SST2_TEMPLATE, make_classifier, read_label_logprobs
from llm_label_clf import (
    InvalidInputError,
    LLMLabelClassifier,
    LowLabelMassWarning,
    NotFittedError,
)
from llm_label_clf.reading.cache import ReadCache

N_TEXTS = 24


@pytest.fixture(scope="module")
def sst2(sst2_all):
    X, y = sst2_all
    return X[:N_TEXTS], y[:N_TEXTS]


def make(**params) -> LLMLabelClassifier:
    return make_classifier(**params)


@pytest.fixture(scope="module")
def fitted(engine, sst2):
    X, y = sst2
    return make().fit(X, y)


def raw_logprobs(engine, texts, template, label_ids, chat=False):
    tok = engine.tokenizer
    prompts = [tok.encode(template.format(text=t)) for t in texts]
    return np.array(read_label_logprobs(engine, prompts, label_ids))


def test_probabilities_are_softmax_of_label_logprobs(engine, sst2, fitted):
    X, _ = sst2
    proba = fitted.predict_proba(X)
    assert proba.shape == (len(X), 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
    assert list(fitted.classes_) == ["negative", "positive"]
    assert fitted.verbalizers_ == [[" negative"], [" positive"]]
    ids = [engine.tokenizer.encode(SST2_TEMPLATE.format(text=X[0]) + v)[-1] for v in (" negative", " positive")]
    assert [i[0] for i in fitted.label_token_ids_] == ids
    expected = softmax(raw_logprobs(engine, X, SST2_TEMPLATE, ids), axis=1)
    np.testing.assert_allclose(proba, expected, atol=1e-9)


def test_predict_and_friends_agree(sst2, fitted):
    X, y = sst2
    with ReadCache().active():  # one read of each text: the methods are arithmetic on the same reads
        proba = fitted.predict_proba(X)
        np.testing.assert_allclose(np.exp(fitted.predict_log_proba(X)), proba, atol=1e-12)
        np.testing.assert_array_equal(fitted.predict(X), fitted.classes_[proba.argmax(axis=1)])
        np.testing.assert_allclose(fitted.decision_function(X), np.log(proba[:, 1] / proba[:, 0]), atol=1e-9)
        assert fitted.score(X, y) == pytest.approx(np.mean(fitted.predict(X) == y))


def test_column_order_follows_classes(engine, sst2, fitted):
    """Integer classes with verbalizers give the same columns as the names."""
    X, y = sst2
    y_int = np.where(y == "positive", 1, 0)
    clf = make(labels={0: "negative", 1: "positive"}).fit(X, y_int)
    np.testing.assert_array_equal(clf.classes_, [0, 1])
    np.testing.assert_allclose(clf.predict_proba(X), fitted.predict_proba(X), atol=1e-12)
    reversed_y = np.where(y == "positive", "a_pos", "b_neg")
    clf = make(labels={"a_pos": "positive", "b_neg": "negative"}).fit(X, reversed_y)
    np.testing.assert_allclose(clf.predict_proba(X), fitted.predict_proba(X)[:, ::-1], atol=1e-12)


def test_aliases_are_summed_into_their_class(engine, sst2):
    X, y = sst2
    labels = {"positive": ["positive", "good"], "negative": ["negative", "bad"]}
    clf = make(labels=labels).fit(X, y)
    assert clf.verbalizers_ == [[" negative", " bad"], [" positive", " good"]]
    flat = [t for ids in clf.label_token_ids_ for t in ids]
    lp = raw_logprobs(engine, X, SST2_TEMPLATE, flat)
    class_lp = np.stack([logsumexp(lp[:, :2], axis=1), logsumexp(lp[:, 2:], axis=1)], axis=1)
    np.testing.assert_allclose(clf.predict_proba(X), softmax(class_lp, axis=1), atol=1e-9)


def test_chat_mode_reads_the_first_reply_token(engine, sst2):
    X, y = sst2
    clf = make(chat="auto", prompt="{text}\nIs this review positive or negative?", instructions="Answer in one word.")
    clf.fit(X, y)
    assert clf.chat_ is True
    assert clf.verbalizers_ == [["negative"], ["positive"]]
    rendered = engine.tokenizer.apply_chat_template(
        [{"role": "system", "content": "Answer in one word."},
         {"role": "user", "content": f"{X[0]}\nIs this review positive or negative?"}],
        add_generation_prompt=True, tokenize=False,
    )
    ids = engine.tokenizer.encode(rendered, add_special_tokens=False)
    assert [i[0] for i in clf.label_token_ids_] == [
        engine.tokenizer.encode(rendered + w, add_special_tokens=False)[len(ids)] for w in ("negative", "positive")
    ]
    proba = clf.predict_proba(X[:4])
    lp = np.array(read_label_logprobs(engine, [ids], [t[0] for t in clf.label_token_ids_]))
    np.testing.assert_allclose(proba[0], softmax(lp[0]), atol=1e-9)


def test_two_classes_on_one_token_is_a_clear_error(sst2):
    X, y = sst2
    with pytest.raises(ValueError, match=r"class 'negative' and .* class 'positive' are the same tokens"):
        make(labels={"negative": "good", "positive": " good"}).fit(X, y)


def test_prompt_ending_in_a_field_is_rejected(sst2):
    X, y = sst2
    with pytest.raises(ValueError, match="ends with a field"):
        make(prompt="Sentiment of: {text}").fit(X, y)


@pytest.mark.parametrize(
    "kind", ["list", "tuple", "array", "series", "column", "frame"],
)
def test_input_kinds_give_the_same_probabilities(sst2, fitted, kind):
    X, _ = sst2
    expected = fitted.predict_proba(X)
    converted = {
        "list": list(X),
        "tuple": tuple(X),
        "array": np.array(X, dtype=object),
        "series": pd.Series(X, index=range(100, 100 + len(X))),
        "column": np.array(X, dtype=object).reshape(-1, 1),
        "frame": pd.DataFrame({"text": X}),
    }[kind]
    np.testing.assert_allclose(fitted.predict_proba(converted), expected, atol=1e-12)


def test_dataframe_columns_bind_to_fields(engine, datasets_dir):
    news = pd.read_csv(datasets_dir / "agnews_test.csv")
    frame = pd.concat([news[news.label == "Sports"].iloc[:4], news[news.label != "Sports"].iloc[:4]])
    prompt = "Title: {title}\nDescription: {description}\nIs this about sports (yes or no)?"
    y = np.where(frame["label"] == "Sports", "yes", "no")
    clf = make(prompt=prompt).fit(frame[["title", "description"]], y)
    proba = clf.predict_proba(frame[["title", "description"]])
    rendered = [prompt.format(title=t, description=d) for t, d in zip(frame.title, frame.description)]
    ids = [[engine.tokenizer.encode(r + v)[-1] for v in (" no", " yes")] for r in rendered[:1]][0]
    lp = np.array(read_label_logprobs(engine, [engine.tokenizer.encode(r) for r in rendered], ids))
    np.testing.assert_allclose(proba, softmax(lp, axis=1), atol=1e-9)
    with pytest.raises(ValueError, match=r"field\(s\) \['description'\] have no input"):
        clf.predict_proba(frame[["title"]])


@pytest.mark.parametrize(
    ("prompt", "y"),
    [("Sentiment:", ["negative", "positive"]), ("Reviewed as {labels}:", ["negative", "positive"]),
     ("Is this about {label}?\nAnswer:", [["sports"], ["world"]])],
)
def test_a_prompt_without_a_field_from_x_is_refused_naming_text(engine, prompt, y):
    """Every text would get the same prompt, hence the same probabilities: refused at fit, naming
    {text}, for one output (with or without the {labels} the package fills) and for multi-label,
    whose {label} the package fills."""
    with pytest.raises(ValueError, match=r"has no \{text\} field \(nor any other filled from X\)"):
        make(prompt=prompt).fit(["a gem", "a dud"], y)


def test_order_is_preserved_and_empty_input_works(sst2, fitted):
    X, _ = sst2
    proba = fitted.predict_proba(X)
    np.testing.assert_allclose(fitted.predict_proba(X[::-1]), proba[::-1], atol=1e-12)
    assert fitted.predict_proba([]).shape == (0, 2)
    assert fitted.predict([]).shape == (0,)
    assert fitted.diagnose([]).shape[0] == 0


@pytest.mark.parametrize(
    ("bad", "match"),
    [(None, r"X item 2 is missing"), (float("nan"), r"X item 2 is missing"), (7, r"X item 2 is a int")],
)
def test_non_text_input_names_the_item(fitted, bad, match):
    with pytest.raises(InvalidInputError, match=match) as info:
        fitted.predict_proba(["fine", "also fine", bad, "fine"])
    assert info.value.items == (2,)  # the item as data, not only in the message
    assert isinstance(info.value, ValueError)


def test_series_errors_name_the_index(fitted):
    with pytest.raises(ValueError, match=r"item 1 \(index 'b'\) is missing"):
        fitted.predict_proba(pd.Series(["ok", None], index=["a", "b"]))


def test_braces_in_texts_never_break_rendering(sst2, fitted):
    texts = ["{text} {0} {{ }} {labels} {text.__class__}", "}{", "{"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LowLabelMassWarning)  # odd texts; the mass is not the point here
        proba = fitted.predict_proba(texts)
    assert proba.shape == (3, 2) and np.isfinite(proba).all()


@pytest.mark.parametrize("prompt", ["{text.__class__}\nA:", "{text[0]}\nA:", "{text!r}\nA:", "{text:>10}\nA:", "{}\nA:"])
def test_templates_cannot_reach_attributes_or_indexes(sst2, prompt):
    X, y = sst2
    with pytest.raises(ValueError, match="not allowed|empty field"):
        make(prompt=prompt).fit(X, y)


def test_diagnose_reports_mass_and_top_token(engine, sst2, fitted):
    X, _ = sst2
    frame = fitted.diagnose(X)
    assert list(frame.columns) == [
        "proba_negative", "proba_positive", "label_mass", "top_token", "top_token_is_label", "predicted",
    ]
    flat = [t for ids in fitted.label_token_ids_ for t in ids]
    lp = raw_logprobs(engine, X, SST2_TEMPLATE, flat)
    np.testing.assert_allclose(frame["label_mass"], np.exp(lp).sum(axis=1), rtol=1e-9)
    assert ((frame["label_mass"] > 0) & (frame["label_mass"] <= 1)).all()
    is_label = frame["top_token"].isin([" negative", " positive"])
    np.testing.assert_array_equal(frame["top_token_is_label"], is_label)
    np.testing.assert_allclose(frame[["proba_negative", "proba_positive"]], fitted.predict_proba(X), atol=1e-12)


def test_low_label_mass_policy(sst2):
    X, y = sst2
    with pytest.raises(ValueError, match=r"label mass below 0.99 \(item 0"):
        make(low_mass="raise", low_mass_threshold=0.99).fit(X, y).predict_proba(X)
    with pytest.warns(LowLabelMassWarning, match=r"of 24 texts have label mass below 0.99"):
        make(low_mass="warn", low_mass_threshold=0.99).fit(X, y).predict_proba(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make(low_mass="ignore", low_mass_threshold=0.99).fit(X, y).predict_proba(X)


def test_apredict_proba_matches_predict_proba(sst2, fitted):
    X, _ = sst2

    async def main():
        return await fitted.apredict_proba(X)

    np.testing.assert_allclose(asyncio.run(main()), fitted.predict_proba(X), atol=1e-12)


def test_batches_give_the_same_result(sst2, fitted):
    X, y = sst2
    small = make(batch_size=5).fit(X, y)
    np.testing.assert_allclose(small.predict_proba(X), fitted.predict_proba(X), atol=1e-12)


def test_unfitted_estimator_raises_not_fitted():
    with pytest.raises(NotFittedError):
        make().predict_proba(["text"])


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("model", ""),
        ("engine_options", ["dtype"]),
        ("labels", {"positive": ""}),
        ("labels", {"positive": []}),
        ("prompt", 3),
        ("chat", "yes"),
        ("batch_size", 0),
        ("progress", "no"),
        ("low_mass", "shout"),
        ("low_mass_threshold", 1.5),
        ("too_long", "cut"),
        ("random_state", "seed"),
    ],
)
def test_bad_parameters_name_the_parameter(sst2, param, value):
    X, y = sst2
    with pytest.raises(ValueError, match=rf"LLMLabelClassifier: {param}="):
        make(**{param: value}).fit(X, y)


def test_fit_checks_y(sst2):
    X, y = sst2
    with pytest.raises(ValueError, match="X has 24 texts but y has 23 labels"):
        make().fit(X, y[:-1])
    y_missing = y.astype(object)
    y_missing[5] = None
    with pytest.raises(ValueError, match="y item 5 is missing"):
        make().fit(X, y_missing)
    with pytest.raises(ValueError, match=r"labels has classes \['neutral'\] that are not in y"):
        make(labels={"positive": "positive", "negative": "negative", "neutral": "neutral"}).fit(X, y)
    with pytest.raises(ValueError, match=r"labels has no label for classes \['positive'\]"):
        make(labels={"negative": "negative"}).fit(X, y)
    mixed = np.array(["positive", 1] * (len(X) // 2), dtype=object)
    with pytest.raises(ValueError, match=r"y mixes label types \['int', 'str'\]"):
        make().fit(X, mixed)
    with pytest.raises(ValueError, match=r"y has shape \(24, 2, 1\); give one label per text"):
        make().fit(X, np.stack([y, y], axis=1)[:, :, None])
    with pytest.raises(ValueError, match="at least one labelled example"):
        make().fit([], [])
    assert math.isfinite(make().fit(X, y).score(X, y))

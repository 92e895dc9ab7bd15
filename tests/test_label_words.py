"""What a class is written as (``fitting.label_words``), and the checks of classes
and labels that fit runs before it asks for an engine: identifiers as words,
the warning for numbers and booleans, ``labels`` as a list, the refusal of a
single class, and ``classes_``/``predict`` in ``y``'s own dtype.

No vLLM here: fit runs on a fake engine whose tokenizer writes one token per
character, and predictions on reads made up by the test."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llm_label_clf import LabelWordsWarning, LLMLabelClassifier
from llm_label_clf.engines.handle import Engine
from llm_label_clf.fitting import label_words
from llm_label_clf.fitting.label_words import default_label_texts, is_number_like, words_of
from llm_label_clf.reading.plan import ClassReads

X = ["first text", "second text", "third text", "fourth text"]


class CharTokenizer:
    """One token per character: enough for fit to find each label's tokens."""

    chat_template = None

    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids)

    def __call__(self, texts, add_special_tokens=True):
        return {"input_ids": [self.encode(t) for t in texts]}

    def __len__(self):
        return 128


FAKE_ENGINE = Engine(model="fake", options={}, client=None, tokenizer=CharTokenizer(), max_model_len=4096)


@pytest.fixture
def fake_engine(monkeypatch):
    monkeypatch.setattr(LLMLabelClassifier, "_engine", lambda self: FAKE_ENGINE)


@pytest.fixture
def no_engine(monkeypatch):
    """Fails the test if fit asks for an engine before its error."""

    def refuse(self):
        raise AssertionError("fit asked for the engine before refusing")

    monkeypatch.setattr(LLMLabelClassifier, "_engine", refuse)


def make(**params) -> LLMLabelClassifier:
    params.setdefault("prompt", "Text: {text}\nLabel:")
    params.setdefault("calibration", None)  # these tests check labels and tokens; the default calibration reads texts
    return LLMLabelClassifier(progress=False, **params)


def _reads(picks, n_classes):
    scores = np.full((len(picks), n_classes), -6.0)
    scores[np.arange(len(picks)), picks] = -0.05
    return ClassReads(scores, scores, np.zeros(len(picks), dtype=np.int64))


def answer(clf, *picks):
    """Makes ``clf`` read, for output j, class ``picks[j][i]`` as text i's answer."""
    if isinstance(clf.classes_, list):  # several outputs
        sizes = [len(c) for c in clf.classes_]
    else:  # one output, or a multi-label read's yes/no per label
        sizes = [len(head.classes_) for head in vars(clf).get("estimators_") or [clf]]
    clf._read = lambda texts: [_reads(p[: len(texts)], k) for p, k in zip(picks, sizes)]
    return clf


# --- words_of ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("identifier", "words"),
    [
        ("card_arrival", "card arrival"),
        ("card-arrival", "card arrival"),
        ("CardArrival", "card arrival"),
        ("cardArrival", "card arrival"),
        ("ATMSupport", "ATM support"),
        ("getHTTPResponse", "get HTTP response"),
        ("AddToPlaylist", "add to playlist"),
        ("top_up_by_card_charge", "top up by card charge"),
        ("Refund_not_showing_up", "Refund not showing up"),  # snake_case pieces keep their case
        ("reverted_card_payment?", "reverted card payment?"),
        ("__label__positive", "label positive"),
        ("level_2", "level 2"),
        ("Top10Items", "Top10 items"),
        # left alone: words, phrases, numbers, codes and brands
        ("positive", "positive"),
        ("Sports", "Sports"),
        ("ATM", "ATM"),
        ("Sci/Tech", "Sci/Tech"),
        ("ENTY:animal", "ENTY:animal"),
        ("very good_ish", "very good_ish"),
        ("-1", "-1"),
        ("covid-19", "covid-19"),
        ("2020-01-31", "2020-01-31"),
        ("iPhone", "iPhone"),
        ("iOS", "iOS"),
        ("_", "_"),
        ("", ""),
    ],
)
def test_words_of(identifier, words):
    assert words_of(identifier) == words


def test_default_texts_keep_a_class_whose_words_another_class_has():
    classes = ["card arrival", "card_arrival", "card-arrival", "top_up", 7]
    assert default_label_texts(classes, "words") == ["card arrival", "card_arrival", "card-arrival", "top up", "7"]
    assert default_label_texts(classes, "as_is") == ["card arrival", "card_arrival", "card-arrival", "top_up", "7"]


def test_auto_follows_one_constant(monkeypatch):
    assert default_label_texts(["card_arrival"], "auto") == ["card arrival"]
    monkeypatch.setattr(label_words, "AUTO_LABEL_WORDS", "as_is")
    assert default_label_texts(["card_arrival"], "auto") == ["card_arrival"]
    assert default_label_texts(["card_arrival"], "words") == ["card arrival"]


@pytest.mark.parametrize("value", [0, 1.5, True, np.int64(3), np.bool_(False), np.float32(2)])
def test_numbers_and_booleans_are_number_like(value):
    assert is_number_like(value)


@pytest.mark.parametrize("value", ["0", "positive", None, ("a", 1)])
def test_strings_are_not_number_like(value):
    assert not is_number_like(value)


# --- numbers and booleans: the warning, and y's dtype -----------------------------------------


def test_int_classes_warn_with_what_is_written_and_how_to_map(fake_engine):
    with pytest.warns(LabelWordsWarning) as caught:
        clf = make().fit(X, [0, 1, 1, 0])
    message = str(caught[0].message)
    assert "the classes [0, 1] are numbers" in message
    assert "asked to write ' 0' and ' 1'" in message
    assert "labels={0: '<word for 0>', 1: '<word for 1>'}" in message  # nothing says what 0 and 1 mean
    assert "labels=['<word for 0>', '<word for 1>']" in message
    assert "label_words='as_is'" in message
    assert caught[0].filename == __file__  # points at the caller's fit, not inside the package
    assert clf.classes_.dtype == np.int64 and clf.classes_.tolist() == [0, 1]
    assert clf.verbalizers_ == [[" 0"], [" 1"]]
    pred = answer(clf, [1, 0, 0, 1]).predict(X)
    assert pred.dtype == np.int64 and pred.tolist() == [1, 0, 0, 1]


def test_bool_classes_warn_and_predict_bools(fake_engine):
    with pytest.warns(LabelWordsWarning, match=r"\[False, True\] are booleans.*labels=\{False: 'no', True: 'yes'\}"):
        clf = make().fit(X, np.array([True, False, True, False]))
    assert clf.classes_.dtype == bool and clf.verbalizers_ == [[" False"], [" True"]]
    pred = answer(clf, [1, 1, 0, 0]).predict(X)
    assert pred.dtype == bool and pred.tolist() == [True, True, False, False]


def test_options_mode_warning_names_the_listed_options(fake_engine):
    with pytest.warns(LabelWordsWarning, match=r"lists them as the options '1', '2' and '3'"):
        make(label_mode="options").fit(X, [1, 2, 3, 1])


@pytest.mark.parametrize(
    "params",
    [{"labels": {0: "negative", 1: "positive"}}, {"labels": ["negative", "positive"]}, {"label_words": "as_is"}],
)
def test_numbers_with_words_or_as_is_do_not_warn(fake_engine, params):
    clf = make(**params).fit(X, [0, 1, 1, 0])  # warnings are errors in this suite
    expected = [[" 0"], [" 1"]] if "label_words" in params else [[" negative"], [" positive"]]
    assert clf.verbalizers_ == expected
    assert answer(clf, [0, 1, 1, 1]).predict(X).tolist() == [0, 1, 1, 1]


@pytest.mark.parametrize(
    ("y", "dtype"),
    [
        (["b", "a", "b", "a"], np.dtype("<U1")),  # a list: as numpy holds it
        (np.array(["b", "a", "b", "a"], dtype=object), np.dtype(object)),
        (pd.Series(["b", "a", "b", "a"]), np.dtype(object)),
        (pd.Series([2, 1, 2, 1]), np.dtype(np.int64)),
        (pd.Series(["b", "a", "b", "a"], dtype="category"), np.dtype(object)),
        (np.array([2.0, 1.0, 2.0, 1.0]), np.dtype(np.float64)),
    ],
)
def test_classes_and_predictions_keep_the_dtype_of_y(fake_engine, y, dtype):
    clf = make(label_words="as_is").fit(X, y)
    assert clf.classes_.dtype == dtype
    pred = answer(clf, [0, 1, 0, 1]).predict(X)
    assert pred.dtype == dtype
    assert pred.tolist() == [clf.classes_[0], clf.classes_[1]] * 2


def test_several_outputs_predict_each_in_its_dtype(fake_engine):
    Y = pd.DataFrame({"stars": [1, 2, 2, 1], "topic": ["sport_news", "politics", "sport_news", "politics"]})
    with pytest.warns(LabelWordsWarning, match=r"output 'stars': the classes \[1, 2\] are numbers"):
        clf = make().fit(X, Y)
    assert [e.verbalizers_ for e in clf.estimators_] == [[[" 1"], [" 2"]], [[" politics"], [" sport news"]]]
    pred = answer(clf, [0, 1, 1, 0], [1, 0, 1, 0]).predict(X)
    assert pred.dtype == object and pred.tolist() == [[1, "sport_news"], [2, "politics"], [2, "sport_news"], [1, "politics"]]
    assert isinstance(pred[0, 0], (int, np.integer))
    assert clf.score(X, Y) == 1.0
    same = make(label_words="as_is").fit(X, Y.assign(topic=[3, 4, 3, 4]))
    assert answer(same, [0, 1, 1, 0], [0, 1, 0, 1]).predict(X).dtype == np.int64


def test_joint_read_lists_words_and_warns_about_numbers(fake_engine):
    Y = pd.DataFrame({"stars": [1, 2, 2, 1], "topic": ["card_arrival", "atm_support", "card_arrival", "card_arrival"]})
    with pytest.warns(LabelWordsWarning, match=r"output 'stars': the classes \[1, 2\] .* lists them as the options"):
        clf = make(prompt="Q: {text}", multioutput_read="joint").fit(X, Y)
    assert clf.joint_options_ == [{"A": "1", "B": "2"}, {"A": "atm support", "B": "card arrival"}]
    pred = answer(clf, [1, 0, 1, 0], [0, 1, 1, 1]).predict(X)
    assert pred.dtype == object and pred.tolist() == [[2, "atm_support"], [1, "card_arrival"], [2, "card_arrival"],
                                                      [1, "card_arrival"]]


def test_multilabel_names_are_written_as_words_in_the_question(fake_engine):
    indicator = pd.DataFrame({"card_arrival": [1, 0, 1, 0], "ATMSupport": [0, 1, 1, 0]})
    clf = make(prompt="Text: {text}\nAbout {label}?\nAnswer:").fit(X, indicator)
    assert [e.prompt for e in clf.estimators_] == ["Text: {text}\nAbout card arrival?\nAnswer:",
                                                  "Text: {text}\nAbout ATM support?\nAnswer:"]
    named = make(prompt="Text: {text}\nAbout {label}?\nAnswer:", labels=["arrival", "ATMs"])
    named.fit(X, indicator.to_numpy())
    assert [e.prompt for e in named.estimators_] == ["Text: {text}\nAbout arrival?\nAnswer:",
                                                    "Text: {text}\nAbout ATMs?\nAnswer:"]
    assert answer(clf, [1, 0, 1, 0], [0, 0, 1, 1]).predict(X).dtype == np.int64


# --- identifiers -------------------------------------------------------------------------------


def test_identifier_classes_are_written_as_words_and_predicted_as_themselves(fake_engine):
    y = ["card_arrival", "CardLinking", "atm-support", "card_arrival"]
    clf = make().fit(X, y)
    assert clf.classes_.tolist() == ["CardLinking", "atm-support", "card_arrival"]
    assert clf.verbalizers_ == [[" card linking"], [" atm support"], [" card arrival"]]
    assert answer(clf, [2, 0, 1, 2]).predict(X).tolist() == ["card_arrival", "CardLinking", "atm-support", "card_arrival"]
    assert make(label_words="as_is").fit(X, y).verbalizers_ == [[" CardLinking"], [" atm-support"], [" card_arrival"]]
    explicit = make(labels={"CardLinking": "linking", "atm-support": "ATM", "card_arrival": "arrival"}).fit(X, y)
    assert explicit.verbalizers_ == [[" linking"], [" ATM"], [" arrival"]]


# --- labels as a list ----------------------------------------------------------------------------


def test_labels_list_names_the_classes_in_classes_order(fake_engine):
    clf = make(labels=["negative", ["positive", "good"]]).fit(X, [1, 0, 1, 0])
    assert clf.verbalizers_ == [[" negative"], [" positive", " good"]]
    assert make(labels=("neg", "pos")).fit(X, ["b", "a", "b", "a"]).verbalizers_ == [[" neg"], [" pos"]]


def test_zero_shot_labels_list_makes_its_items_the_classes(fake_engine):
    clf = make(labels=["sports", "card_arrival", "politics"]).fit(X)
    assert clf.classes_.tolist() == ["card_arrival", "politics", "sports"]
    assert clf.verbalizers_ == [[" card arrival"], [" politics"], [" sports"]]
    assert answer(clf, [0, 2, 1, 0]).predict(X).tolist() == ["card_arrival", "sports", "politics", "card_arrival"]
    by_index = make(labels=dict(enumerate(["negative", "positive"]))).fit(X)
    assert by_index.classes_.dtype == np.int64 and by_index.verbalizers_ == [[" negative"], [" positive"]]


def test_labels_list_per_output(fake_engine):
    Y = pd.DataFrame({"a": [0, 1, 0, 1], "b": ["x", "y", "z", "x"]})
    clf = make(labels=[["no", "yes"], {"x": "ex", "y": "why", "z": "zed"}]).fit(X, Y)
    assert [e.verbalizers_ for e in clf.estimators_] == [[[" no"], [" yes"]], [[" ex"], [" why"], [" zed"]]]


# --- errors before any engine ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "y", "match"),
    [
        ({"labels": ["a", "b", "c"]}, [0, 1, 0, 1], r"labels is a list of 3 names but y has 2 classes \[0, 1\]"),
        ({"labels": ["a"]}, ["x", "y", "x", "y"], r"labels is a list of 1 names but y has 2 classes \['x', 'y'\]"),
        ({}, ["x", "x", "x", "x"], r"LLMLabelClassifier needs samples of at least 2 classes in the data, but the "
                                   r"data contains only one class: 'x'"),
        ({"labels": {0: "zero"}}, [0, 0, 0, 0], r"contains only one class: 0$"),
        ({"labels": {"x": "ex"}}, None, r"needs at least 2 classes, but labels names only one class: 'x'"),
        ({"labels": ["x"]}, None, r"needs at least 2 classes, but labels names only one class: 'x'"),
        ({"labels": ["x", "y", "x"]}, None, r"labels names the classes \['x'\] more than once"),
        ({"labels": [["x", "ex"], ["y"]]}, None, r"a list of alias lists needs y"),
        ({"labels": [{0: "a", 1: "b"}]}, [0, 1, 0, 1], r"labels is a list of 1 mappings but y has one output"),
        ({"labels": ["a", ""]}, [0, 1, 0, 1], r"labels=\['a', ''\] has '' at position 1"),
        ({"labels": []}, [0, 1, 0, 1], r"labels=\[\] must be None, a mapping"),
        ({"labels": "ab"}, [0, 1, 0, 1], r"labels='ab' must be None, a mapping"),
        ({"label_words": "snake"}, [0, 1, 0, 1], r"label_words='snake' must be one of \['as_is', 'auto', 'words'\]"),
        ({}, None, r"fit\(X\) without y needs labels=\{class: label\} or labels=\[class, ...\]"),
    ],
)
def test_class_and_label_errors_come_before_the_engine(no_engine, params, y, match):
    with pytest.raises(ValueError, match=match):
        make(**params).fit(X, y)


def test_one_class_output_is_named(no_engine):
    Y = pd.DataFrame({"topic": ["a", "b", "a", "b"], "stars": [5, 5, 5, 5]})
    with pytest.raises(ValueError, match=r"^output 'stars': LLMLabelClassifier needs samples of at least 2 classes .*: 5$"):
        make().fit(X, Y)
    with pytest.raises(ValueError, match=r"^LLMLabelClassifier: output 'stars' needs samples of at least 2 classes"):
        make(prompt="Q: {text}", multioutput_read="joint").fit(X, Y)
    with pytest.raises(ValueError, match=r"labels is a list of 2 names but y has 2 outputs: give one entry per output"):
        make(labels=["a", "b"]).fit(X, Y)
    with pytest.raises(ValueError, match=r"^output 'topic': LLMLabelClassifier: labels is a list of 3 names"):
        make(labels=[["x", "y", "z"], ["five", "six"]]).fit(X, Y.assign(stars=[5, 6, 5, 6]))


def test_multilabel_column_with_one_value_is_not_refused(fake_engine):
    indicator = pd.DataFrame({"sports": [1, 0, 1, 0], "politics": [0, 0, 0, 0]})
    clf = make(prompt="Text: {text}\nAbout {label}?\nAnswer:").fit(X, indicator)
    assert clf.classes_.tolist() == ["sports", "politics"]

"""Joint reads (``multioutput_read="joint"``): one structured read per text
answers every output, read at slot positions. Checked on the real engine
against a transformers fp32 forward pass over the prompt and the greedy
answer, so both slot positions and the conditioning on earlier answers are
tested; plus scikit-learn conventions and the errors for what a joint read
cannot do."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
from scipy.special import log_softmax
from sklearn.base import clone

from helpers import hf_logprob_rows, make_classifier

NAMES = ["answer type", "fine answer type"]
N_TEXTS = 8
FP32_TOLERANCE = 2e-4


@pytest.fixture(scope="module")
def trec(datasets_dir):
    frame = pd.read_csv(datasets_dir / "trec_test.csv").head(40)
    return frame["text"].tolist(), frame[["label", "fine_label"]].set_axis(NAMES, axis=1)


@pytest.fixture(scope="module")
def joint_fp32(fp32_engine, trec):
    X, Y = trec
    return make_classifier(
        prompt="Question: {text}", multioutput_read="joint", engine_options={"dtype": "float32"}
    ).fit(X, Y)


def test_joint_fit_letters_each_outputs_classes(joint_fp32, trec):
    _, Y = trec
    clf = joint_fp32
    assert clf.n_outputs_ == 2 and clf.output_kind_ == "multioutput"
    assert [list(c) for c in clf.classes_] == [sorted(set(Y[c])) for c in NAMES]
    n_coarse, n_fine = (len(c) for c in clf.classes_)
    assert clf.joint_regex_ == "[" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:n_coarse] + "]\\n[" + (
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"[:n_fine]
    ) + "]"
    assert [len(ids) for ids in clf.joint_token_ids_] == [n_coarse, n_fine]
    assert list(clf.joint_options_[1].values()) == sorted(set(Y[NAMES[1]]))


def test_joint_slots_equal_transformers_fp32_over_the_greedy_answer(joint_fp32, trec, hf_model_fp32, fp32_engine):
    """Slot 0 is the first answer token, slot 1 the token after the greedy
    letter and the newline: each equals transformers' next-token logprobs
    there, softmaxed over that output's letters."""
    X, _ = trec
    X = X[:N_TEXTS]
    clf = joint_fp32
    got = clf.predict_log_proba(X)
    prompts = clf.plans_[0].encode([{"text": t} for t in X], fp32_engine.tokenizer, fp32_engine.max_model_len).ids
    newline = fp32_engine.tokenizer.encode("\n", add_special_tokens=False)
    coarse_ids, fine_ids = clf.joint_token_ids_
    worst = 0.0
    for i, prompt in enumerate(prompts):
        first = hf_logprob_rows(hf_model_fp32, prompt)[-1, coarse_ids].numpy()
        want_coarse = log_softmax(first)
        greedy = coarse_ids[int(np.argmax(first))]
        second = hf_logprob_rows(hf_model_fp32, [*prompt, greedy, *newline])[-1, fine_ids].numpy()
        want_fine = log_softmax(second)
        worst = max(worst, np.abs(got[0][i] - want_coarse).max(), np.abs(got[1][i] - want_fine).max())
    print(f"joint slots, fp32 engine vs transformers fp32: max abs diff {worst:.3g} nats")
    assert worst < FP32_TOLERANCE


def test_joint_predictions_follow_scikit_learn_multi_output_shapes(engine, trec):
    X, Y = trec
    clf = make_classifier(prompt="Question: {text}", multioutput_read="joint").fit(X, Y)
    probas = clf.predict_proba(X)
    assert isinstance(probas, list) and [p.shape for p in probas] == [(len(X), len(c)) for c in clf.classes_]
    for p in probas:
        np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    pred = clf.predict(X)
    assert pred.shape == (len(X), 2)
    for j in range(2):
        assert np.array_equal(pred[:, j], clf.classes_[j][np.argmax(probas[j], axis=1)])
    assert clf.score(X, Y) == pytest.approx(np.mean(np.all(pred == Y.to_numpy(), axis=1)))
    assert clf.transform(X[:4]).shape == (4, sum(len(c) for c in clf.classes_))
    assert len(clf.get_feature_names_out()) == sum(len(c) for c in clf.classes_)
    restored = pickle.loads(pickle.dumps(clf))
    for a, b in zip(restored.predict_proba(X[:4]), probas, strict=True):
        # 4 texts against 40: on CPUs whose float32 kernels round by batch shape (AMX
        # machines), the answer tokens' logprobs move in their last bits (2.8e-7 seen)
        np.testing.assert_allclose(a, b[:4], rtol=0, atol=1e-5)
    assert clone(clf).get_params()["multioutput_read"] == "joint"
    with pytest.raises(ValueError, match="diagnose reads one output"):
        clf.diagnose(X[:2])


def test_joint_first_slot_ignores_batch_mates_and_later_slots_nearly(joint_fp32, trec):
    """Slot 0 comes from the prompt's prefill: exactly the same alone, in a
    batch or repeated. Later slots come from decode steps, whose kernels depend
    on the batch and the cache state: in fp32 they move by ~1e-6 (bf16: up to
    ~5e-3, see the README), where separate reads do not move at all."""
    X, _ = trec
    together = joint_fp32.predict_proba(X[:16])
    alone = joint_fp32.predict_proba(X[3:4])
    np.testing.assert_array_equal(alone[0][0], together[0][3])
    np.testing.assert_allclose(alone[1][0], together[1][3], atol=1e-5)
    again = joint_fp32.predict_proba(X[:16])  # now from the prefix cache
    np.testing.assert_array_equal(again[0], together[0])
    np.testing.assert_allclose(again[1], together[1], atol=1e-5)


def test_joint_refuses_what_it_cannot_read(engine, trec):
    X, Y = trec
    with pytest.raises(ValueError, match="few_shot=1 applies to separate reads only"):
        make_classifier(prompt="Question: {text}", multioutput_read="joint", few_shot=1).fit(X, Y)
    with pytest.raises(ValueError, match="calibration='contextual' applies to separate reads only"):
        make_classifier(prompt="Question: {text}", multioutput_read="joint", calibration="contextual").fit(X, Y)
    with pytest.raises(ValueError, match="this y is multilabel"):
        make_classifier(prompt="Q: {text}\nIs it about {label}?", multioutput_read="joint").fit(
            X[:4], np.array([[0, 1], [1, 0], [1, 1], [0, 0]])
        )
    many = pd.DataFrame({"a": [f"c{i}" for i in range(60)], "b": ["x", "y"] * 30})
    with pytest.raises(ValueError, match="output 'a' has 60 classes; a joint read letters at most 52"):
        make_classifier(prompt="Question: {text}", multioutput_read="joint").fit([f"t{i}" for i in range(60)], many)
    with pytest.raises(ValueError, match="multioutput_read='both' must be one of"):
        make_classifier(multioutput_read="both").fit(X, Y)
    with pytest.raises(ValueError, match="one template, not a list"):
        make_classifier(prompt=["Q: {text}\nA:", "Q: {text}\nB:"], multioutput_read="joint").fit(X, Y)


def test_joint_labels_and_y_errors_match_separate_reads(engine, trec):
    """The joint fit looks classes and labels up as separate fits do: a labels
    mapping naming a class that is not in y is refused, not ignored, and a
    column of mixed label types is named with its types."""
    X, Y = trec
    coarse, fine = ({c: c.lower() for c in sorted(set(Y[name]))} for name in NAMES)
    joint = make_classifier(prompt="Question: {text}", multioutput_read="joint", labels=[{**coarse, "ZZZ": "zzz"}, fine])
    with pytest.raises(ValueError, match=r"output 'answer type': labels has classes \['ZZZ'\] that are not in y"):
        joint.fit(X, Y)
    mixed = Y.astype(object)
    mixed.iloc[0, 1] = 7
    with pytest.raises(ValueError, match=r"output 'fine answer type': y mixes label types \['int', 'str'\]"):
        make_classifier(prompt="Question: {text}", multioutput_read="joint").fit(X, mixed)

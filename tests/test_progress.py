"""Progress that matches the work: the chunk driver shows a bar when a call's
expected reads (texts x reads per text) are many, whatever ``batch_size``,
splits many-read calls into chunks small enough for the bar to move, keeps
input order, item offsets and truncation warnings right, and stays silent
with ``progress=False``. Fake plans and a fake engine drive the driver
without vLLM; one test checks the real bar on the engine."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from helpers import make_classifier
from llm_label_clf.exceptions import GenerationError, TruncationWarning
from llm_label_clf.reading import driver
from llm_label_clf.reading.driver import (
    CHUNK_READS,
    MIN_CHUNK_TEXTS,
    PROGRESS_MIN_READS,
    aread_plans,
    chunk_size,
    read_plans,
    reads_per_text,
)
from llm_label_clf.reading.label_trie import LabelTrie
from llm_label_clf.reading.plan import ClassReads
from llm_label_clf.reading.render import Encoded

#: What the driver needs of an engine; the fake plans never touch it.
ENGINE = SimpleNamespace(tokenizer=None, max_model_len=100)


def chain_trie(n_reads: int) -> LabelTrie:
    """A trie of one label of ``n_reads`` tokens: one read per prefix."""
    trie = LabelTrie.build([tuple(range(1, n_reads + 1))])
    assert len(trie.reads) == n_reads
    return trie


@dataclass
class FakePlan:
    """A plan whose prompt for record ``i`` (``{"text": str(i)}``) is ``[i]``
    and whose read of it puts ``i + k`` in class ``k``'s column of each output;
    ``trie`` None stands for a joint plan (one read per text). It records each
    read's offset and prompts, cuts the records in ``long`` and fails on
    those in ``bad`` the way the core does (naming ``offset + i``)."""

    trie: LabelTrie | None = None
    sizes: tuple[int, ...] = (3,)
    prune_margin: float | None = None
    long: frozenset[int] = frozenset()
    bad: frozenset[int] = frozenset()
    calls: list[tuple[int, list[int]]] = field(default_factory=list)

    @property
    def output_sizes(self) -> list[int]:
        return list(self.sizes)

    def prompt_limit(self, max_model_len: int) -> int:
        return max_model_len - 1

    def encode(self, records, tokenizer, max_model_len, *, offset=0) -> Encoded:
        ids = [[int(r["text"])] for r in records]
        return Encoded(ids, [offset + i for i, r in enumerate(records) if int(r["text"]) in self.long])

    async def read(self, engine, prompts, *, offset=0) -> list[ClassReads]:
        await asyncio.sleep(0)
        items = [p[0] for p in prompts]
        self.calls.append((offset, items))
        failed = [offset + i for i, item in enumerate(items) if item in self.bad]
        if failed:
            raise GenerationError(f"label reads failed for input item(s) {failed}", failed)
        rows = np.array(items, dtype=np.float64)[:, None]
        return [
            ClassReads(rows + np.arange(k), rows + np.arange(k), np.array(items, dtype=np.int64)) for k in self.sizes
        ]


@dataclass
class Bar:
    """Stands in for the tqdm bar: what it was made with and sent."""

    total: int
    reads: int
    pruned: bool
    updates: list[int] = field(default_factory=list)
    closed: bool = False

    def update(self, n: int) -> None:
        self.updates.append(n)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def bars(monkeypatch) -> list[Bar]:
    """Every bar the driver makes, recorded instead of drawn."""
    made: list[Bar] = []

    def factory(total: int, reads: int, *, pruned: bool) -> Bar:
        made.append(Bar(total, reads, pruned))
        return made[-1]

    monkeypatch.setattr(driver, "_progress_bar", factory)
    return made


def records(n: int) -> list[dict[str, str]]:
    return [{"text": str(i)} for i in range(n)]


def run(plans, n: int, *, how: str = "sync", batch_size: int = 512, progress: bool = True) -> list[ClassReads]:
    """The driver's reads of ``n`` records, through the sync bridge or from a
    caller's event loop."""
    if how == "sync":
        return read_plans(plans, records(n), ENGINE, batch_size=batch_size, progress=progress)
    return asyncio.run(aread_plans(plans, records(n), ENGINE, batch_size=batch_size, progress=progress))


@pytest.mark.parametrize(
    ("reads", "batch_size", "texts"),
    [
        (1, 512, 512),  # one read per text: batches of batch_size, as before
        (1, 100, 100),
        (2, 512, CHUNK_READS // 2),
        (3, 512, 171),  # AG News labels: ~512 reads a chunk
        (141, 512, MIN_CHUNK_TEXTS),  # Banking77: never under MIN_CHUNK_TEXTS texts
        (141, 4, 4),  # batch_size still bounds a chunk
        (10_000, 512, MIN_CHUNK_TEXTS),
    ],
)
def test_chunk_size_aims_at_a_few_hundred_reads(reads, batch_size, texts):
    assert chunk_size(reads, batch_size) == texts


def test_reads_per_text_counts_the_trie_and_one_for_a_joint_plan():
    assert reads_per_text(FakePlan(chain_trie(141))) == 141
    assert reads_per_text(FakePlan(LabelTrie.build([(5,), (6,), (7,)]))) == 1
    assert reads_per_text(FakePlan(None, sizes=(2, 3))) == 1


@pytest.mark.parametrize("how", ["sync", "async"])
def test_many_reads_below_batch_size_show_a_moving_bar(bars, how):
    """50 texts of 141 reads each fit one 512-text batch, yet take minutes on
    a CPU: the bar shows, and moves every MIN_CHUNK_TEXTS texts."""
    plan = FakePlan(chain_trie(141))
    run([plan], 50, how=how)
    assert len(bars) == 1
    bar = bars[0]
    assert (bar.total, bar.reads, bar.pruned) == (50, 141, False)
    assert bar.updates == [8, 8, 8, 8, 8, 8, 2]
    assert bar.closed


@pytest.mark.parametrize(
    ("reads", "n_texts"),
    [(1, 100), (3, 16), (1, PROGRESS_MIN_READS), (141, 1)],  # up to PROGRESS_MIN_READS reads: silent
)
def test_small_cheap_calls_show_no_bar(bars, reads, n_texts):
    run([FakePlan(chain_trie(reads))], n_texts)
    assert bars == []


@pytest.mark.parametrize(("reads", "n_texts"), [(1, PROGRESS_MIN_READS + 1), (1, 300), (3, 100), (141, 2)])
def test_calls_over_the_threshold_show_a_bar_in_one_batch(bars, reads, n_texts):
    run([FakePlan(chain_trie(reads))], n_texts, batch_size=10_000)
    assert [(b.total, b.reads, sum(b.updates), b.closed) for b in bars] == [(n_texts, reads, n_texts, True)]


@pytest.mark.parametrize("how", ["sync", "async"])
def test_progress_false_is_silent_and_reads_the_same_chunks(bars, capsys, how):
    quiet, shown = FakePlan(chain_trie(141)), FakePlan(chain_trie(141))
    got = run([quiet], 50, how=how, progress=False)
    assert bars == []
    assert capsys.readouterr().err == ""
    want = run([shown], 50, how=how)
    assert len(bars) == 1
    assert quiet.calls == shown.calls  # a bar never changes which texts share a batch
    np.testing.assert_array_equal(got[0].class_logprobs, want[0].class_logprobs)


@pytest.mark.parametrize("how", ["sync", "async"])
def test_results_keep_input_order_and_offsets_name_each_chunks_first_record(bars, how):
    trie_plan, joint_plan = FakePlan(chain_trie(141), sizes=(4,)), FakePlan(None, sizes=(2, 3))
    outputs = run([trie_plan, joint_plan], 50, how=how)
    assert [o.class_logprobs.shape for o in outputs] == [(50, 4), (50, 2), (50, 3)]
    for out in outputs:
        k = out.class_logprobs.shape[1]
        np.testing.assert_array_equal(out.class_logprobs, np.arange(50)[:, None] + np.arange(k))
        np.testing.assert_array_equal(out.top_token, np.arange(50))
    for plan in (trie_plan, joint_plan):
        assert [offset for offset, _ in plan.calls] == list(range(0, 50, 8))
        for offset, items in plan.calls:
            assert items == list(range(offset, min(offset + 8, 50)))
    assert bars[0].reads == 142  # summed over the plans


def test_truncation_warning_names_items_across_chunks(bars):
    plan = FakePlan(chain_trie(141), long=frozenset({3, 17, 49}))
    with pytest.warns(TruncationWarning, match=r"3 text\(s\).*items \[3, 17, 49\]"):
        run([plan], 50)


@pytest.mark.parametrize("how", ["sync", "async"])
def test_an_error_names_the_callers_item_and_closes_the_bar(bars, how):
    plan = FakePlan(chain_trie(141), bad=frozenset({45}))
    with pytest.raises(GenerationError, match=r"item\(s\) \[45\]") as caught:
        run([plan], 50, how=how)
    assert list(caught.value.items) == [45]
    assert bars[0].closed and sum(bars[0].updates) == 40


def test_no_texts_read_nothing_and_show_nothing(bars):
    outputs = run([FakePlan(chain_trie(141), sizes=(3,))], 0)
    assert bars == [] and outputs[0].class_logprobs.shape == (0, 3)


def test_the_tqdm_bar_counts_texts_and_says_reads_per_text(capsys):
    run([FakePlan(chain_trie(141))], 50)
    err = capsys.readouterr().err
    assert "50/50" in err and "text/s" in err and "141 reads/text" in err
    run([FakePlan(chain_trie(141), prune_margin=0.0)], 50)
    assert "up to 141 reads/text" in capsys.readouterr().err
    run([FakePlan(chain_trie(1))], 300)
    err = capsys.readouterr().err
    assert "300/300" in err and "reads/text" not in err  # one read a text goes without saying


def test_a_multi_token_label_prediction_shows_its_bar(engine, datasets_dir, capsys):
    """On the engine: 4 Banking77 queries (77 intents, up to 141 reads per
    text, more than PROGRESS_MIN_READS together) fit one batch, and the
    prediction shows its progress and reads per text."""
    frame = pd.read_csv(datasets_dir / "banking77_test.csv").groupby("label").head(1)
    X, y = frame["text"].tolist(), frame["label"].to_numpy()
    clf = make_classifier(
        prompt="Query: {text}\nIntent:", label_mode="full_sequence", low_mass="ignore", prune_margin=0.0
    ).fit(X, y)
    reads = len(clf.plans_[0].trie.reads)
    assert reads * 4 > PROGRESS_MIN_READS
    capsys.readouterr()
    clf.set_params(progress=True)
    assert clf.predict(X[:4]).shape == (4,)
    err = capsys.readouterr().err
    assert "4/4" in err and f"up to {reads} reads/text" in err

"""Remote engines (``llm_label_clf.engines.remote``) against real vLLM servers on
loopback: server A (open) started once for the module and compared with the
embedded engine; in the full tier (``make test-full``) server B too (it wants
an API key), for the key, reads over two servers, and SIGKILL mid-run.

No mocks: every fault here is one a real server produces (nothing listening,
a model it does not serve, a missing key, a prompt it rejects, its death).
The tests that kill a server run last and each kills its own server.
"""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from helpers import SST2_LABELS, SST2_TEMPLATE, build_prompt, load_texts
from llm_label_clf import GenerationError, RemoteServerError
from llm_label_clf.engines.handle import Engine
from llm_label_clf.engines.loop import run_sync
from llm_label_clf.engines.remote import RemoteClient, get_remote_engine, shutdown_remote_engines
from llm_label_clf.models.builtin import DEFAULT_MODEL
from llm_label_clf.reading.batches import read_label_logprobs
from llm_label_clf.testing import Server, free_port, vllm_server

#: The key server B demands, and the variable this process reads it from.
KEY_ENV = "LLC_TEST_REMOTE_KEY"
API_KEY = "sk-test-d41d8cd98f00b204e980"
#: Largest |remote - embedded| label logprob allowed; measured 0.0 (same bf16
#: engine on both sides, and JSON carries Python floats exactly).
TOLERANCE = 1e-6
JOINT_TOLERANCE = 2e-5
START_TIMEOUT_S = 1200  # two servers starting side by side on a busy 2-core machine took up to 330 s


@pytest.fixture(scope="module", autouse=True)
def api_key_in_environment() -> Iterator[None]:
    """The key server B wants, where ``_remote`` engines read it from."""
    os.environ[KEY_ENV] = API_KEY
    yield
    os.environ.pop(KEY_ENV, None)


def _serve(model_path: str, log_path: Any, **options: Any) -> Iterator[Server]:
    """One server of the built-in model for the module; the remote engines are
    closed before it stops."""
    with vllm_server(model_path, log_path=log_path, served_model_name=DEFAULT_MODEL, start_timeout_s=START_TIMEOUT_S,
                     **options) as server:
        try:
            yield server
        finally:
            shutdown_remote_engines()


@pytest.fixture(scope="module")
def server_a(model_path, tmp_path_factory) -> Iterator[Server]:
    """Server A: open to any client."""
    yield from _serve(model_path, tmp_path_factory.mktemp("vllm_server_a") / "a.log")


@pytest.fixture(scope="module")
def server_b(model_path, tmp_path_factory) -> Iterator[Server]:
    """Server B: wants API_KEY (full tier)."""
    yield from _serve(model_path, tmp_path_factory.mktemp("vllm_server_b") / "b.log", api_key=API_KEY)


@pytest.fixture(scope="module")
def servers(server_a, server_b) -> tuple[Server, Server]:
    return server_a, server_b


@pytest.fixture(scope="module")
def sst2_prompts(engine, datasets_dir):
    """200 SST-2 prompt id lists and their (shared) label ids."""
    texts = load_texts(datasets_dir / "sst2_dev.csv", 200)
    prompts = [build_prompt(engine.tokenizer, SST2_TEMPLATE, text, SST2_LABELS) for text in texts]
    assert all(p.label_ids == prompts[0].label_ids for p in prompts)
    return [p.ids for p in prompts], prompts[0].label_ids


#: The prompts ``check_reads_equal`` reads over a server.
N_COMPARED = 30


@pytest.fixture(scope="module")
def reference(engine, sst2_prompts):
    """The embedded engine's label logprobs of the first N_COMPARED prompts."""
    ids, label_ids = sst2_prompts
    return run_sync(read_label_logprobs(engine, ids[:N_COMPARED], label_ids))


@pytest.fixture(scope="module")
def full_reference(engine, sst2_prompts):
    """The embedded engine's label logprobs of the 200 prompts (the fail-over test, full tier)."""
    ids, label_ids = sst2_prompts
    return run_sync(read_label_logprobs(engine, ids, label_ids))


class Recorder:
    """Passes a client's reads through and records the items that finished,
    calling ``on_done(n)`` after each: an observer, the reads stay real."""

    def __init__(self, client: RemoteClient, on_done: Any = None) -> None:
        self.client, self.on_done, self.done = client, on_done, []

    @property
    def errored(self) -> bool:
        return self.client.errored

    async def generate(self, *args: Any, **kwargs: Any) -> Any:
        async for output in self.client.generate(*args, **kwargs):
            self.done.append(output)
            if self.on_done is not None:
                self.on_done(len(self.done))
            yield output

    def items(self) -> set[int]:
        return {int(out.request_id.rpartition("-")[2]) for out in self.done}


def recording(remote: Engine, recorder: Recorder) -> Engine:
    """``remote``'s handle with its client replaced by ``recorder``."""
    return Engine(remote.model, remote.options, recorder, remote.tokenizer, remote.max_model_len)


def _remote(*servers: Server, **options: Any):
    return get_remote_engine([s.url for s in servers], DEFAULT_MODEL, api_key_env=KEY_ENV, **options)


# --- errors at connection time ----------------------------------------------


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("ftp://127.0.0.1:8000", "scheme 'ftp'"),
        ("http://admin:hunter2@127.0.0.1:8000", "embeds credentials"),
        ("http://:8000", "has no host"),
    ],
)
def test_bad_url_is_named(url, match):
    with pytest.raises(ValueError, match=match) as info:
        get_remote_engine(url, DEFAULT_MODEL)
    assert "hunter2" not in str(info.value)


def test_urls_are_normalised():
    from llm_label_clf.engines._http import normalize_url

    assert normalize_url(" http://127.0.0.1:8000/v1/ ") == "http://127.0.0.1:8000"
    assert normalize_url("https://gpu.example/vllm/v1") == "https://gpu.example/vllm"
    assert normalize_url("http://[::1]:8000") == "http://[::1]:8000"


def test_nothing_listening_says_to_start_the_server():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RemoteServerError, match="no vLLM server answers") as info:
        get_remote_engine(url + "/v1", DEFAULT_MODEL)
    assert url in str(info.value) and "start it" in str(info.value)


def test_unserved_model_lists_what_is_served(server_a):
    a = server_a
    with pytest.raises(ValueError, match=r"serves \['smollm2-135m-instruct'\], not 'gpt-x'") as info:
        get_remote_engine(a.url, "gpt-x")
    assert a.url in str(info.value) and "--served-model-name gpt-x" in str(info.value)


@pytest.mark.full
def test_api_key_is_sent_and_never_exposed(server_b, sst2_prompts):
    """Server B refuses a client without its key; with the key read from the
    environment, reads work, and the key is in no repr and no pickle."""
    b = server_b
    with pytest.raises(PermissionError, match="LLC_TEST_UNSET_KEY"):
        get_remote_engine(b.url, DEFAULT_MODEL, api_key_env="LLC_TEST_UNSET_KEY")
    remote = _remote(b)
    ids, label_ids = sst2_prompts
    assert run_sync(read_label_logprobs(remote, ids[:2], label_ids)).logprobs.shape == (2, 2)
    shown = repr(remote) + repr(remote.client) + repr(vars(remote.client)) + repr(remote.options)
    assert API_KEY not in shown and KEY_ENV in repr(remote.client)
    for obj in (remote, remote.client):
        with pytest.raises(TypeError, match="not picklable") as info:
            pickle.dumps(obj)
        assert API_KEY not in str(info.value)


def test_closed_engine_fails_its_reads_and_is_replaced(server_a, sst2_prompts):
    ids, label_ids = sst2_prompts
    remote = _remote(server_a, max_concurrency=4)
    run_sync(remote.client.aclose())
    assert remote.dead
    with pytest.raises(GenerationError, match="is closed") as info:
        run_sync(read_label_logprobs(remote, ids[:2], label_ids))
    assert info.value.items == (0, 1)
    fresh = _remote(server_a, max_concurrency=4)
    assert fresh is not remote and not fresh.dead
    assert run_sync(read_label_logprobs(fresh, ids[:2], label_ids)).logprobs.shape == (2, 2)


# --- reads -------------------------------------------------------------------


def check_reads_equal(remote: Any, engine: Any, sst2_prompts: Any, reference: Any) -> None:
    """N_COMPARED label reads over ``remote`` equal the embedded engine's (max
    |difference| printed: measured 0.0), one request each, and the engine
    spec carries over."""
    ids, label_ids = sst2_prompts
    sent = remote.client.requests
    scores = run_sync(read_label_logprobs(remote, ids[:N_COMPARED], label_ids))
    diff = np.abs(scores.logprobs - reference.logprobs).max()
    print(f"{remote.client.urls}: max |remote - embedded| = {diff:.3g}")
    assert diff <= TOLERANCE
    np.testing.assert_array_equal(scores.top_token, reference.top_token)
    assert remote.client.requests - sent == N_COMPARED
    assert remote.max_model_len == engine.max_model_len
    assert remote.tokenizer.encode("Review: fine") == engine.tokenizer.encode("Review: fine")


def test_remote_reads_equal_the_embedded_engine(server_a, engine, sst2_prompts, reference):
    check_reads_equal(_remote(server_a), engine, sst2_prompts, reference)


@pytest.mark.full
def test_reads_over_two_servers_equal_the_embedded_engine(servers, engine, sst2_prompts, reference):
    """Over two servers; one engine per server set and options, whatever the
    order of the URLs."""
    remote = _remote(*servers)
    check_reads_equal(remote, engine, sst2_prompts, reference)
    assert _remote(*reversed(servers)) is remote


def test_rejected_read_names_its_item_and_is_not_retried(server_a, sst2_prompts):
    """The server rejects one over-long prompt: only that item fails, without
    retries, and its neighbours are read."""
    ids, label_ids = sst2_prompts
    remote = _remote(server_a)
    too_long = ids[0] * (remote.max_model_len // len(ids[0]) + 1)
    retries, sent = remote.client.retries, remote.client.requests
    with pytest.raises(GenerationError, match=r"item\(s\) \[1\]") as info:
        run_sync(read_label_logprobs(remote, [ids[0], too_long, ids[1]], label_ids))
    assert info.value.items == (1,)
    assert "rejected" in str(info.value) and "HTTP 400" in str(info.value)
    assert remote.client.retries == retries
    assert remote.client.requests - sent == 3  # one per read, none retried


# --- the estimator over a server ----------------------------------------------


def test_estimator_with_base_url_equals_the_embedded_one(server_a, engine, datasets_dir):
    """The same estimator code over a server: multi-token labels (a label trie
    of several reads per text) give the embedded engine's probabilities."""
    import pandas as pd

    from llm_label_clf import LLMLabelClassifier

    frame = pd.read_csv(datasets_dir / "agnews_test.csv").groupby("label").head(3)
    X, y = frame["text"].tolist(), frame["label"].to_numpy()
    params = dict(prompt="Article: {text}\nTopic:", progress=False, low_mass="ignore")
    embedded = LLMLabelClassifier(**params).fit(X, y)
    remote = LLMLabelClassifier(base_url=server_a.url + "/v1", **params).fit(X, y)
    assert remote.label_mode_ == embedded.label_mode_ == "full_sequence"
    assert remote.label_sequences_ == embedded.label_sequences_
    np.testing.assert_allclose(remote.predict_proba(X), embedded.predict_proba(X), atol=TOLERANCE)
    with pytest.raises(ValueError, match=r"engine_options \['dtype'\] do not apply to remote servers"):
        LLMLabelClassifier(base_url=server_a.url, engine_options={"dtype": "float32"}, **params).fit(X, y)


def test_joint_read_over_a_server_equals_the_embedded_one(server_a, engine, datasets_dir):
    """A joint read sends its answer format (vLLM's structured outputs) with
    the reads: over a server, each output's option logprobs at its slot equal
    the embedded engine's, and so do the predictions."""
    import pandas as pd

    from llm_label_clf import LLMLabelClassifier

    frame = pd.read_csv(datasets_dir / "trec_test.csv").head(12)
    X, Y = frame["text"].tolist(), frame[["label", "fine_label"]]
    params = dict(prompt="Question: {text}", multioutput_read="joint", progress=False)
    embedded = LLMLabelClassifier(**params).fit(X, Y)
    remote = LLMLabelClassifier(base_url=server_a.url + "/v1", **params).fit(X, Y)
    assert remote.joint_regex_ == embedded.joint_regex_
    # A later slot is read after decode steps batched differently on the two
    # engines: float32 sums in another order, seen up to 3.5e-6 apart.
    for got, want in zip(remote.predict_proba(X), embedded.predict_proba(X), strict=True):
        np.testing.assert_allclose(got, want, atol=JOINT_TOLERANCE)
    np.testing.assert_array_equal(remote.predict(X), embedded.predict(X))


# --- killed servers (these run last; each kills its own server) --------------


@pytest.mark.full
def test_reads_fail_over_when_a_server_is_killed(servers, sst2_prompts, full_reference):
    """SIGKILL server A once 30 reads finished: its unfinished reads move to
    B, and every result equals the embedded engine's."""
    a, b = servers
    remote = _remote(a, b)
    recorder = Recorder(remote.client, lambda n: n == 30 and a.stop(signal.SIGKILL))
    ids, label_ids = sst2_prompts
    scores = run_sync(read_label_logprobs(recording(remote, recorder), ids, label_ids))
    assert a.proc.wait(timeout=10) == -signal.SIGKILL
    assert np.abs(scores.logprobs - full_reference.logprobs).max() <= TOLERANCE
    np.testing.assert_array_equal(scores.top_token, full_reference.top_token)
    after_kill = [out.server for out in recorder.done[30:]]
    assert after_kill.count(b.url) > after_kill.count(a.url)
    assert remote.client.retries > 0  # A's unfinished reads failed there first


@pytest.mark.full
def test_killed_single_server_names_the_unfinished_items(server_b, sst2_prompts):
    """With one server, killing it makes the call raise GenerationError whose
    ``items`` are exactly the reads that had not finished."""
    b = server_b
    remote = _remote(b, max_retries=2)
    recorder = Recorder(remote.client, lambda n: n == 20 and b.stop(signal.SIGKILL))
    ids, label_ids = sst2_prompts
    with pytest.raises(GenerationError, match="RemoteServerError") as info:
        run_sync(read_label_logprobs(recording(remote, recorder), ids, label_ids))
    unfinished = set(range(len(ids))) - recorder.items()
    assert len(recorder.done) >= 20 and unfinished
    assert set(info.value.items) == unfinished
    assert b.url in str(info.value) and "3 attempt(s)" in str(info.value)


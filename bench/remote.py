"""Remote engines against the embedded one: label-read texts/s of
``read_label_logprobs`` over SST-2 dev on the embedded engine, one vLLM server
and two (all up, taking turns each round), each server's start-up, and one
``/v1/completions`` request carrying every prompt (the HTTP floor); remote
logprobs are checked equal to the embedded ones. The client sends one request
per read (a client-side batcher measured inside the spread and was removed).
On one machine the servers share the client's cores: a second adds no compute.

Run: ``python bench/remote.py [--texts 400] [--rounds 3]``; writes
``bench/results/remote.json`` and ``.md``.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

LABELS = (" positive", " negative")


def build_prompts(tokenizer: Any, texts: list[str]) -> tuple[list[list[int]], list[int]]:
    """Prompt ids and the label tokens as tokenized after the prompt."""
    prompts, label_ids = [], None
    for text in texts:
        prompt = common.SST2_PROMPT.format(text=text)
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        labels = [tokenizer.encode(prompt + label, add_special_tokens=False)[len(ids)] for label in LABELS]
        assert label_ids in (None, labels), "label tokens differ between prompts"
        prompts.append(ids)
        label_ids = labels
    return prompts, label_ids or []


def timed_reads(
    engines: dict[str, Any], prompts: list[list[int]], label_ids: list[int], rounds: int
) -> dict[str, dict[str, Any]]:
    """Per engine a warm-up read, then ``rounds`` timed reads of every prompt, the engines taking turns."""
    from llm_label_clf.engines.loop import run_sync
    from llm_label_clf.reading.batches import read_label_logprobs

    found: dict[str, dict[str, Any]] = {name: {"rounds": [], "loads": []} for name in engines}
    for engine in engines.values():
        run_sync(read_label_logprobs(engine, prompts[:16], label_ids))
    for _ in range(rounds):
        for name, engine in engines.items():
            start = time.perf_counter()
            found[name]["scores"] = run_sync(read_label_logprobs(engine, prompts, label_ids))
            found[name]["rounds"].append(len(prompts) / (time.perf_counter() - start))
            found[name]["loads"].append(os.getloadavg()[0])
            print(f"{name}: {found[name]['rounds'][-1]:.1f} texts/s", flush=True)
    for result in found.values():
        result["texts_per_s"] = statistics.median(result["rounds"])
        result["load_avg_1m"] = statistics.median(result.pop("loads"))
    return found


def raw_batched_http(url: str, prompts: list[list[int]], label_ids: list[int]) -> float:
    """Texts/s of one ``/v1/completions`` request carrying every prompt."""
    import httpx

    body = {
        "model": common.MODEL, "prompt": prompts, "max_tokens": 1, "temperature": 0, "logprobs": len(label_ids),
        "logprob_token_ids": label_ids, "return_tokens_as_token_ids": True,
    }  # fmt: skip
    start = time.perf_counter()
    response = httpx.post(f"{url}/v1/completions", json=body, timeout=600)
    response.raise_for_status()
    assert len(response.json()["choices"]) == len(prompts)
    return len(prompts) / (time.perf_counter() - start)


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    rows = [
        ("embedded AsyncLLM (in process)", doc["embedded"], f"{doc['embedded']['start_s']:.1f}"),
        ("one server, RemoteClient", doc["one_server"], f"{doc['servers_start_s'][0]:.1f}"),
        ("two servers, RemoteClient", doc["two_servers"], f"{doc['servers_start_s'][1]:.1f} (2nd)"),
    ]
    lines = [
        f"SST-2 dev, {doc['texts']} texts, built-in model, {m.get('cpus') or m['cores']} CPUs shared by client and "
        f"server(s); median of {doc['rounds']} rounds after a warm-up; at most {doc['max_concurrency']} reads in "
        f"flight per server, one request per read. The load average shows what else ran.",
        "",
        "| engine | texts/s | rounds | start-up s | 1-min load avg |",
        "|---|---:|---|---:|---:|",
    ]
    for name, result, start in rows:
        rounds = ", ".join(f"{r:.1f}" for r in result["rounds"])
        lines.append(f"| {name} | {result['texts_per_s']:.1f} | {rounds} | {start} | {result['load_avg_1m']:.1f} |")
    lines += [
        "",
        f"One `/v1/completions` request carrying all {doc['texts']} prompts (the HTTP floor, no per-read "
        f"requests): {doc['raw_batched_http_texts_per_s']:.1f} texts/s.",
        f"Connecting (model check, tokenizer load and check, logprob_token_ids probe): "
        f"{doc['connect_s']:.1f} s one server.",
        "Max |remote - embedded| label logprob: "
        + ", ".join(f"{k.replace('_', ' ')} {v:.3g}" for k, v in doc["max_abs_diff"].items())
        + ".",
        "",
        f"Two servers / one: {doc['two_servers']['texts_per_s'] / doc['one_server']['texts_per_s']:.2f}x; "
        "embedded / one server: "
        f"{doc['embedded']['texts_per_s'] / doc['one_server']['texts_per_s']:.2f}x. Here the servers share the "
        "client's cores (and each other's), so a second server adds no compute: a gain means the CPUs were "
        "not saturated or other processes competed (see the load average). Spreading reads pays off when "
        "servers run on separate machines or GPUs.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    args = common.arguments(__doc__, markdown, "remote", texts=400, rounds=3, max_concurrency=32)

    import numpy as np

    from llm_label_clf.engines.local import get_engine, shutdown_engines
    from llm_label_clf.engines.remote import get_remote_engine, shutdown_remote_engines
    from llm_label_clf.models.builtin import resolve_model
    from llm_label_clf.testing import vllm_server

    common.RESULTS.mkdir(parents=True, exist_ok=True)
    texts = common.csv("sst2_dev.csv")["text"].iloc[: args.texts].tolist()
    doc = common.record(texts=len(texts), rounds=args.rounds, max_concurrency=args.max_concurrency)

    start = time.perf_counter()
    engine = get_engine(common.MODEL).start()
    embedded_start = time.perf_counter() - start
    prompts, label_ids = build_prompts(engine.tokenizer, texts)
    options = {"max_concurrency": args.max_concurrency}
    servers = []
    try:
        # the servers start one after the other (each start-up timed alone); on
        # leaving, the remote engines close, then the servers stop
        with contextlib.ExitStack() as stack:
            for name in "ab":
                log = common.RESULTS / f"remote-server-{name}.log"
                server = vllm_server(resolve_model(common.MODEL), served_model_name=common.MODEL, log_path=log)
                servers.append(stack.enter_context(server))
                print(f"server {name} up in {servers[-1].start_s:.1f} s", flush=True)
            stack.callback(shutdown_remote_engines)
            start = time.perf_counter()
            one = get_remote_engine(servers[0].url, common.MODEL, **options)
            connect_s = time.perf_counter() - start
            engines = {
                "embedded": engine,
                "one_server": one,
                "two_servers": get_remote_engine([s.url for s in servers], common.MODEL, **options),
            }
            found = timed_reads(engines, prompts, label_ids, args.rounds)
            raw = raw_batched_http(servers[0].url, prompts, label_ids)
    finally:
        shutdown_engines()
    embedded, one_server, two_servers = found.values()
    embedded["start_s"] = embedded_start

    reference = embedded.pop("scores").logprobs
    remote = {"one_server": one_server, "two_servers": two_servers}
    diffs = {name: float(np.abs(result.pop("scores").logprobs - reference).max()) for name, result in remote.items()}
    doc.update(embedded=embedded, one_server=one_server, two_servers=two_servers,
               servers_start_s=[s.start_s for s in servers], connect_s=connect_s, raw_batched_http_texts_per_s=raw,
               max_abs_diff=diffs)
    for log in common.RESULTS.glob("remote-server-*.log"):
        log.unlink()
    print(common.write("remote", doc, markdown))


if __name__ == "__main__":
    main()

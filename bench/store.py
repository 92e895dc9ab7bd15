"""What the persistent read store (``read_store=``) costs and saves, in one
process on one engine: ``predict_proba`` over N distinct SST-2 dev texts
(default 10,000) with the store off and on (a first run: every read stored),
in alternating blocks of ``--block`` texts, on texts numbered apart (as many
digits) so neither finds the other's prompts in the prefix cache; then a
fresh clone rereads the store-on texts (every read found). Reports the
store's cost (aim: at most 3%), the rerun's speed-up (aim: at least 50x) and
equality, the store's size and the model fingerprint's time.

With ``--fresh``, a rerun as a script or a re-run notebook makes it: a
first process fits the default estimator (AG News prompt and labels, default
calibration) on ``--fresh-texts`` texts and predicts as many others through a
new store; then ``--repeats`` fresh processes do the same, every read stored:
their ``fit`` + ``predict_proba`` (aim: at most 5 s), engine starts, child
processes and vLLM/torch imports (aim: none), and their probabilities
against the first process's (aim: equal to the bit).

Run alone: ``flock /tmp/engine.lock python bench/store.py [--texts 10000]
[--block 500]``, writing ``bench/results/store.json`` and ``.md``; with
``--fresh [--fresh-texts 1000] [--repeats 3] [--store PATH]`` (a new store
file, kept), ``store-fresh.json`` and ``.md``.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

LABELS = ["negative", "positive"]


def run(n: int, block: int) -> dict[str, Any]:
    import numpy as np
    from sklearn.base import clone

    from llm_label_clf import LLMLabelClassifier, engine_info
    from llm_label_clf.models.builtin import DEFAULT_MODEL, resolve_model
    from llm_label_clf.store import ReadStore, model_fingerprint

    sentences = common.csv("sst2_dev.csv")["text"].tolist()
    # numbers of as many digits on both sides (``n + i`` and ``2n + i``): the same token counts
    off_texts = [f"{n + i}. {sentences[i % len(sentences)]}" for i in range(n)]
    on_texts = [f"{2 * n + i}. {sentences[i % len(sentences)]}" for i in range(n)]
    folder = resolve_model(DEFAULT_MODEL)  # converted and verified first: not the fingerprint's time
    began = time.perf_counter()
    model_fingerprint(folder)
    fingerprint_s = time.perf_counter() - began
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "reads.sqlite"
        store = ReadStore(path)
        params = dict(prompt=common.SST2_PROMPT, labels=LABELS, progress=False, low_mass="ignore")
        off = LLMLabelClassifier(**params).fit(off_texts[:2])
        on = LLMLabelClassifier(**params, read_store=str(path)).fit(on_texts[:2])
        off.predict_proba([f"warm-up {i}. {s}" for i, s in enumerate(sentences[:64])])  # the engine's first batches
        seconds = {"off": 0.0, "on": 0.0}
        blocks = []
        first_on = []
        for k, start in enumerate(range(0, n, block)):
            order = ("off", "on") if k % 2 == 0 else ("on", "off")
            took = {}
            for which in order:
                texts = (off_texts if which == "off" else on_texts)[start : start + block]
                clf = off if which == "off" else on
                t = time.perf_counter()
                proba = clf.predict_proba(texts)
                took[which] = time.perf_counter() - t
                if which == "on":
                    first_on.append(proba)
            seconds["off"] += took["off"]
            seconds["on"] += took["on"]
            blocks.append({"texts": min(block, n - start), "off_s": took["off"], "on_s": took["on"]})
            print(f"block {k}: off {took['off']:.1f} s, on {took['on']:.1f} s", flush=True)
        stored = store.stored
        found_before = store.found
        rerun = clone(on).fit(on_texts[:2])
        t = time.perf_counter()
        again = rerun.predict_proba(on_texts)
        rerun_s = time.perf_counter() - t
        info = store.info()
        result = {
            "texts": n,
            "block": block,
            "off_s": seconds["off"],
            "on_s": seconds["on"],
            "off_texts_per_s": n / seconds["off"],
            "on_texts_per_s": n / seconds["on"],
            "store_cost": 1 - seconds["off"] / seconds["on"],
            "rerun_s": rerun_s,
            "rerun_texts_per_s": n / rerun_s,
            "rerun_speedup": seconds["on"] / rerun_s,
            "rerun_equal": bool(np.array_equal(again, np.vstack(first_on))),
            "stored": stored,
            "rerun_found": store.found - found_before,
            "rerun_stored": store.stored - stored,
            "store_bytes": info.bytes,
            "store_reads": info.reads,
            "fingerprint_s": fingerprint_s,
            "engine_settings": engine_info()["engines"][0]["settings"],
            "blocks": blocks,
        }
    return result


def markdown(doc: dict[str, Any]) -> str:
    m, r = doc["machine"], doc["result"]
    settings = r["engine_settings"]
    load = doc.get("load_avg_1m") or [doc["load_avg_start"], doc["load_avg_end"]]
    lines = [
        f"`predict_proba` on {r['texts']:,} SST-2 dev texts (the 872 sentences cycled, each prefixed by a number: "
        f"every prompt distinct), built-in model in {settings.get('dtype')} "
        f"({', '.join(f'{k}={v}' for k, v in settings.items() if k != 'dtype')}), {m['cpu_model']} "
        f"({m['cpu_capability']}, {m['cores_usable']} cores usable), {doc['date']}; load average (1 min) "
        f"{load[0]:.1f} before, {load[1]:.1f} after. Store off and on (first run) "
        f"alternate in blocks of {r['block']} texts (off/on, on/off, ...) in one process on one engine, on "
        "texts numbered apart so neither finds the other's prompts in the prefix cache; the rerun is a fresh "
        "clone reading the store-on texts again.",
        "",
        "| run | seconds | texts/s |",
        "|---|---:|---:|",
        f"| store off | {r['off_s']:.1f} | {r['off_texts_per_s']:.1f} |",
        f"| store on, first run (every read stored) | {r['on_s']:.1f} | {r['on_texts_per_s']:.1f} |",
        f"| store on, rerun (every read found) | {r['rerun_s']:.2f} | {r['rerun_texts_per_s']:.0f} |",
        "",
        f"- The store's cost on a first run: {100 * r['store_cost']:+.1f}% of the time (aim: at most 3%).",
        f"- A rerun served from the store: {r['rerun_speedup']:.0f}x faster than reading (aim: at least 50x); "
        f"it found {r['rerun_found']:,} reads, stored {r['rerun_stored']}, and returned the first run's numbers "
        f"{'exactly' if r['rerun_equal'] else 'NOT exactly'}.",
        f"- The store: {r['store_reads']:,} reads in {r['store_bytes'] / 2**20:.1f} MiB; the model's fingerprint "
        f"took {1000 * r['fingerprint_s']:.0f} ms (warm page cache).",
    ]
    return "\n".join(lines) + "\n"


def fresh_child(spec: dict[str, Any]) -> None:
    """One process of ``--fresh``: the default estimator fitted on
    ``spec['texts']`` AG News texts and predicting as many others through
    ``spec['store']``; its times, starts, children and imports sent to the
    parent, its probabilities saved to ``spec['out']``."""
    began = time.perf_counter()
    import numpy as np
    import psutil

    from llm_label_clf import LLMLabelClassifier
    from llm_label_clf.engines.local import engine_count
    from llm_label_clf.store import ReadStore

    imported = time.perf_counter()
    frame, n = common.csv("agnews_test.csv"), spec["texts"]
    X, y = frame["text"].tolist(), frame["label"].to_numpy()
    t0 = time.perf_counter()
    clf = LLMLabelClassifier(prompt=common.AGNEWS_PROMPT, labels=common.AGNEWS_LABELS, progress=False,
                             low_mass="ignore", read_store=spec["store"]).fit(X[:n], y[:n])
    t1 = time.perf_counter()
    np.save(spec["out"], clf.predict_proba(X[n : 2 * n]))
    t2 = time.perf_counter()
    store = ReadStore(spec["store"])
    common.emit({"import_s": imported - began, "fit_s": t1 - t0, "predict_proba_s": t2 - t1, "fit_predict_s": t2 - t0,
                 "engine_starts": engine_count(), "found": store.found, "stored": store.stored,
                 "children": sorted(p.name() for p in psutil.Process().children(recursive=True)),
                 "imported": [m for m in ("vllm", "torch") if m in sys.modules]})


def fresh(n: int, repeats: int, keep: str | None) -> dict[str, Any]:
    """The first process (filling a new store, at ``keep`` when given, and
    kept), then ``repeats`` fresh ones served by it."""
    import numpy as np

    with tempfile.TemporaryDirectory() as folder:
        store = keep or f"{folder}/reads.sqlite"
        if Path(store).exists():
            raise FileExistsError(f"--store {store} exists: the first process must fill a new store")

        def one(name: str) -> dict[str, Any]:
            spec = json.dumps({"texts": n, "store": store, "out": f"{folder}/{name}.npy"})
            ran = common.run_child([sys.executable, __file__, "--fresh-child", spec])
            run = {**ran.message, "process_s": ran.seconds, "load_avg_1m": common.load_avg()}
            print(name, json.dumps(run), flush=True)
            return run

        first = one("first")
        reruns = [one(f"rerun{r}") for r in range(repeats)]
        for r, run in enumerate(reruns):
            run["bit_equal"] = bool(np.array_equal(np.load(f"{folder}/rerun{r}.npy"), np.load(f"{folder}/first.npy")))
    keys = ("import_s", "fit_s", "predict_proba_s", "fit_predict_s", "process_s")
    return {"texts": n, "first": first, "reruns": reruns,
            "median": {k: statistics.median(run[k] for run in reruns) for k in keys}}


def fresh_markdown(doc: dict[str, Any]) -> str:
    m, r = doc["machine"], doc["result"]
    first, med, reruns = r["first"], r["median"], r["reruns"]
    starts = sum(run["engine_starts"] for run in reruns)
    loads = ", ".join(f"{run['load_avg_1m']:.2f}" for run in reruns)
    each = ", ".join(f"{run['fit_predict_s']:.2f}" for run in reruns)
    children = sorted({c for run in reruns for c in run["children"]}) or "none"
    imported = sorted({i for run in reruns for i in run["imported"]}) or "neither"
    lines = [
        f"A rerun served by the read store in fresh Python processes: the default estimator (AG News prompt and "
        f"labels, default calibration) fitted on {r['texts']:,} AG News test texts, then `predict_proba` on "
        f"{r['texts']:,} others, every read stored by a first process. {m['cpu_model']} ({m['cpu_capability']}, "
        f"{m['cores_usable']} cores usable), dtype {doc['dtype']}, {doc['date']}, commit {doc['commit']}; load "
        f"average (1 min) after each rerun: {loads}. Median of {len(reruns)} reruns; seconds.",
        "",
        "| process | import | `fit` | `predict_proba` | `fit` + `predict_proba` | whole process | engine starts |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, run, n in (("first (reads and stores)", first, first["engine_starts"]),
                         ("rerun (every read stored)", med, starts)):
        lines.append(f"| {name} | {run['import_s']:.2f} | {run['fit_s']:.2f} | {run['predict_proba_s']:.2f} | "
                     f"**{run['fit_predict_s']:.2f}** | {run['process_s']:.1f} | {n} |")
    lines += [
        "",
        f"- Aim, `fit` + `predict_proba` at most 5 s: {'met' if med['fit_predict_s'] <= 5 else 'NOT met'} "
        f"(each rerun: {each} s).",
        f"- No engine: {starts} starts over the reruns; child processes at their end: {children}; of vLLM and "
        f"torch they imported {imported}; each found {reruns[0]['found']:,} reads and stored {reruns[0]['stored']}.",
        f"- Their probabilities equal the first process's "
        f"{'to the bit' if all(run['bit_equal'] for run in reruns) else 'NOT to the bit'}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    args = common.arguments(__doc__, lambda doc: (fresh_markdown if "reruns" in doc["result"] else markdown)(doc),
                            lambda a: "store-fresh" if a.fresh else "store", texts=10_000, block=500, fresh=False,
                            fresh_texts=1000, repeats=3, store=None, fresh_child=None)
    if args.fresh_child:
        fresh_child(json.loads(args.fresh_child))
        return
    doc = common.record()
    if args.fresh:
        doc["result"] = fresh(args.fresh_texts, args.repeats, args.store)
        print(common.write("store-fresh", doc, fresh_markdown))
        return
    doc["result"] = run(args.texts, args.block)
    doc["dtype"] = doc["result"]["engine_settings"].get("dtype", doc["dtype"])
    print(common.write("store", doc, markdown))


if __name__ == "__main__":
    main()

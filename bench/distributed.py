"""What Ray Data and Dask cost on one worker: the same SST-2 texts scored by
``predict_proba`` in-process, by one Ray Data actor (``score_ray_dataset``),
by Ray's own vLLM stage with one engine (``ray_llm_processor``) and by one
Dask worker (``score_dask_dataframe``), each in a fresh Python process: a
warm-up (the engine start, reported as the time to the first result), then
``--passes`` timed passes over ``--texts`` texts in batches of ``--batch``,
peak RSS of the contender's whole process tree, and probabilities checked
equal across contenders (float32 engines). The Markdown says how each pass
is timed and ends with a projection to N workers from the one-actor figures
(an estimate: ``projection``).

``--streaming``: does ``score_ray_dataset`` stream? For each ``--rows`` size,
in a fresh process: the estimator fitted on 32 SST-2 dev texts in the driver
(its engine then shut down), a lazy Ray Data dataset of that many distinct
rows scored by one actor and written with ``write_parquet`` (the driver never
holds the rows; the files are read back to check every row arrived once).
Peak RSS of the child's whole process tree, over the run and over the scoring
call: if Ray Data streams, it does not grow with rows.

Run: ``python bench/distributed.py [--texts 200] [--only NAME ...]`` writes
``bench/results/distributed.json`` and ``.md``; ``python bench/distributed.py
--streaming [--rows 400 3200]`` writes ``streaming.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# bench.common takes this file's folder off sys.path: this file would shadow Dask's ``distributed``
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

#: Ray's own vLLM stage (``ray.data.llm``) through ``ray_llm_processor``, one engine.
RAY_LLM = "ray.data.llm stage, 1 engine"
CONTENDERS = ("in-process", "ray, 1 actor", RAY_LLM, "dask, 1 worker")


def _data(texts: int, warmup: int) -> tuple[Any, Any, list[str], list[str]]:
    """Training texts and labels, warm-up texts and timed texts: disjoint slices of SST-2 dev."""
    frame = common.csv("sst2_dev.csv")
    train = frame.iloc[:32]
    rest = frame["text"].iloc[32:].tolist()
    return train["text"].tolist(), train["label"].to_numpy(), rest[:warmup], rest[warmup : warmup + texts]


def _frame(warm: list[str], timed: list[str], passes: int) -> Any:
    import pandas as pd

    texts = warm + timed * passes
    return pd.DataFrame({"id": range(len(texts)), "text": texts})


def child(name: str, texts: int, warmup: int, passes: int, batch: int) -> None:
    """One contender, in this (fresh) process; prints a JSON line."""
    import numpy as np

    from llm_label_clf import LLMLabelClassifier, shutdown_engines

    X, y, warm, timed = _data(texts, warmup)
    began = time.perf_counter()
    clf = LLMLabelClassifier(prompt=common.SST2_PROMPT, progress=False, low_mass="ignore", batch_size=batch).fit(X, y)
    fit_s = time.perf_counter() - began  # this process's engine start + fit (every contender fits here)
    extra: dict[str, Any] = {}
    if name == "in-process":
        _, (first_s,) = common.timed_passes(lambda: clf.predict_proba(warm), 1)
        proba, durations = common.timed_passes(lambda: clf.predict_proba(timed), passes)
        shutdown_engines()
        engine_start_s = fit_s
    else:
        shutdown_engines()  # the contender's engine is the actor's or worker's; none idles here
        frame = _frame(warm, timed, passes)
        if name == "ray, 1 actor":
            first_s, durations, proba = _ray(clf, frame, warmup, texts, passes, batch)
        elif name == RAY_LLM:
            first_s, durations, proba, extra = _ray_llm(clf, frame, warmup, texts, passes, batch)
        else:
            first_s, durations, proba = _dask(clf, frame, warmup, texts, passes, batch)
        engine_start_s = None
    common.emit({"fit_s": fit_s, "engine_start_s": engine_start_s, "first_result_s": first_s, "pass_s": durations,
          "proba": np.asarray(proba).tolist(), **extra})


@contextmanager
def _local_ray() -> Any:
    """A local, quiet ``ray.init(num_cpus=2)`` keeping results in order, shut down after."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    try:
        yield ray
    finally:
        ray.shutdown()


def _blocks(frame: Any, warmup: int, batch: int) -> list[Any]:
    """The warm-up texts as the first block, then the timed passes in blocks of ``batch``."""
    return [frame.iloc[:warmup]] + [frame.iloc[s : s + batch] for s in range(warmup, len(frame), batch)]


def _streamed(scored: Any) -> tuple[list[float], list[Any]]:
    """A Ray dataset's batches as they arrive, and each one's arrival (seconds from the start)."""
    began = time.perf_counter()
    arrivals, parts = [], []
    for part in scored.iter_batches(batch_format="pandas", batch_size=None, prefetch_batches=0):
        arrivals.append(time.perf_counter() - began)
        parts.append(part)
    return arrivals, parts


def _ray(clf: Any, frame: Any, warmup: int, texts: int, passes: int, batch: int) -> tuple[float, list[float], Any]:
    """One actor with both cores; results streamed, each batch's arrival timed."""
    import numpy as np

    from llm_label_clf import score_ray_dataset

    with _local_ray() as ray:
        scored = score_ray_dataset(ray.data.from_blocks(_blocks(frame, warmup, batch)), clf, batch_size=None,
                                   num_cpus=2)  # one block = one batch
        arrivals, parts = _streamed(scored)
    ends = np.cumsum([len(part) for part in parts])
    marks = [arrivals[int(np.searchsorted(ends, warmup + k * texts))] for k in range(passes + 1)]
    proba = np.vstack([p[[f"proba_{c}" for c in clf.classes_]].to_numpy() for p in parts])[-texts:]
    return marks[0], list(np.diff(marks)), proba


def _ray_llm(
    clf: Any, frame: Any, warmup: int, texts: int, passes: int, batch: int
) -> tuple[float, list[float], Any, dict[str, Any]]:
    """Ray's own vLLM stage, one engine on a one-CPU bundle; the whole frame one
    streamed execution (the stage's engine lives as long as one), each batch's
    arrival timed (also returned, with each batch's rows)."""
    import numpy as np
    import pandas as pd

    from llm_label_clf import ray_llm_processor
    from llm_label_clf.engines.hardware import DTYPE_ENV
    from llm_label_clf.engines.local import engine_settings

    with _local_ray() as ray:
        processor = ray_llm_processor(
            clf,
            id_column="id",
            # the embedded engine's settings, with the dtype the other contenders' engines read in
            engine_kwargs=engine_settings({"dtype": os.environ[DTYPE_ENV]}),
            placement_group_config={"bundles": [{"CPU": 1}]},  # CPU only: Ray's default bundle asks for a GPU
            log_engine_metrics=False,  # vLLM's Ray metrics need ray[serve]
            concurrency=1,
            batch_size=batch,
            preprocess_map_kwargs={"num_cpus": 0.25},
            postprocess_map_kwargs={"num_cpus": 0.25},
        )
        arrivals, parts = _streamed(processor(ray.data.from_blocks(_blocks(frame, warmup, batch))))
    out = pd.concat(parts, ignore_index=True).sort_values("id", kind="stable")
    if not np.array_equal(out["id"].to_numpy(), np.arange(len(frame))):
        raise RuntimeError(f"{RAY_LLM}: rows lost or duplicated ({len(out)} rows back of {len(frame)})")
    # a boundary is passed once every row before it has arrived (the stage bundles rows up to its batch
    # size: a warm-up shorter than a batch shares its batch with the first timed texts)
    bounds = [warmup + k * texts for k in range(passes + 1)]
    have = np.cumsum([[np.count_nonzero(p["id"].to_numpy() < b) for b in bounds] for p in parts], axis=0)
    marks = [arrivals[int(np.searchsorted(have[:, k], b))] for k, b in enumerate(bounds)]
    proba = out[[f"proba_{c}" for c in clf.classes_]].to_numpy()[-texts:]
    extra = {"batch_arrivals_s": arrivals, "batch_rows": [len(p) for p in parts]}
    return marks[0], list(np.diff(marks)), proba, extra


def _dask(clf: Any, frame: Any, warmup: int, texts: int, passes: int, batch: int) -> tuple[float, list[float], Any]:
    """One non-daemonic worker process; each pass is one ``compute()``."""
    import dask
    import dask.dataframe as dd
    from dask.distributed import Client, LocalCluster

    from llm_label_clf import score_dask_dataframe

    dask.config.set({"distributed.worker.daemon": False})
    with LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address=None) as cluster:
        with Client(cluster):
            warm = frame.iloc[:warmup]
            timed = frame.iloc[warmup : warmup + texts]
            began = time.perf_counter()
            score_dask_dataframe(dd.from_pandas(warm, npartitions=1), clf).compute()
            first_s = time.perf_counter() - began
            durations, out = [], None
            for _ in range(passes):
                ddf = dd.from_pandas(timed, chunksize=batch)
                began = time.perf_counter()
                out = score_dask_dataframe(ddf, clf).compute()
                durations.append(time.perf_counter() - began)
    return first_s, durations, out[[f"proba_{c}" for c in clf.classes_]].to_numpy()


def run_contender(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One contender in a fresh process, its process tree's RSS sampled."""
    ran = common.run_child([sys.executable, __file__, "--child", name, "--texts", str(args.texts), "--warmup",
                     str(args.warmup), "--passes", str(args.passes), "--batch", str(args.batch)], timeout=1800)
    return {**ran.message, "wall_s": ran.seconds, "peak_rss_gib": ran.memory.peak / 2**30,
            "load_avg_1m": ran.load_avg_1m, "pass_median_s": statistics.median(ran.message["pass_s"])}


#: The projection's job: rows scored, and cluster sizes (one actor per GPU).
PROJECTED_ROWS = 10_000_000
PROJECTED_WORKERS = (1, 8, 32, 128)


def projection(doc: dict[str, Any]) -> dict[str, Any]:
    """An estimate, not a measurement: the wall time of ``PROJECTED_ROWS`` rows
    on W workers (one Ray actor each), ``start + rows / (W * texts_per_s)`` from
    the measured one-actor figures, assuming linear scaling."""
    ray = doc["results"]["ray, 1 actor"]
    rate = doc["texts"] / ray["pass_median_s"]
    start = ray["first_result_s"]
    rows = []
    for workers in PROJECTED_WORKERS:
        seconds = start + PROJECTED_ROWS / (workers * rate)
        rows.append({"workers": workers, "texts_per_s": workers * rate, "hours": seconds / 3600})
    return {"rows": PROJECTED_ROWS, "per_worker_texts_per_s": rate, "actor_start_s": start, "table": rows}


def markdown(doc: dict[str, Any]) -> str:
    import numpy as np

    m = doc["machine"]
    runs = doc["results"]
    base = runs["in-process"]
    lines = [
        f"`predict_proba` of {doc['texts']} SST-2 dev texts ({doc['passes']} passes, batches of {doc['batch']}, "
        f"after {doc['warmup']} warm-up texts), built-in model in {doc['dtype']}, {m['cpu_model']} "
        f"({m['cpu_capability']}, {m['cores_usable']} cores), each contender in a fresh process. A pass: "
        "wall time from the previous result to the pass's last result (engine start excluded). First result: "
        "from the start of the scoring call to the warm-up texts' result (actor or worker start, engine start "
        "and the warm-up read). Peak RSS: the contender's whole process tree. Load average (1 min) before/after. "
        "Every pass reads the same texts, so passes after the first find their first KV blocks in the engine's "
        "prefix cache, for every contender alike; the median is of such warm passes.",
        "",
        "| contender | pass s (median) | passes s | vs in-process | texts/s | first result s | peak RSS (GiB) "
        "| load | max abs diff proba |",
        "|---|---:|---|---:|---:|---:|---:|---|---:|",
    ]
    for name, r in runs.items():
        diff = float(np.abs(np.array(r["proba"]) - np.array(base["proba"])).max())
        passes = ", ".join(f"{s:.2f}" for s in r["pass_s"])
        load = "/".join(f"{x:.1f}" for x in r["load_avg_1m"])
        lines.append(
            f"| {name} | {r['pass_median_s']:.2f} | {passes} | {r['pass_median_s'] / base['pass_median_s']:.2f}x | "
            f"{doc['texts'] / r['pass_median_s']:.1f} | {r['first_result_s']:.1f} | {r['peak_rss_gib']:.2f} | "
            f"{load} | {diff:.2g} |"
        )
    if RAY_LLM in runs:
        shared = (
            " Here the warm-up texts, fewer than a batch, share their batch with the first timed texts: its first "
            "result includes reading those, and its first pass is that much shorter."
            if doc["warmup"] < doc["batch"]
            else ""
        )
        lines += [
            "",
            f"{RAY_LLM}: `ray_llm_processor` over the same `ray.init`, the engine on a one-CPU bundle with the "
            "embedded engine's settings and dtype, its preprocess and postprocess tasks at 0.25 CPU each, Ray's "
            "default of up to 8 batches in flight in the engine (so batches overlap). Ray Data starts a stage's "
            "actors when a dataset executes and releases them when it ends, so the stage's engine does not "
            "outlive one `processor(dataset)` call: its processor is built once and, as for the Ray actor, the "
            "warm-up and all passes are one streamed execution, so its engine starts once, inside the first "
            "result, and no pass includes a start (each further call starts an engine again). The stage bundles "
            "rows up to its batch size, so a batch may straddle a pass boundary: a pass ends once every row "
            "before its boundary has arrived (per-batch arrival times: `batch_arrivals_s` in the .json)." + shared,
        ]
    lines += [
        "",
        f"In-process engine start + fit: {base['fit_s']:.1f} s (every contender fits in its driver process first; "
        "the Ray, ray.data.llm and Dask drivers then shut that engine down before scoring).",
        "",
        "Two actors, engines or workers on these two shared cores would add no compute (vLLM already uses both "
        "cores), so only one of each was measured.",
    ]
    proj = doc.get("projection")
    if proj is None:
        return "\n".join(lines) + "\n"
    lines += [
        "",
        f"**Projection (an estimate, not measured)** for {proj['rows']:,} rows with one actor per worker, from the "
        f"measured one-actor rate ({proj['per_worker_texts_per_s']:.1f} texts/s on this CPU) and start "
        f"({proj['actor_start_s']:.0f} s to the first result), assuming linear scaling: "
        "hours = (start + rows / (workers x rate)) / 3600.",
        "",
        "| workers | texts/s | hours |",
        "|---:|---:|---:|",
    ]
    for row in proj["table"]:
        lines.append(f"| {row['workers']} | {row['texts_per_s']:.0f} | {row['hours']:.2f} |")
    lines += [
        "",
        "On GPU nodes put the rate one GPU actor measures (`--only 'ray, 1 actor'` there) in the same formula. "
        "What limits it: each actor pays its start (process, `import vllm`, model load; on GPUs also the "
        "download or shared-storage read of the weights and CUDA graph capture) once, so the start matters "
        "only when rows per actor are few; the batch size sets how busy a GPU is kept (one Ray task per batch, "
        "a few in flight per actor: batches of hundreds of rows keep the per-task overhead small); and past "
        "some number of actors the input reads and output writes, not the model, set the pace.",
    ]
    return "\n".join(lines) + "\n"


FIT_TEXTS = 32


def _rows_dataset(rows: int, texts: list[str]) -> Any:
    """``rows`` rows (``row-<i>``, ``"<i>. "`` + an SST-2 text), lazily, in blocks of about 100 made by
    zero-CPU tasks (the actor holds both CPUs; ``ray.data.range`` takes no ``num_cpus``)."""
    import pandas as pd
    import ray
    from ray.data._internal.datasource.range_datasource import RangeDatasource

    def make(batch: pd.DataFrame) -> pd.DataFrame:
        ids = batch["id"].tolist()
        return pd.DataFrame({"id": [f"row-{i}" for i in ids], "text": [f"{i}. {texts[i % len(texts)]}" for i in ids]})

    source = RangeDatasource(n=rows, block_format="arrow", column_name="id")
    dataset = ray.data.read_datasource(source, num_cpus=0, override_num_blocks=max(4, rows // 100))
    return dataset.map_batches(make, batch_format="pandas", num_cpus=0)


def streaming_child(rows: int, batch: int) -> None:
    """One size, in this (fresh) process; prints a JSON line."""
    import pyarrow.parquet as pq
    import ray

    from llm_label_clf import LLMLabelClassifier, score_ray_dataset, shutdown_engines

    frame = common.csv("sst2_dev.csv")
    X, y = frame["text"].iloc[:FIT_TEXTS].tolist(), frame["label"].iloc[:FIT_TEXTS].to_numpy()
    texts = frame["text"].iloc[FIT_TEXTS:].tolist()  # a few hundred short texts: the closure's only data
    began = time.perf_counter()
    clf = LLMLabelClassifier(prompt=common.SST2_PROMPT, progress=False, low_mass="ignore").fit(X, y)
    fit_s = time.perf_counter() - began
    shutdown_engines()  # the actor's engine scores; none idles in the driver
    with tempfile.TemporaryDirectory() as out:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        ray.data.DataContext.get_current().enable_progress_bars = False
        try:
            store = ray.cluster_resources().get("object_store_memory", 0.0)
            scored = score_ray_dataset(
                _rows_dataset(rows, texts), clf, id_column="id", batch_size=batch, concurrency=1, num_cpus=2
            )
            start = time.time()
            scored.write_parquet(out, ray_remote_args={"num_cpus": 0})
            end = time.time()
        finally:
            ray.shutdown()
        paths = sorted(Path(out).rglob("*.parquet"), key=lambda p: p.stat().st_mtime)
        written = [(p.stat().st_mtime, pq.ParquetFile(p).metadata.num_rows) for p in paths]
        ids = [i for p in paths for i in pq.read_table(p, columns=["id"]).column("id").to_pylist()]
    if len(ids) != rows or set(ids) != {f"row-{i}" for i in range(rows)}:
        raise RuntimeError(f"{len(ids)} rows written ({len(set(ids))} distinct ids) for {rows}")
    first_at, first_rows = written[0]
    common.emit({
        "fit_s": fit_s,
        "score_began": start,
        "score_ended": end,
        "score_s": end - start,
        "first_output_s": first_at - start,  # the first file's mtime: actor and engine start, first batch
        "after_first_rows_per_s": (rows - first_rows) / max(end - first_at, 1e-9),
        "files": len(paths),
        "object_store_gib": store / 2**30,
    })


def _peak(samples: list[tuple[float, int]], lo: float, hi: float) -> float | None:
    inside = [rss for t, rss in samples if lo <= t <= hi]
    return max(inside) / 2**30 if inside else None


def run_size(rows: int, batch: int) -> dict[str, Any]:
    """One size in a fresh process, its process tree's RSS sampled."""
    ran = common.run_child([sys.executable, __file__, "--streaming-child", str(rows), "--batch", str(batch)])
    r, samples = ran.message, ran.memory.samples
    first = r["score_began"] + r["first_output_s"]
    middle = (first + r["score_ended"]) / 2
    r.update(
        rows=rows,
        blocks=max(4, rows // 100),
        wall_s=ran.seconds,
        rows_per_s=rows / r["score_s"],
        peak_rss_gib=ran.memory.peak / 2**30,
        scoring_peak_rss_gib=_peak(samples, r["score_began"], r["score_ended"]),
        # after the first output, first half vs second half: a per-row leak shows as a rise
        steady_peak_rss_gib=[_peak(samples, first, middle), _peak(samples, middle, r["score_ended"])],
        load_avg_1m=ran.load_avg_1m,
    )
    return r


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def streaming_markdown(doc: dict[str, Any]) -> str:
    m, runs = doc["machine"], doc["results"]
    small, large = runs[0], runs[-1]
    lines = [
        f"`score_ray_dataset` over a lazy Ray Data dataset of N rows (SST-2 dev texts cycled, each prefixed by its "
        f"index, blocks of about 100 rows), batches of {doc['batch']}, one actor with both cores, written with "
        f"`write_parquet` (nothing collected in the driver), built-in model in {doc['dtype']}, {m['cpu_model']} "
        f"({m['cpu_capability']}, {m['cores_usable']} cores), Ray {doc['ray']} (`ray.init(num_cpus=2)`, object "
        f"store {small['object_store_gib']:.1f} GiB), each size in a fresh process. Scoring: the `write_parquet` "
        "call (actor and engine start included). First output: from its start to the first file written. Peak "
        "RSS: the child's whole process tree (driver, raylet, GCS, the actor and its engine), over the whole run "
        "(the driver's fit included) and over the scoring call; steady: after the first output, its first and "
        "second half. Load average (1 min) before/after.",
        "",
        "| rows | blocks | files | wall s | scoring s | first output s | rows/s | rows/s after first output "
        "| peak RSS, run (GiB) | peak RSS, scoring (GiB) | steady 1st/2nd half (GiB) | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in runs:
        steady = "/".join(_gib(x) for x in r["steady_peak_rss_gib"])
        load = "/".join(f"{x:.1f}" for x in r["load_avg_1m"])
        lines.append(
            f"| {r['rows']:,} | {r['blocks']} | {r['files']} | {r['wall_s']:.1f} | {r['score_s']:.1f} | "
            f"{r['first_output_s']:.1f} | {r['rows_per_s']:.1f} | {r['after_first_rows_per_s']:.1f} | "
            f"{r['peak_rss_gib']:.2f} | {_gib(r['scoring_peak_rss_gib'])} | {steady} | {load} |"
        )
    if len(runs) > 1 and small["scoring_peak_rss_gib"] and large["scoring_peak_rss_gib"]:
        lines += [
            "",
            f"Peak RSS, {large['rows']:,} rows / {small['rows']:,} rows ({large['rows'] / small['rows']:.0f}x the "
            f"rows): {large['peak_rss_gib'] / small['peak_rss_gib']:.2f}x over the run, "
            f"{large['scoring_peak_rss_gib'] / small['scoring_peak_rss_gib']:.2f}x while scoring.",
        ]
    lines += [
        "",
        "Ray Data's streaming executor runs the read, the scoring actor and the write as a pipeline and caps what "
        "is in flight: by default its operators share at most half of the object store "
        "(`RAY_DATA_OBJECT_STORE_MEMORY_LIMIT_FRACTION`, 0.5) and an actor is handed a bounded number of batches "
        "at a time, so memory should not grow with rows: blocks are written and released as they are scored. At "
        "these sizes every input block (100 short rows, a few KiB) is far below that budget, so the executor may "
        "read them all ahead: a flat peak shows that nothing grows per row in the driver, the actor or its "
        "engine, not the object store's backpressure at work.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--streaming-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", choices=CONTENDERS, help="run only these contenders")
    args = common.arguments(parser, lambda doc: (streaming_markdown if "ray" in doc else markdown)(doc),
                            lambda a: "streaming" if a.streaming else "distributed", texts=200, warmup=32, passes=5,
                            batch=100, streaming=False, rows=[400, 3200])
    os.environ.setdefault("LLM_LABEL_CLF_DTYPE", "float32")  # exact comparisons across engines
    if args.child:
        child(args.child, args.texts, args.warmup, args.passes, args.batch)
    elif args.streaming_child is not None:
        streaming_child(args.streaming_child, args.batch)
    elif args.streaming:
        from importlib import metadata

        doc = common.record(ray=metadata.version("ray"), batch=args.batch, results=[])
        for rows in sorted(args.rows):
            doc["results"].append(run_size(rows, args.batch))
            print(rows, doc["results"][-1], flush=True)
        print(common.write("streaming", doc, streaming_markdown))
    else:
        doc = common.record(texts=args.texts, warmup=args.warmup, passes=args.passes, batch=args.batch, results={})
        for name in args.only or CONTENDERS:
            doc["results"][name] = run_contender(name, args)
            print(name, {k: v for k, v in doc["results"][name].items() if k != "proba"}, flush=True)
        if "ray, 1 actor" in doc["results"]:
            doc["projection"] = projection(doc)
        print(common.write("distributed", doc, markdown))


if __name__ == "__main__":
    main()

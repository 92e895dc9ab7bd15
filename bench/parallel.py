"""What ``n_jobs`` buys and costs: ``GridSearchCV`` over two prompts (3-fold,
SST-2 dev) with ``n_jobs=None``, and ``n_jobs=2`` on loky (workers read
through one shared server), on threading (one engine) and on loky with an
engine per worker (``LLM_LABEL_CLF_WORKER_ENGINE=own``). Each in a fresh
process: a cold fit, a warm fit, then ``predict_proba``; measured from
outside: model loads (vLLM ``EngineCore`` processes seen) and the peak RSS
of every process involved (shared server included). Scores and
probabilities are checked against ``n_jobs=None``'s.

Run: ``python bench/parallel.py [--texts 48]``; writes
``bench/results/parallel.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common  # noqa: E402

PROMPTS = ["Review: {text}\nSentiment (positive or negative):", "Text: {text}\nSentiment:"]
CONFIGS: dict[str, dict[str, Any]] = {
    "n_jobs=None": {"n_jobs": None},
    "n_jobs=2, loky (shared server)": {"n_jobs": 2, "backend": "loky"},
    "n_jobs=2, threading": {"n_jobs": 2, "backend": "threading"},
    "n_jobs=2, loky, an engine per worker": {"n_jobs": 2, "backend": "loky",
                                             "env": {"LLM_LABEL_CLF_WORKER_ENGINE": "own"}},
}


def child(config: dict[str, Any], texts: int) -> None:
    """One configuration, in this (fresh) process; prints a JSON line."""
    import joblib
    from sklearn.model_selection import GridSearchCV

    from llm_label_clf import LLMLabelClassifier
    from llm_label_clf.engines.local import engine_count

    frame = common.csv("sst2_dev.csv").head(texts)
    X, y = frame["text"].tolist(), frame["label"].to_numpy()
    clf = LLMLabelClassifier(prompt=PROMPTS[0], progress=False, low_mass="ignore")
    times = []
    with joblib.parallel_config(backend=config.get("backend", "loky")):
        for _ in range(2):
            search = GridSearchCV(clf, {"prompt": PROMPTS}, cv=3, n_jobs=config["n_jobs"], error_score="raise")
            start = time.perf_counter()
            search.fit(X, y)
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        proba = search.predict_proba(X)
        predict_s = time.perf_counter() - start
        workers = {}
        if config.get("backend") == "loky":
            probe = joblib.delayed(lambda: (os.getpid(), engine_count()))
            workers = dict(joblib.Parallel(n_jobs=2)(probe() for _ in range(4)))
    common.emit({"cold_fit_s": times[0], "warm_fit_s": times[1], "predict_s": predict_s, "engines_here": engine_count(),
          "engines_in_probed_workers": sum(workers.values()), "best_params": search.best_params_,
          "mean_test_score": search.cv_results_["mean_test_score"].tolist(), "proba": proba.tolist()})


def run_config(name: str, config: dict[str, Any], texts: int) -> dict[str, Any]:
    """One configuration in a fresh process with a server registry of its own,
    sampling every involved process's memory and the engine processes seen."""
    import psutil

    from llm_label_clf.engines.shared import SHARED_DIR_ENV, SHARED_IDLE_ENV, Registry, stop_shared_servers

    registry_dir = Path(tempfile.mkdtemp(prefix="llc-parallel-"))
    env = {**os.environ, **config.get("env", {}), SHARED_DIR_ENV: str(registry_dir), SHARED_IDLE_ENV: "60"}
    registry, servers, engine_cores = Registry(registry_dir), set(), set()

    def involved(root: Any) -> list[Any]:
        servers.update(entry["pid"] for entry in filter(None, map(registry.read, registry.names())))
        processes = {p.pid: p for p in common.family(root)}
        for pid in servers:
            try:
                processes.update((p.pid, p) for p in common.family(psutil.Process(pid)))
            except psutil.Error:
                continue
        for p in processes.values():
            try:
                if p.name().startswith("VLLM::EngineCor"):
                    engine_cores.add(p.pid)
            except psutil.Error:
                continue
        return list(processes.values())

    try:
        ran = common.run_child([sys.executable, __file__, "--child", json.dumps(config), "--texts", str(texts)],
                               env=env, timeout=1800, processes=involved)
    finally:
        os.environ[SHARED_DIR_ENV] = str(registry_dir)
        try:
            stop_shared_servers()
        finally:
            del os.environ[SHARED_DIR_ENV]
    return {**ran.message, "wall_s": ran.seconds, "peak_rss_gib": ran.memory.peak / 2**30,
            "model_loads": len(engine_cores), "shared_servers": len(servers), "load_avg_1m": ran.load_avg_1m}


def markdown(doc: dict[str, Any]) -> str:
    import numpy as np

    m = doc["machine"]
    base = doc["results"].get("n_jobs=None") or next(iter(doc["results"].values()))
    lines = [
        f"GridSearchCV over 2 prompts, 3-fold, {doc['texts']} SST-2 dev texts, built-in model, "
        f"{m['cpu_model']} ({m['cpu_capability']}, {m['cores_usable']} cores), each configuration in a fresh "
        "process. Model loads: vLLM engine processes seen; peak RSS: every process involved (workers, "
        "engines, the shared server), sampled every 0.25 s.",
        "",
        "| configuration | model loads | peak RSS (GiB) | cold fit s | warm fit s | process wall s "
        "| same best prompt and accuracy | max abs diff proba |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for name, r in doc["results"].items():
        same = r["best_params"] == base["best_params"] and r["mean_test_score"] == base["mean_test_score"]
        diff = float(np.abs(np.array(r["proba"]) - np.array(base["proba"])).max())
        lines.append(
            f"| {name} | {r['model_loads']} | {r['peak_rss_gib']:.2f} | {r['cold_fit_s']:.1f} | "
            f"{r['warm_fit_s']:.1f} | {r['wall_s']:.0f} | {'yes' if same else 'NO'} | {diff:.2g} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", choices=list(CONFIGS), help="run only these configurations")
    args = common.arguments(parser, markdown, "parallel", texts=48)
    os.environ.setdefault("LLM_LABEL_CLF_DTYPE", "float32")  # exact comparisons across engines
    if args.child:
        child(json.loads(args.child), args.texts)
        return
    doc = common.record(texts=args.texts, results={})
    for name in args.only or CONFIGS:
        doc["results"][name] = run_config(name, CONFIGS[name], args.texts)
        print(name, {k: v for k, v in doc["results"][name].items() if k != "proba"}, flush=True)
    print(common.write("parallel", doc, markdown))


if __name__ == "__main__":
    main()

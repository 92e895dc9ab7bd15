"""``classify`` and ``evaluate`` over a table of any length: fitted once, then
classified, written and committed a chunk at a time; ``--resume`` refuses
an output written with other settings or from another input
(docs/architecture.md: ``cli/stream.py``)."""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..models.builtin import file_digest
from .chunks import CHUNK_ROWS, Source, open_input
from .hints import OPTION_OF, cli_hint, engine_hint
from .options import estimator_params
from .resume import Progress, RowDigest, first_changed_row, progress_path, setting_changes
from .rows import Rows, Survey, Train, announce_bad_rows, as_strings, new_columns, prompt_inputs, with_predictions
from .sinks import open_sink
from .tables import UsageError

__all__ = ["EngineFailure", "Job", "Train", "print_report", "random_state", "resume_point", "run", "step"]


#: Estimator parameters that never change an output's numbers or columns: a
#: resumed run may set them differently.
_SAME_NUMBERS = ("progress", "read_store", "batch_size", "low_mass", "low_mass_threshold")


class EngineFailure(Exception):
    """The engine could not start or a read failed: exit status 1."""


@dataclass(frozen=True)
class Job:
    """One ``classify`` or ``evaluate`` run: its options, input and what the
    survey found, the classes (in output order), the prompt's fields, the
    engine options, ``--train``, where skipped rows are listed, the output's
    format and the progress of the run it resumes (or None)."""

    args: argparse.Namespace
    source: Source
    found: Survey
    labels: list[str]
    fields: dict[str, str]
    options: dict[str, Any] | None
    train: Train | None
    skipped: str | None
    fmt: str | None
    resumed: Progress | None

    @property
    def evaluate(self) -> bool:
        return self.args.command == "evaluate"

    @property
    def chunk_rows(self) -> int:
        return self.args.chunk_rows


def print_report(gold: Any, pred: Any, proba: Any, classes: Any, labels: Sequence[str] | None = None) -> None:
    """scikit-learn's classification report, then accuracy and log-loss.
    ``proba``'s columns are in ``classes`` order (sorted, as log_loss reads them)."""
    from sklearn.metrics import accuracy_score, classification_report, log_loss

    print(classification_report(gold, pred, labels=labels, digits=3, zero_division=0))
    print(f"accuracy {accuracy_score(gold, pred):.3f}  log-loss {log_loss(gold, proba, labels=classes):.3f}")


def resume_point(args: argparse.Namespace) -> Progress | None:
    """The progress of the run ``--resume`` continues, and ``--chunk-rows``
    and a drawn ``--random-state`` set as that run had them; None for a fresh
    run (also when OUT is not there yet: nothing to resume). Raises
    UsageError when OUT is there without its progress file."""
    progress = None
    if args.resume and args.output is not None:
        path = progress_path(args.output)
        if Path(args.output).exists() and not path.exists():
            raise UsageError(
                f"cannot resume {args.output}: it has no progress file {path} (written as a run goes), so "
                "which rows it holds cannot be checked; start over with --overwrite"
            )
        if Path(args.output).exists():
            progress = Progress.load(path, args.output)
        else:
            print(f"llm-label-clf {args.command}: nothing to resume in {args.output}: starting", file=sys.stderr)
    if progress is not None and args.chunk_rows is None:
        args.chunk_rows = progress.settings.get("chunk_rows")
    if progress is not None and args.random_state is None:
        args.random_state = progress.settings.get("random_state")
    if args.chunk_rows is None:
        args.chunk_rows = CHUNK_ROWS
    return progress


def _settings(job: Job) -> dict[str, Any]:
    """What decides the output's numbers and columns, as the progress file keeps it."""
    args = job.args
    params = {k: v for k, v in estimator_params(args, job.options).items() if k not in _SAME_NUMBERS}
    settings = {
        "command": args.command, "labels": job.labels, "text_column": args.text_column, "bad_rows": args.bad_rows,
        "chunk_rows": job.chunk_rows, "train": file_digest(job.train.path) if job.train is not None else None,
        **params,
    }  # fmt: skip
    if job.evaluate:
        settings["label_column"] = args.label_column
    return json.loads(json.dumps(settings))


def _check_resumable(job: Job, settings: dict[str, Any]) -> None:
    """Raises UsageError when the output was written with other settings or
    from another input (naming its first changed row)."""
    progress, args = job.resumed, job.args
    changed = setting_changes(progress.settings, settings)
    if changed:
        raise UsageError(
            f"cannot resume {args.output}: it was written with other settings ({'; '.join(changed)}); run with "
            "the same options, or start over with --overwrite"
        )
    if job.found.rows >= progress.rows and job.found.digest == progress.digest:
        return
    strings = [args.text_column] + ([args.label_column] if job.evaluate else [])
    columns = [column for column, _ in job.found.cells]
    listed = _listed_rows(job)
    try:
        with open_input(args.output, args.sep) as written:
            row = first_changed_row(
                job.source.chunks(job.chunk_rows, strings), written.chunks(job.chunk_rows, strings), columns,
                progress.rows, listed,
            )
    except UsageError:  # OUT unreadable past its committed rows (a torn line): say what the hash says
        row = None
    where = f"row {row} differs from" if row is not None else "its first rows differ from"
    if row is None and job.found.rows < progress.rows:
        where = f"it has {job.found.rows} rows, fewer than the {progress.rows} of"
    raise UsageError(
        f"cannot resume {args.output}: {job.source.path} is not the input it was written from ({where} the "
        f"input of that run, counting data rows from 0); pass that input, or start over with --overwrite"
    )


def _listed_rows(job: Job) -> set[int]:
    """The rows the skipped rows' list of the resumed run names (none when
    it is not there or not readable)."""
    if job.skipped is None or not Path(job.skipped).exists():
        return set()
    try:
        with open_input(job.skipped, job.args.sep) as listed:
            return {int(r) for frame in listed.chunks(job.chunk_rows) for r in frame["row"].tolist()}
    except (UsageError, KeyError, ValueError):
        return set()


def step(call: Callable[[], Any], args: argparse.Namespace, where: str, rows: Sequence[int] | None) -> Any:
    """Runs one fit or predict call of the estimator: a ValueError or a
    ``ReadStoreError`` is a usage error and any other failure the engine's, their messages and our warnings
    (low label mass, truncation; said on stderr) in option syntax naming rows
    of ``where`` (``rows[k]`` is the row of X item k). Other warnings go back
    to the warning filters."""
    from ..exceptions import LowLabelMassWarning, ReadStoreError, TiedPredictionWarning, TruncationWarning

    error: Exception | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call()
        except (ValueError, ReadStoreError) as exc:  # a bad store file is the user's to fix, as a bad option is
            error = UsageError(cli_hint(str(exc), where=where, rows=rows))
        except Exception as exc:
            message = cli_hint(str(exc), where=where, rows=rows)
            error = EngineFailure(f"the engine failed: {type(exc).__name__}: {message}")
            error.__cause__ = exc
    for w in caught:
        if issubclass(w.category, (LowLabelMassWarning, TiedPredictionWarning, TruncationWarning)):
            print(
                f"llm-label-clf {args.command}: warning: {cli_hint(str(w.message), where=where, rows=rows)}",
                file=sys.stderr,
            )
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if error is not None:
        raise error
    return result


def _fitted(job: Job) -> Any:
    """The classifier, its engine set up (vLLM refused no option; it starts
    at the first read the read store lacks) and fitted: without ``--train``
    zero-shot (``fit`` gets no ``y``; the classes come from the labels, each
    written as ``--label-words`` says, as Python's ``label_words`` writes
    them, and a uniform sample of the input's good rows checks how the labels
    tokenize and calibrates, as ``fit(texts)`` does), else on those labelled rows."""
    from ..classifier import LLMLabelClassifier
    from ..engines import get_engine
    from ..exceptions import ModelNotFoundError
    from ..fitting.label_words import label_mapping

    args, labels = job.args, job.labels
    clf = LLMLabelClassifier(**estimator_params(args, job.options), labels=label_mapping(labels, args.label_words))
    try:
        get_engine(args.model, job.options)
    except ModelNotFoundError as exc:  # a path that is not there is the user's to fix: exit 2
        raise UsageError(f"--model: {cli_hint(str(exc))}") from exc
    except Exception as exc:
        given = f" with engine options {job.options}" if job.options else ""
        message = f"cannot start the engine for model {args.model!r}{given}: {type(exc).__name__}: {cli_hint(str(exc))}"
        raise EngineFailure(engine_hint(message, list(OPTION_OF.values()))) from exc
    if job.train is None:
        step(lambda: clf.fit(job.found.sample), args, job.source.path, None)
    else:
        step(lambda: clf.fit(job.train.X, job.train.y), args, job.train.path, None)
    return clf.set_params(progress=False)  # the command's own bar counts the rows


class _Tally:
    """``evaluate``'s classified rows, from output chunks (their label column,
    probabilities and predictions; bad rows kept in place left out)."""

    def __init__(self, job: Job) -> None:
        self.job, self.frames = job, []

    def add(self, frame: Any, path: str) -> None:
        job = self.job
        frame = frame[frame["error"].isna()] if "error" in frame.columns else frame
        gold = as_strings(frame, job.args.label_column, path, "label").to_numpy(dtype=object)
        self.frames.append((gold, frame[[f"proba_{label}" for label in job.labels]].to_numpy(dtype=float),
                            frame["predicted"].to_numpy(dtype=object)))  # fmt: skip

    def read_back(self) -> None:
        """Adds the rows of the resumed output (cut back to its committed state), a chunk at a time."""
        args = self.job.args
        with open_input(args.output, args.sep) as written:
            for frame in written.chunks(self.job.chunk_rows, [args.label_column, "predicted"]):
                self.add(frame, args.output)

    def report(self) -> None:
        import numpy as np

        labels = self.job.labels
        gold, proba, predicted = (np.concatenate(parts) for parts in zip(*self.frames, strict=True))
        classes = sorted(labels)  # log_loss reads y_pred's columns in sorted-label order
        order = [labels.index(c) for c in classes]
        print_report(gold, predicted, proba[:, order], np.array(classes, dtype=object), labels)


def run(job: Job) -> None:
    """Classifies the job's input into its output, a chunk at a time."""
    from tqdm.auto import tqdm

    args, found, resumed = job.args, job.found, job.resumed
    settings = _settings(job)
    if resumed is not None:
        _check_resumable(job, settings)
    announce_bad_rows(found, args, job.skipped)
    done = resumed.rows if resumed is not None else 0
    remaining = found.used - (done - sum(1 for r in found.bad if r < done))
    clash = [c for c in new_columns(job.labels, args.bad_rows == "keep") if c in found.columns]
    if clash:
        print(f"llm-label-clf {args.command}: note: replacing the input's column(s) {', '.join(clash)}",
              file=sys.stderr)  # fmt: skip
    what = f"texts from {args.input} with {args.model} ..."
    if resumed is not None:
        what = f"the remaining {remaining} {what}"
        print(f"Resuming {args.output}: its first {done} of {found.rows} input rows are done; classifying {what}",
              file=sys.stderr, flush=True)  # fmt: skip
    else:
        print(f"Classifying {found.used} {what}", file=sys.stderr, flush=True)
    clf = _fitted(job) if remaining else None
    sink = open_sink("-" if args.output is None and not job.evaluate else args.output, job.fmt, args.sep)
    sink.begin(resumed.output if resumed is not None else None)
    tracked = progress_path(args.output) if args.output not in (None, "-") and job.fmt != "json" else None
    digest = RowDigest([column for column, _ in found.cells])
    progress = resumed or Progress(args.input, 0, 0, digest.hexdigest(), sink.state(), settings)  # of no rows yet
    progress.save(tracked)
    tally = _Tally(job) if job.evaluate else None
    if tally is not None and resumed is not None and resumed.output.get("rows"):
        tally.read_back()
    strings = [args.text_column] + ([args.label_column] if job.evaluate else [])
    bar = tqdm(total=found.rows, initial=done, unit="row", disable=args.no_progress, file=sys.stderr)
    classified = 0
    try:
        for index, chunk in enumerate(job.source.chunks(job.chunk_rows, strings, found.dtypes)):
            digest.update(chunk)
            if index < progress.chunks:
                continue
            rows = Rows.of(chunk, found.cells, args.bad_rows == "keep")
            first = index * job.chunk_rows
            proba, predicted = _classify_chunk(clf, chunk, rows, job, [first + i for i in rows.used])
            out = with_predictions(chunk, job.labels, proba, predicted, rows)
            if not sink.write(out):
                break  # stdout's reader has gone (| head): it has what it wanted
            classified += len(rows.used)
            if tally is not None:
                tally.add(out, args.input)
            progress.rows, progress.chunks = progress.rows + len(chunk), index + 1
            progress.digest, progress.output = digest.hexdigest(), sink.state()
            progress.save(tracked)
            if bar.n + len(chunk) < found.rows:
                bar.update(len(chunk))
            else:  # the last chunk: close() draws the final line, once
                bar.n = found.rows
    finally:
        bar.close()
    sink.finish()
    progress.complete, progress.output = True, sink.state()
    progress.save(tracked)
    if tally is not None:
        if found.bad:
            print(f"llm-label-clf evaluate: the report leaves out the {len(found.bad)} bad row(s)", file=sys.stderr)
        tally.report()
    if args.output not in (None, "-"):
        rows = progress.output["rows"]
        print(f"Wrote {rows} rows to {args.output} ({classified} classified in this run)", file=sys.stderr)


def _classify_chunk(clf: Any, chunk: Any, rows: Rows, job: Job, numbers: list[int]) -> tuple[Any, Any]:
    """One chunk's probabilities (columns in labels order) and predictions;
    ``numbers`` are the input rows of the rows classified."""
    import numpy as np

    from ..fitting.shaping import predicted_from
    from ..fitting.ties import tie_priors

    if not rows.used:
        return np.zeros((0, len(job.labels))), np.zeros(0, dtype=object)
    X = prompt_inputs(chunk.iloc[rows.used], job.found.cells, job.fields, job.source.path)
    proba = step(lambda: clf.predict_proba(X), job.args, job.source.path, numbers)
    classes = clf.classes_.tolist()
    predicted = step(lambda: predicted_from("single", proba, clf.classes_, log=False, priors=tie_priors(clf)),
                     job.args, job.source.path, numbers)  # exact ties as predict breaks them, with its warning
    return proba[:, [classes.index(label) for label in job.labels]], predicted


def random_state(args: argparse.Namespace, train: Train | None) -> None:
    """Draws ``--random-state`` for a run that fits on ``--train`` without one,
    so that the progress file records it and a resumed run draws the same
    few-shot examples and folds."""
    if args.random_state is None and train is not None:
        args.random_state = secrets.randbelow(2**31)

"""What ``LLMLabelClassifier.fit`` decides, as functions of its parameters
and the training data that return typed results the estimator sets its
fitted attributes from: one output's reading plan and calibration
(``OutputFit``); several outputs as one such fit per output, on a clone of
the estimator each (as scikit-learn's ``MultiOutputClassifier`` holds them);
or one joint read (``JointFit``). Nothing here predicts: calibration reads
the training texts through the plan."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sklearn.base import clone

from ..engines.handle import Engine
from ..reading.build import OutputReading, ReadingSettings, build_reading
from ..reading.driver import read_plans
from ..reading.joint import JOINT_PROMPT, JointPlan, answer_regex, code_token_ids, joint_codes, joint_layout
from ..reading.plan import ReadingPlan
from ..reading.prompts import DEFAULT_PROMPT, LABELS_FIELD, OPTIONS_FIELD, PromptTemplate
from ..reading.render import check_fields
from ..reading.unshown import read_unshown
from ..store.handle import store_ref
from .calibration import (
    Calibration,
    class_prior,
    content_free_records,
    domain_context_records,
    fit_calibration,
)
from .fitted import FittedOutput, applies_log_proba
from .label_words import warn_label_words
from .outputs import (
    LABEL_FIELD,
    YES_NO,
    OutputClasses,
    class_labels,
    multilabel_texts,
    one_class_error,
    output_classes,
    output_labels,
    output_prompts,
)
from .targets import Target, unique_classes
from .threshold import FIXED_THRESHOLD, fitted_threshold

__all__ = [
    "JointFit",
    "OutputFit",
    "content_free_log_proba",
    "fit_choice",
    "fit_joint",
    "fit_output",
    "fit_separate",
    "uses_choice",
]

Records = Sequence[dict[str, str]]
EngineGetter = Callable[[], Engine]


@dataclass(frozen=True)
class OutputFit:
    """One output's fit: how it is read (``reading``: plan, verbalizers,
    few-shot rows, ...), the template and chat setting in use, and the
    ``output`` prediction goes through (classes, calibration); and the
    training rows the calibration read, with their calibrated
    log-probabilities (None when it read none)."""

    reading: OutputReading
    prompt: str
    chat: bool
    output: FittedOutput
    fit_reads: tuple[np.ndarray, np.ndarray] | None = None


@dataclass(frozen=True)
class JointFit:
    """A joint read's fit: one plan answering every output, and per output
    its name, classes and option letters (with the answer format's regex and
    the letters' token ids)."""

    plan: JointPlan
    prompt: str
    chat: bool
    names: list[str]
    options: list[dict[str, str]]
    regex: str
    token_ids: list[list[int]]
    outputs: list[FittedOutput]


def content_free_log_proba(plan: ReadingPlan, engine: Engine, records: Records | None = None) -> np.ndarray:
    """The plan's log-probabilities of ``records``, by default the
    content-free inputs (every field ``X`` fills set to "N/A", "" and
    "[MASK]"): contextual calibration's bias."""
    if records is None:
        records = content_free_records(plan.layout.template.input_fields)
    return read_plans([plan], records, engine, batch_size=32, progress=False)[0].log_proba()


def uses_chat(chat: Any, tokenizer: Any) -> bool:
    """Whether prompts go through the chat template: ``chat``, where "auto"
    means whenever the model has one."""
    return bool(tokenizer.chat_template) if chat == "auto" else bool(chat)


def fit_output(
    est: Any,
    records: Records,
    y: np.ndarray | None,
    get_engine: EngineGetter,
    *,
    where: str = "",
    checked: OutputClasses | None = None,
) -> OutputFit:
    """One output: ``classes_`` from ``y`` (or, without ``y``, the classes
    ``labels`` names), the reading plan, then the calibration. The classes
    and their labels are checked before the engine is asked for (``checked``:
    already done, as ``output_classes`` does it). ``where`` (e.g. "output
    'topic'") names the output in warnings."""
    owner = type(est).__name__
    out = checked if checked is not None else output_classes(est, y)
    classes, y_index, labels = out.classes, out.y_index, out.labels
    engine = get_engine()
    chat = uses_chat(est.chat, engine.tokenizer)
    settings = ReadingSettings(
        template=DEFAULT_PROMPT if est.prompt is None else est.prompt,
        chat=chat,
        instructions=est.instructions,
        label_mode=est.label_mode,
        length_norm=est.length_norm,
        prune_margin=est.prune_margin,
        few_shot=int(est.few_shot),
        random_state=est.random_state,
        too_long=est.too_long,
        owner=owner,
    )
    reading = build_reading(
        settings, classes.tolist(), labels, records, y_index, engine.tokenizer, engine.max_model_len
    )
    ref = store_ref(est)  # needs no started engine: reads the store holds start none
    if ref is not None:
        reading = replace(reading, plan=replace(reading.plan, store=ref))
    if out.given is None:
        written = [a[0] for a in labels] if reading.options is not None else [v[0] for v in reading.verbalizers]
        owner_here = f"{owner}: {where}" if where else owner
        warn_label_words(owner_here, classes.tolist(), written, est.label_words, options=reading.options is not None)
    plan = reading.plan

    seen: list[tuple[np.ndarray, np.ndarray]] = []

    def log_proba_of(rows: np.ndarray) -> np.ndarray:
        # an example text is read with itself swapped out, as cross-validation scores it
        found = read_unshown(plan, reading.verbalizers, records, y_index, rows, reading.few_shot_rows, engine,
                             few_shot=int(est.few_shot), random_state=est.random_state, batch_size=est.batch_size,
                             progress=est.progress and est.calibration == "learned", owner=owner).log_proba()
        seen.append((np.asarray(rows), found))
        return found

    rows = np.arange(len(records))
    fields = plan.layout.template.input_fields
    calibration = fit_calibration(
        est.calibration,
        log_proba_of,
        lambda: content_free_log_proba(plan, engine),
        rows,
        y_index,
        class_prior(y_index, len(classes), est.calibration_prior),
        class_weight=est.class_weight,
        classes=classes.tolist(),
        random_state=est.random_state,
        owner=owner,
        domain_context=None if est.calibration_prior == "uniform" else lambda: content_free_log_proba(
            plan, engine, domain_context_records([records[i] for i in rows], fields, est.random_state)),
    )
    read = (seen[-1][0], calibration.apply(seen[-1][1])) if seen else None
    return OutputFit(reading, settings.template, chat, FittedOutput(classes, calibration), read)


def fit_separate(
    est: Any, records: Records, target: Target, get_engine: EngineGetter
) -> tuple[list[Any], list[OutputFit], float]:
    """Several outputs: per column of ``y`` (or per label of a multi-label
    ``y``) a clone of ``est`` with that output's prompt and labels, and its
    fit, all on the same shared engine; and the multi-label threshold
    (``fitted_threshold``)."""
    prompts = output_prompts(est.prompt, est.labels, target, est.label_words)
    names = target.names if target.names is not None else list(range(len(target.columns)))
    subs, checked = [], []
    for j, column in enumerate(target.columns):  # every output checked before the engine is asked for
        sub = clone(est).set_params(prompt=prompts[j], labels=output_labels(est.labels, target, j))
        classes = np.array([0, 1]) if target.kind == "multilabel" else None
        try:
            checked.append(output_classes(sub, column, classes=classes))
        except ValueError as exc:
            raise ValueError(f"output {names[j]!r}: {exc}") from None
        subs.append(sub)
    fits = []
    for j, (sub, column) in enumerate(zip(subs, target.columns, strict=True)):
        where = f"output {names[j]!r}"
        try:
            fits.append(fit_output(sub, records, column, get_engine, where=where, checked=checked[j]))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    reads = [None if f.fit_reads is None else (f.fit_reads[0], np.exp(f.fit_reads[1][:, 1])) for f in fits]
    threshold = fitted_threshold(est.threshold, reads) if target.kind == "multilabel" else FIXED_THRESHOLD
    return subs, fits, threshold


def uses_choice(multilabel_read: str, prompt: Any) -> bool:
    """Whether a multi-label ``y`` is read by one choice read over every
    label: "choice", or "auto" with a prompt that has no ``{label}`` field."""
    if multilabel_read != "auto":
        return multilabel_read == "choice"
    return not (isinstance(prompt, str) and LABEL_FIELD in PromptTemplate.parse(prompt).fields)


def fit_choice(
    est: Any, records: Records, target: Target, get_engine: EngineGetter
) -> tuple[OutputFit, list[FittedOutput], float]:
    """A multi-label ``y`` read once per text over every label: the reader
    (``est`` zero-shot over the labels' texts, uncalibrated), then per label
    its share of that read as (does not apply, applies), calibrated on the
    training texts with that label's 0/1 column; and the threshold
    (``fitted_threshold``) on every training text."""
    name = type(est).__name__
    if est.few_shot:
        raise ValueError(f"{name}: few_shot={est.few_shot!r} needs one answer per text: a multi-label y read by "
                         "choice has none. Use multilabel_read='yes_no' (a {label} field in the prompt) or few_shot=0")
    if isinstance(est.prompt, str) and LABEL_FIELD in PromptTemplate.parse(est.prompt).fields:
        raise ValueError(f"{name}: multilabel_read='choice' lists every label in the prompt's {{{LABELS_FIELD}}}; "
                         f"remove {{{LABEL_FIELD}}} from prompt={est.prompt!r}, or use multilabel_read='yes_no'")
    if not (est.prompt is None or isinstance(est.prompt, str)):
        raise ValueError(f"{name}: a multi-label y takes one prompt, not a list")
    texts = multilabel_texts(est.labels, target, est.label_words)
    if len(texts) < 2:
        raise ValueError(f"{name}: a choice read needs 2 labels or more; this y has one: use multilabel_read='yes_no'")
    reader = clone(est).set_params(labels=dict(enumerate(texts)), calibration=None)
    fit = fit_output(reader, records, None, get_engine, where="the labels' choice read")
    engine = get_engine()
    every = np.arange(len(records))
    found = None
    if est.calibration in ("auto", "batch", "learned"):  # the others read no training text
        found = read_plans([fit.reading.plan], records, engine, batch_size=est.batch_size,
                           progress=est.progress)[0].log_proba()
    content_free: list[np.ndarray] = []
    outputs, p_yes = [], []
    for j, column in enumerate(target.columns):
        out = output_classes(clone(est).set_params(labels=YES_NO), column, classes=np.array([0, 1]))

        def content_free_log_proba_of(j: int = j) -> np.ndarray:
            if not content_free:
                content_free.append(content_free_log_proba(fit.reading.plan, engine))
            return applies_log_proba(content_free[0][:, j])

        reads = None if found is None else applies_log_proba(found[:, j])
        calibration = fit_calibration(
            est.calibration, lambda rows, reads=reads: reads[rows], content_free_log_proba_of, every,
            out.y_index, class_prior(out.y_index, 2, est.calibration_prior), class_weight=est.class_weight,
            classes=[0, 1], random_state=est.random_state,
            owner=f"{name}: label {(target.names[j] if target.names is not None else j)!r}",
        )
        outputs.append(FittedOutput(np.array([0, 1]), calibration, column=j))
        p_yes.append(None if reads is None else (every, np.exp(calibration.apply(reads)[:, 1])))
    threshold = fitted_threshold(est.threshold, p_yes)
    return fit, outputs, threshold


def fit_joint(est: Any, records: Records, target: Target, get_engine: EngineGetter) -> JointFit:
    """A joint read: per output, its classes and their option letters' tokens;
    checks that the other parameters apply to a joint read."""
    name = type(est).__name__
    if target.kind != "multioutput":
        raise ValueError(
            f"{name}: multioutput_read='joint' reads several outputs (a 2-D y of classes); "
            f"this y is {target.kind}: use multioutput_read='separate'"
        )
    unsupported = {
        "few_shot": est.few_shot != 0,
        "calibration": est.calibration not in (None, "auto"),  # "auto" applies where it can: not here
        "length_norm": est.length_norm is not None,
        "prune_margin": est.prune_margin is not None,
        "label_mode": est.label_mode not in ("auto", "options"),
    }
    for param, used in unsupported.items():
        if used:
            raise ValueError(
                f"{name}: {param}={getattr(est, param)!r} applies to separate reads only; a joint read "
                "letters the options of every output in one prompt. Use "
                "multioutput_read='separate' or leave it unset"
            )
    if not (est.prompt is None or isinstance(est.prompt, str)):
        raise ValueError(f"{name}: a joint read asks every output in one prompt: give one template, not a list")
    template = PromptTemplate.parse(JOINT_PROMPT if est.prompt is None else est.prompt)
    if LABELS_FIELD in template.fields or OPTIONS_FIELD in template.fields:
        raise ValueError(
            f"{name}: a joint read lists each output's options itself; remove {{labels}}/{{options}} from the prompt"
        )
    check_fields(template, records[0], owner=name)
    names = target.names if target.names is not None else [f"output {j + 1}" for j in range(len(target.columns))]
    classes, texts, defaults = [], [], []
    for j, column in enumerate(target.columns):
        where = f"{name}: output {names[j]!r}"
        values, _ = unique_classes(column, f"output {names[j]!r}: ")
        if len(values) < 2:
            raise one_class_error(where, values.tolist()[0])
        classes.append(values)
        given = output_labels(est.labels, target, j)
        aliases = class_labels(given, values.tolist(), where, est.label_words)
        texts.append([a[0].strip() for a in aliases])
        if given is None:
            defaults.append((where, values.tolist(), texts[-1]))
    codes = [joint_codes(len(c), names[j]) for j, c in enumerate(classes)]
    for where, values, written in defaults:
        warn_label_words(where, values, written, est.label_words, options=True)
    engine = get_engine()
    chat = uses_chat(est.chat, engine.tokenizer)
    joint_names = [str(n) for n in names]
    options = [dict(zip(c, t, strict=True)) for c, t in zip(codes, texts, strict=True)]
    layout = joint_layout(template, joint_names, options, chat=chat, instructions=est.instructions,
                          too_long=est.too_long)
    regex = answer_regex(codes)
    token_ids = code_token_ids(engine.tokenizer, codes)
    plan = JointPlan(layout, tuple(tuple(ids) for ids in token_ids), regex)
    uniform = [Calibration(None, class_prior(None, len(c))) for c in classes]
    outputs = [FittedOutput(c, u, checks_mass=False) for c, u in zip(classes, uniform, strict=True)]
    return JointFit(plan, template.template, chat, joint_names, options, regex, token_ids, outputs)

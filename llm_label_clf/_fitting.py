"""What ``LLMLabelClassifier.fit`` decides, as functions of its parameters
and the training data that return the fitted attributes: one output's reading
plan and calibration; several outputs as one fitted estimator per output (as
scikit-learn's ``MultiOutputClassifier`` holds them); or one joint read.
Nothing here predicts: calibration reads the training texts through the plan."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.utils import check_random_state

from ._label_words import warn_label_words
from ._per_output import OutputClasses, class_labels, one_class_error, output_classes, output_labels, output_prompts
from ._targets import Target, unique_classes
from .calibration import (
    LearnedCalibrator,
    batch_bias,
    class_prior,
    content_free_records,
    contextual_bias,
    index_weights,
)
from .engines.handle import Engine
from .reading.build import ReadingSettings, build_reading
from .reading.driver import read_plans
from .reading.joint import JOINT_PROMPT, JointPlan, answer_regex, code_token_ids, joint_codes, joint_layout
from .reading.plan import ReadingPlan
from .reading.prompts import DEFAULT_PROMPT, LABELS_FIELD, OPTIONS_FIELD, PromptTemplate
from .reading.render import check_fields

__all__ = ["fit_joint", "fit_output", "fit_separate"]

Records = Sequence[dict[str, str]]
EngineGetter = Callable[[], Engine]
#: Training texts read at fit time for batch calibration's small-call fallback.
BATCH_PRIOR_ROWS = 256


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
) -> dict[str, Any]:
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
    if out.given is None:
        written = [a[0] for a in labels] if reading.options is not None else [v[0] for v in reading.verbalizers]
        owner_here = f"{owner}: {where}" if where else owner
        warn_label_words(owner_here, classes.tolist(), written, est.label_words, options=reading.options is not None)
    log_prior = class_prior(y_index, len(classes), est.calibration_prior)
    bias, calibrator = _fit_calibration(
        est, reading.plan, records, y_index, reading.few_shot_rows, engine, log_prior, classes
    )
    return {
        "classes_": classes,
        "chat_": chat,
        "prompt_": settings.template,
        "verbalizers_": reading.verbalizers,
        "label_sequences_": reading.label_sequences,
        "label_mode_": reading.label_mode,
        "label_token_ids_": reading.label_token_ids,
        "options_": reading.options,
        "few_shot_rows_": reading.few_shot_rows,
        "few_shot_prefix_": reading.few_shot_prefix,
        "class_prior_": np.exp(log_prior),
        "calibration_bias_": bias,
        "calibrator_": calibrator,
        "plans_": [reading.plan],
    }


def _fit_calibration(
    est: Any,
    plan: ReadingPlan,
    records: Records,
    y_index: np.ndarray | None,
    shown: list[int],
    engine: Engine,
    log_prior: np.ndarray,
    classes: np.ndarray,
) -> tuple[np.ndarray | None, LearnedCalibrator | None]:
    """What ``calibration`` needs, estimated from reads of content-free inputs
    or of the training texts not shown as few-shot examples; the debiasing
    calibrations aim at ``log_prior``."""
    if est.calibration is None:
        return None, None

    def log_proba(rows: Records, progress: bool) -> np.ndarray:
        reads = read_plans([plan], rows, engine, batch_size=est.batch_size, progress=progress)
        return reads[0].log_proba()

    used = set(shown)
    rows = np.array([i for i in range(len(records)) if i not in used], dtype=np.int64)
    if est.calibration == "contextual" or (est.calibration == "batch" and rows.size == 0):
        # batch calibration with every training text shown as an example: small
        # calls fall back to the content-free bias
        fields = [f for f in plan.layout.template.fields if f not in (LABELS_FIELD, OPTIONS_FIELD)]
        return contextual_bias(log_proba(content_free_records(fields), False), log_prior), None
    if est.calibration == "batch":
        if rows.size > BATCH_PRIOR_ROWS:
            rows = np.sort(check_random_state(est.random_state).choice(rows, BATCH_PRIOR_ROWS, replace=False))
        return batch_bias(log_proba([records[i] for i in rows], False), log_prior), None
    if y_index is None:
        raise ValueError(f"{type(est).__name__}: calibration='learned' learns from labelled texts: fit needs y")
    calibrator = LearnedCalibrator.fit(
        log_proba([records[i] for i in rows], est.progress),
        y_index[rows],
        plan.n_classes,
        random_state=check_random_state(est.random_state).randint(2**31 - 1),
        class_weight=index_weights(est.class_weight, classes.tolist()),
    )
    return None, calibrator


def fit_separate(est: Any, records: Records, target: Target, get_engine: EngineGetter) -> dict[str, Any]:
    """Several outputs: one fitted single-output estimator per column of ``y``
    (or per label of a multi-label ``y``), all on the same shared engine."""
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
    estimators = []
    for j, (sub, column) in enumerate(zip(subs, target.columns, strict=True)):
        where = f"output {names[j]!r}"
        try:
            vars(sub).update(fit_output(sub, records, column, get_engine, where=where, checked=checked[j]))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        estimators.append(sub)
    if target.kind == "multilabel":
        classes_: Any = np.array(names)
    else:
        classes_ = [e.classes_ for e in estimators]
    return {
        "estimators_": estimators,
        "n_outputs_": len(estimators),
        "output_kind_": target.kind,
        "classes_": classes_,
        "plans_": [e.plans_[0] for e in estimators],
    }


def fit_joint(est: Any, records: Records, target: Target, get_engine: EngineGetter) -> dict[str, Any]:
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
        "calibration": est.calibration is not None,
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
    return {
        "classes_": classes,
        "n_outputs_": len(classes),
        "output_kind_": "multioutput",
        "chat_": chat,
        "prompt_": template.template,
        "joint_names_": joint_names,
        "joint_options_": options,
        "joint_regex_": regex,
        "joint_token_ids_": token_ids,
        "plans_": [JointPlan(layout, tuple(tuple(ids) for ids in token_ids), regex)],
    }

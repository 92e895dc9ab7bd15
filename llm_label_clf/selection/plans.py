"""The reading plans of ``LLMLabelClassifierCV``'s readers, made before
anything is read: each reader fitted as ``LLMLabelClassifier`` without
calibration (its prompt, label tokens and few-shot block; no read)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import clone

from ..classifier import LLMLabelClassifier
from ..exceptions import warn_user
from ..reading.build import MIN_QUERY_TOKENS, FewShotTooLongError
from .budget import without_readers
from .candidates import READER_PARAMS, Candidate

__all__ = ["fitted_plans"]


def fitted_plans(
    base: LLMLabelClassifier,
    readers: list[dict[str, Any]],
    found: list[Candidate],
    fallback: Candidate | None,
    X: Any,
    y: np.ndarray,
    owner: str,
) -> tuple[list[dict[str, Any]], list[Candidate], list[LLMLabelClassifier], Candidate | None, list[dict[str, Any]]]:
    """The ``readers`` whose prompt fits the model's context and their
    candidates of ``found`` (``budget.without_readers``), each such reader
    fitted without calibration, ``fallback`` (the ``small_data`` candidate)
    where its prompt fits too (else None), and the readers left out. What
    is left out is named in one warning; raises the first reader's
    ``FewShotTooLongError`` when no reader fits."""
    kept, fitted, too_long = [], [], []
    for r, params in enumerate(readers):
        try:
            fitted.append(clone(base).set_params(**params, calibration=None).fit(X, y))
        except FewShotTooLongError as exc:
            too_long.append((str(params), exc))
            continue
        kept.append(r)
    if not kept:
        raise too_long[0][1]
    if fallback is not None:  # its reads come after the scoring: checked now, not at its refit
        reading = {k: v for k, v in fallback.params.items() if k in READER_PARAMS}
        try:
            clone(base).set_params(**reading, calibration=None).fit(X, y)
        except FewShotTooLongError as exc:
            too_long.append((f"the small_data fallback {fallback.params}", exc))
            fallback = None
    if too_long:
        context = too_long[0][1].max_model_len
        named = "; ".join(f"{what} (few_shot={exc.few_shot}: {exc.n_tokens} tokens)" for what, exc in too_long)
        warn_user(
            f"{owner}: the candidates of {len(too_long)} few-shot prompt(s) are left out, unread: their examples "
            f"leave less than {MIN_QUERY_TOKENS} of the model's {context} tokens for the text: {named}. Pass "
            "smaller few_shots or raise engine_options['max_model_len'] to try them.",
            UserWarning,
        )
    kept_readers, kept_found = without_readers(readers, found, kept)
    return kept_readers, kept_found, fitted, fallback, [p for r, p in enumerate(readers) if r not in kept]

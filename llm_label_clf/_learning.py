"""Learning from the training set for ``LLMLabelClassifier``: the few-shot
block chosen at fit, and the calibrations estimated at fit and applied at
prediction (see ``calibration.py`` for what each one is)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from sklearn.utils import check_random_state

from .calibration import MIN_BATCH, LearnedCalibrator, batch_bias, content_free_records, contextual_bias, debias
from .engine import Engine
from .few_shot import examples_block, select_examples
from .options import OPTIONS_FIELD
from .prompts import LABELS_FIELD, PromptTemplate

__all__ = ["LearningMixin"]

#: Training texts read at fit time for batch calibration's small-call fallback.
_BATCH_PRIOR_ROWS = 256
#: Tokens a few-shot block must leave free for the text and the answer cue.
_MIN_QUERY_TOKENS = 64


class LearningMixin:
    """Few-shot and calibration methods of ``LLMLabelClassifier``."""

    few_shot: int
    calibration: str | None
    random_state: Any
    progress: bool

    def _fit_few_shot(
        self,
        template: PromptTemplate,
        records: list[dict[str, str]],
        y_index: np.ndarray,
        label_fields: Mapping[str, str],
        engine: Engine,
    ) -> None:
        """Chooses the few-shot examples and renders them into ``few_shot_prefix_``."""
        self.few_shot_rows_ = []
        self.few_shot_prefix_ = ""
        if not self.few_shot:
            return
        rng = check_random_state(self.random_state)
        self.few_shot_rows_ = select_examples(y_index, len(self.classes_), int(self.few_shot), rng)
        answers = [self.verbalizers_[y_index[row]][0] for row in self.few_shot_rows_]
        self.few_shot_prefix_ = examples_block(
            self.few_shot_rows_, records, answers, lambda r: self._render_body(template, r, label_fields)
        )
        n_tokens = len(engine.tokenizer.encode(self.few_shot_prefix_, add_special_tokens=False))
        if n_tokens > engine.max_model_len - _MIN_QUERY_TOKENS:
            raise ValueError(
                f"{type(self).__name__}: few_shot={self.few_shot} examples per class take {n_tokens} tokens, "
                f"leaving less than {_MIN_QUERY_TOKENS} of the model's {engine.max_model_len} for the text; "
                "lower few_shot or raise engine_options['max_model_len']"
            )

    def _fit_calibration(self, template: PromptTemplate, records: list[dict[str, str]], y_index: np.ndarray) -> None:
        """Estimates what ``calibration`` needs from the prompt and the training texts."""
        self.calibration_bias_ = None
        self.calibrator_ = None
        if self.calibration is None:
            return
        used = set(self.few_shot_rows_)
        rows = np.array([i for i in range(len(records)) if i not in used], dtype=np.int64)
        if self.calibration == "contextual" or (self.calibration == "batch" and rows.size == 0):
            # batch calibration with every training text shown as an example: small
            # calls fall back to the content-free bias
            fields = [f for f in template.fields if f not in (LABELS_FIELD, OPTIONS_FIELD)]
            scores = self._read_records(content_free_records(fields), progress=False)
            self.calibration_bias_ = contextual_bias(self._log_proba(scores, calibrate=False)[0])
            return
        if self.calibration == "batch":
            if rows.size > _BATCH_PRIOR_ROWS:
                rows = np.sort(check_random_state(self.random_state).choice(rows, _BATCH_PRIOR_ROWS, replace=False))
            scores = self._read_records([records[i] for i in rows], progress=False)
            self.calibration_bias_ = batch_bias(self._log_proba(scores, calibrate=False)[0])
            return
        scores = self._read_records([records[i] for i in rows], progress=self.progress)
        self.calibrator_ = LearnedCalibrator.fit(
            self._log_proba(scores, calibrate=False)[0],
            y_index[rows],
            len(self.classes_),
            random_state=check_random_state(self.random_state).randint(2**31 - 1),
        )

    def _calibrate(self, log_proba: np.ndarray) -> np.ndarray:
        if self.calibration is None:
            return log_proba
        if self.calibration == "learned":
            return self.calibrator_.log_proba(log_proba, len(self.classes_))
        if self.calibration == "batch" and log_proba.shape[0] >= MIN_BATCH:
            return debias(log_proba, batch_bias(log_proba))
        return debias(log_proba, self.calibration_bias_)


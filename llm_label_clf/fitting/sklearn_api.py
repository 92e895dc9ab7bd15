"""The scikit-learn conventions both estimators share: a refit starts from
no fitted attributes, the tags of a classifier whose input is texts, and
``set_output`` for ``transform``."""

from __future__ import annotations

from typing import Any

from sklearn.utils._set_output import _SetOutputMixin

__all__ = ["TransformOutput", "drop_fitted", "text_classifier_tags"]


class TransformOutput(_SetOutputMixin):
    """``set_output(transform="pandas" | "polars" | "default")`` for an
    estimator whose ``transform`` columns are named by its
    ``get_feature_names_out``: scikit-learn's own mixin (the part of
    ``TransformerMixin`` that wraps ``transform``), taken alone so that a
    classifier does not also take a transformer's tags and ``fit_transform``."""


def drop_fitted(estimator: Any) -> None:
    """Removes every fitted attribute (public, ending in ``_``), so a refit
    leaves nothing of the last fit, whatever that fit set."""
    for attribute in [a for a in vars(estimator) if a.endswith("_") and not a.startswith("_")]:
        delattr(estimator, attribute)


def text_classifier_tags(tags: Any) -> Any:
    """``tags`` for a deterministic classifier of strings (1-D input)."""
    tags.input_tags.one_d_array = True
    tags.input_tags.two_d_array = False
    tags.input_tags.string = True
    tags.non_deterministic = False
    return tags

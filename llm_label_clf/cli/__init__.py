"""The command line (``llm-label-clf``, ``python -m llm_label_clf``); ``commands`` is the way in."""

from .commands import main

__all__ = ["main"]

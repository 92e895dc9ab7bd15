"""The command line (``llm-label-clf``, ``python -m llm_label_clf``): the
subcommands and their wiring to the estimator (``commands``), argument
parsing (``options``), reading and writing tables (``tables``), which rows
can be classified (``rows``), and the hints printed on failure (``hints``)."""

from .commands import main

__all__ = ["main"]

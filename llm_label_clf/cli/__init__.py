"""The command line (``llm-label-clf``, ``python -m llm_label_clf``): the
subcommands and their wiring to the estimator (``commands``), argument
parsing (``options``), formats and small tables (``tables``), the input read
in chunks (``chunks``), the output written chunk by chunk (``sinks``), which
rows can be classified (``rows``), the chunked run (``stream``), its progress
file and resume checks (``resume``), and the hints printed on failure
(``hints``)."""

from .commands import main

__all__ = ["main"]

"""Runs a notebook top to bottom with nbclient and saves it with its outputs,
as Jupyter would ("Restart kernel and run all cells", then save).

    python notebooks/execute.py notebooks/quickstart.ipynb            # in place
    QUICKSTART_N=48 python notebooks/execute.py notebooks/quickstart.ipynb -o /tmp/quick.ipynb

The kernel runs in the notebook's folder with this process's environment, so
``LLM_LABEL_CLF_DATASETS`` and ``QUICKSTART_N`` reach it. A failing cell stops
the run with its traceback and nothing is saved.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def execute(path: Path, timeout: int = 1800, kernel: str = "python3"):
    """Executes the notebook at ``path`` in its folder; returns the executed notebook."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name=kernel, resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    return notebook


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("-o", "--output", type=Path, default=None, help="where to save (default: in place)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell (default 1800)")
    args = parser.parse_args(argv)

    import nbformat

    start = time.perf_counter()
    notebook = execute(args.notebook.resolve(), timeout=args.timeout)
    out = args.output or args.notebook
    nbformat.write(notebook, out)
    print(f"executed {args.notebook} in {time.perf_counter() - start:.0f} s; saved {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

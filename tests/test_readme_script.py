"""The README's "Ten lines", saved as a script exactly as printed (but for
the datasets folder), run as a new user runs them: no
``if __name__ == "__main__":`` guard, yet the engine starts (its spawned
processes do not run the script again) and the report prints. Full tier:
one more engine start."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.full
def test_the_readme_ten_lines_run_as_a_script(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Ten lines", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "__main__" not in code  # the point: no guard
    datasets = os.environ.get("LLM_LABEL_CLF_DATASETS", str(ROOT.parent / "shared" / "datasets"))
    script = tmp_path / "ten_lines.py"
    script.write_text(code.replace("../shared/datasets", datasets), encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "accuracy" in done.stdout and "positive" in done.stdout

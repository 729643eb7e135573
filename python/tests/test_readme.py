"""The README's Python example runs as written (NumPy, the CPU backend)."""

import pathlib
import re

import numpy as np


def test_the_readme_python_example_runs():
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    tokens = np.asarray(scope["tokens"])
    assert tokens.shape == (4,)
    assert ((0 <= tokens) & (tokens < 1000)).all()

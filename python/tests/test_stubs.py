"""The type stubs (flashsampling/__init__.pyi) name every public function with the parameters, kinds and defaults
the module has."""

import ast
import inspect
import pathlib

import flashsampling as fs


def test_the_stubs_match_the_module():
    stub = ast.parse((pathlib.Path(__file__).resolve().parents[1] / "flashsampling" / "__init__.pyi").read_text())
    stubbed = {f.name: f for f in stub.body if isinstance(f, ast.FunctionDef)}
    assert set(stubbed) == set(fs.__all__)
    for name in fs.__all__:
        real = inspect.signature(getattr(fs, name)).parameters
        args = stubbed[name].args
        positional = [a.arg for a in args.args]
        keyword = [a.arg for a in args.kwonlyargs]
        assert positional == [p for p, v in real.items() if v.kind == v.POSITIONAL_OR_KEYWORD], name
        assert keyword == [p for p, v in real.items() if v.kind == v.KEYWORD_ONLY], name
        defaults = [ast.literal_eval(d) for d in args.defaults] + [
            None if d is None else ast.literal_eval(d) for d in args.kw_defaults
        ]
        real_defaults = [v.default for v in real.values() if v.default is not inspect.Parameter.empty]
        assert defaults == real_defaults, name


def test_cpu_tokens_are_int32_like_the_cuda_path():
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = fs.sample(rng.standard_normal((3, 16), dtype=np.float32), rng.standard_normal((40, 16), dtype=np.float32))
    assert tokens.dtype == np.int32 and tokens.shape == (3,)

"""The type stubs (flashsampling/__init__.pyi) name every public function with the parameters, kinds and defaults
the module has."""

import ast
import dataclasses
import inspect
import pathlib

import flashsampling as fs


def test_the_stubs_match_the_module():
    stub = ast.parse((pathlib.Path(__file__).resolve().parents[1] / "flashsampling" / "__init__.pyi").read_text())
    stubbed = {f.name: f for f in stub.body if isinstance(f, ast.FunctionDef)}
    classes = {c.name: c for c in stub.body if isinstance(c, ast.ClassDef)}
    assert set(stubbed) | set(classes) == set(fs.__all__)
    # A stubbed class: its constructor's parameters and defaults are the dataclass's fields.
    for name, c in classes.items():
        init = next(f for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
        fields = dataclasses.fields(getattr(fs, name))
        assert [a.arg for a in init.args.args[1:]] == [f.name for f in fields], name
        assert [ast.literal_eval(d) for d in init.args.defaults] == [f.default for f in fields], name
    for name in stubbed:
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


def test_params_give_what_the_keywords_give():
    import numpy as np

    rng = np.random.default_rng(1)
    h, w = rng.standard_normal((4, 16), dtype=np.float32), rng.standard_normal((60, 16), dtype=np.float32)
    kw = dict(temperature=0.7, seed=5, top_p=[0.9, 1.0, 0.8, 1.0], n=2, logprobs="processed", top_logprobs=3)
    by_keywords = fs.sample(h, w, **kw)
    by_params = fs.sample(h, w, params=fs.SamplingParams(**kw))
    for key in ("tokens", "scores", "logprobs", "logsumexp"):
        assert np.array_equal(by_keywords[key], by_params[key]), key
    assert by_keywords["top_logprobs"] == by_params["top_logprobs"]
    # A control both ways is an error; a keyword left at its default is not.
    import pytest

    with pytest.raises(TypeError, match="seed"):
        fs.sample(h, w, seed=6, params=fs.SamplingParams(seed=5))
    with pytest.raises(TypeError, match="SamplingParams"):
        fs.sample(h, w, params=dict(seed=5))
    assert np.array_equal(fs.sample(h, w, 1.0, 0, params=fs.SamplingParams(seed=3)), fs.sample(h, w, seed=3))

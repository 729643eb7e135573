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
        defaults = [f.default for f in fields if f.default is not dataclasses.MISSING]
        assert [ast.literal_eval(d) for d in init.args.defaults] == defaults, name
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
    out = fs.sample(rng.standard_normal((3, 16), dtype=np.float32), rng.standard_normal((40, 16), dtype=np.float32))
    assert isinstance(out, fs.Samples)
    assert out.tokens.dtype == np.int32 and out.tokens.shape == (3,) and out.scores.dtype == np.float32
    assert out.logprobs is None and out.raw_logprobs is None and out.logsumexp is None and out.top_logprobs is None


def test_params_give_what_the_keywords_give():
    import numpy as np

    rng = np.random.default_rng(1)
    h, w = rng.standard_normal((4, 16), dtype=np.float32), rng.standard_normal((60, 16), dtype=np.float32)
    kw = dict(temperature=0.7, seed=5, top_p=[0.9, 1.0, 0.8, 1.0], n=2, logprobs="processed", top_logprobs=3)
    by_keywords = fs.sample(h, w, **kw)
    by_params = fs.sample(h, w, params=fs.SamplingParams(**kw))
    for key in ("tokens", "scores", "logprobs", "logsumexp"):
        assert np.array_equal(getattr(by_keywords, key), getattr(by_params, key)), key
    for a, b in zip(by_keywords.top_logprobs, by_params.top_logprobs):
        assert np.array_equal(a, b, equal_nan=True)
    # A control both ways is an error; a keyword left at its default is not.
    import pytest

    with pytest.raises(TypeError, match="seed"):
        fs.sample(h, w, seed=6, params=fs.SamplingParams(seed=5))
    with pytest.raises(TypeError, match="SamplingParams"):
        fs.sample(h, w, params=dict(seed=5))
    assert np.array_equal(fs.sample(h, w, 1.0, 0, params=fs.SamplingParams(seed=3)).tokens,
                          fs.sample(h, w, seed=3).tokens)


def test_verify_emits_what_plain_decoding_draws():
    import numpy as np

    rng = np.random.default_rng(52)
    d, v = 16, 120
    w = rng.standard_normal((v, d), dtype=np.float32)
    ks = [0, 2, 4, 1]
    offsets = np.cumsum([0] + [k + 1 for k in ks]).tolist()
    rows = offsets[-1]
    h = rng.standard_normal((rows, d), dtype=np.float32)
    positions = [5, 0, 17, 1000]
    streams = [s for r, k in enumerate(ks) for s in [10 + r] * (k + 1)]
    temps = [t for r, k in enumerate(ks) for t in [(0.7, 1.0, 0.0, 1.3)[r]] * (k + 1)]
    # Plain decoding: each row alone at its position.
    want = [[int(fs.sample(h[offsets[r] + i], w, seed=9, streams=[10 + r], sample=positions[r] + i,
                           temperatures=[(0.7, 1.0, 0.0, 1.3)[r]]).tokens[0]) for i in range(k + 1)]
            for r, k in enumerate(ks)]
    for kind in ("right", "wrong", "mixed"):
        drafts = []
        for r, k in enumerate(ks):
            for i in range(k):
                right = kind == "right" or (kind == "mixed" and i < k // 2)
                drafts.append(want[r][i] if right else (want[r][i] + 1) % v)
        got = fs.verify(h, w, offsets, drafts, positions, seed=9, streams=streams, temperatures=temps)
        accepted, tokens = got.accepted, got.tokens
        assert isinstance(got, fs.Verified) and got.logprobs is None and accepted.dtype == np.int32
        for r, k in enumerate(ks):
            a = {"right": k, "wrong": 0, "mixed": k // 2}[kind]
            assert accepted[r] == a, (kind, r)
            assert tokens[r].tolist() == want[r][:a + 1], (kind, r)
        by_params = fs.verify(h, w, offsets, drafts, positions,
                              params=fs.SamplingParams(seed=9, streams=streams, temperatures=temps))
        assert np.array_equal(by_params.accepted, accepted)
        # With log-probabilities: each emitted token's, as plain decoding reports it (bit for bit).
        scored = fs.verify(h, w, offsets, drafts, positions, seed=9, streams=streams, temperatures=temps,
                           logprobs="processed_and_raw")
        for r, k in enumerate(ks):
            a = int(scored.accepted[r])
            for i in range(a + 1):
                alone = fs.sample(h[offsets[r] + i], w, seed=9, streams=[10 + r], sample=positions[r] + i,
                                  temperatures=[(0.7, 1.0, 0.0, 1.3)[r]], logprobs="processed_and_raw")
                assert scored.logprobs[r][i].tobytes() == alone.logprobs[0].tobytes(), (kind, r, i)
                assert scored.raw_logprobs[r][i].tobytes() == alone.raw_logprobs[0].tobytes(), (kind, r, i)
    import pytest

    with pytest.raises(ValueError):
        fs.verify(h, w, [0, 2, 2], [1], [0, 0])
    with pytest.raises(TypeError):
        fs.verify(h, w, offsets, [0] * (rows - 4), positions, sample=3)

"""The Python package's CPU path (NumPy arrays): the same tokens and rules as the Rust library, checked
against NumPy references. Run by `./x.sh test` (pytest) after building the wheel."""

import math
import os
import sys

import numpy as np
import pytest

import flashsampling as fs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _stats import chi2_ok  # noqa: E402  (the tests' own helper module, beside this file)


def bf16_values(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def lm_head(b, d, v, seed):
    rng = np.random.default_rng(seed)
    hidden = rng.standard_normal((b, d)).astype(np.float32)
    weight = (rng.standard_normal((v, d)) * (2.0 / math.sqrt(d))).astype(np.float32)
    return hidden, weight


def logits(hidden, weight):
    return bf16_values(fs.bf16_bits(hidden)) @ bf16_values(fs.bf16_bits(weight)).T


def test_bf16_rounding_is_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.inf, np.nan], dtype=np.float32)
    bits = fs.bf16_bits(x)
    assert bits[0] == 0x3F80 and bits[1] == 0x3F80 and bits[2] == 0x3F82  # ties go to even
    assert bits[3] == 0xC020 and bits[4] == 0x7F80 and (bits[5] & 0x7FFF) > 0x7F80
    assert np.array_equal(fs.bf16_bits(bits), bits)  # uint16 passes through


def test_greedy_is_the_argmax():
    hidden, weight = lm_head(6, 64, 1000, 1)
    tokens = fs.sample(hidden, weight, temperature=0.0).tokens
    assert tokens.dtype == np.int32 and tokens.shape == (6,)
    assert np.array_equal(tokens, logits(hidden, weight).argmax(axis=1))


def test_samples_follow_softmax():
    hidden, weight = lm_head(1, 64, 50, 2)
    y = logits(hidden, weight)[0]
    h = np.repeat(hidden, 256, axis=0)
    counts = np.zeros(50, dtype=np.int64)
    for r in range(40):
        t = fs.sample(h, weight, temperature=0.8, seed=7, streams=list(range(r * 256, (r + 1) * 256))).tokens
        counts += np.bincount(t, minlength=50)
    probs = np.exp((y - y.max()) / 0.8)
    ok, stat, dof, p = chi2_ok(counts, probs / probs.sum())
    assert ok, (stat, dof, p)


def test_determinism_per_row_controls_and_n_samples():
    hidden, weight = lm_head(4, 64, 777, 3)
    a = fs.sample(hidden, weight, 0.9, seed=5).tokens
    assert np.array_equal(a, fs.sample(hidden, weight, 0.9, seed=5).tokens)
    temps = [0.5, 1.0, 0.0, 2.0]
    mixed = fs.sample(hidden, weight, 1.0, seed=5, temperatures=temps)
    for r, t in enumerate(temps):
        scalar = fs.sample(hidden, weight, t, seed=5)
        assert mixed.tokens[r] == scalar.tokens[r]
        assert mixed.scores[r].tobytes() == scalar.scores[r].tobytes()
    many = fs.sample(hidden, weight, 0.9, seed=5, n=5, sample=2).tokens
    assert many.shape == (4, 5)
    for j in range(5):
        assert np.array_equal(many[:, j], fs.sample(hidden, weight, 0.9, seed=5, sample=2 + j).tokens)


def test_logprobs_match_numpy():
    hidden, weight = lm_head(3, 64, 300, 4)
    y = logits(hidden, weight)
    out = fs.sample(hidden, weight, 0.7, seed=9, logprobs="processed_and_raw", top_logprobs=5)
    for r in range(3):
        z = y[r] / 0.7
        lse = z.max() + np.log(np.exp(z - z.max()).sum())
        tok = out.tokens[r]
        assert abs(out.logprobs[r] - (z[tok] - lse)) < 1e-4
        assert abs(out.logsumexp[r] - lse) < 1e-4 * max(1.0, abs(lse))
        raw_lse = y[r].max() + np.log(np.exp(y[r] - y[r].max()).sum())
        assert abs(out.raw_logprobs[r] - (y[r][tok] - raw_lse)) < 1e-4
        top_tokens, top_logprobs = out.top_logprobs
        assert top_tokens.dtype == np.int32 and top_logprobs.dtype == np.float32 and top_tokens.shape == (3, 5)
        assert top_tokens[r].tolist() == list(np.argsort(-z, kind="stable")[:5])
        assert all(abs(lp - (z[t] - lse)) < 1e-4 for t, lp in zip(top_tokens[r], top_logprobs[r]))


def test_masks_and_truncation():
    hidden, weight = lm_head(2, 64, 100, 5)
    allowed = np.zeros((2, 100), dtype=bool)
    allowed[0, ::7] = True
    allowed[1, 50:] = True
    h = np.repeat(hidden, 64, axis=0)
    a = np.repeat(allowed, 64, axis=0)
    t = fs.sample(h, weight, 1.0, seed=1, allowed=a).tokens
    assert all(a[i, tok] for i, tok in enumerate(t))
    y = logits(hidden, weight)
    top3 = set(np.argsort(-y[0], kind="stable")[:3])
    t = fs.sample(np.repeat(hidden[:1], 128, axis=0), weight, 1.0, seed=2, top_k=[3] * 128).tokens
    assert set(t.tolist()) <= top3


def test_bad_input_raises_the_librarys_errors():
    hidden, weight = lm_head(2, 64, 100, 6)
    with pytest.raises(ValueError, match="temperature -1 is invalid"):
        fs.sample(hidden, weight, -1.0)
    with pytest.raises(ValueError, match="hidden size mismatch: hidden states have D = 64, the LM-head weight has D = 32"):
        fs.sample(hidden, weight[:, :32])
    with pytest.raises(ValueError, match="hidden size D = 60 is not a multiple of 8"):
        fs.sample(hidden[:, :60], weight[:, :60])
    with pytest.raises(ValueError, match="top-p"):
        fs.sample(hidden, weight, top_p=[0.5, 2.0])
    with pytest.raises(ValueError, match="dtype float64"):
        fs.sample(hidden.astype(np.float64), weight)
    with pytest.raises(ValueError, match="logprobs"):
        fs.sample(hidden, weight, logprobs="yes")


def test_float16_arrays_are_sampled_in_f16():
    # Logits 1 + 2**-10 and 1: distinct in float16, a tie in bfloat16 (where the lower id would win).
    hidden = np.zeros((1, 8), dtype=np.float16)
    hidden[0, 0] = 1
    weight = np.zeros((2, 8), dtype=np.float16)
    weight[0, 0], weight[1, 0] = 1, 1 + 2**-10
    assert fs.sample(hidden, weight, 0.0).tokens.tolist() == [1]
    assert fs.sample(hidden.astype(np.float32), weight.astype(np.float32), 0.0).tokens.tolist() == [0]


def test_cpu_tensors_run_on_the_cpu_backend():
    torch = pytest.importorskip("torch", reason="PyTorch not installed: CPU tensors not tested")
    hidden, weight = lm_head(5, 64, 300, 7)
    want = fs.sample(hidden, weight, 0.9, seed=3).tokens
    got = fs.sample(torch.from_numpy(hidden).to(torch.bfloat16), torch.from_numpy(weight).to(torch.bfloat16), 0.9,
                    seed=3).tokens
    assert isinstance(got, np.ndarray) and np.array_equal(got, want)


# Sparse logit adjustments: logit_bias and the repetition / frequency / presence penalties.


def integer_head(b, d, v, seed):
    """Hidden states in {-8..8} and weights in {-8..8}/64: bf16 values whose dot products are exact in f32,
    so the backend's logits equal the float64 ones exactly."""
    rng = np.random.default_rng(seed)
    hidden = rng.integers(-8, 9, (b, d)).astype(np.float32)
    weight = (rng.integers(-8, 9, (v, d)) / 64).astype(np.float32)
    return hidden, weight


def adjusted_logits(y, logit_bias, repetition, frequency, presence, prompt, output):
    """vLLM's definitions on float64 logits [B, V], per row: the bias added, then the repetition penalty
    (r = 0 read as 1) over the tokens in prompt or output (x / r if x > 0 else x * r), then
    frequency · count + presence · [count > 0] over the output's counts subtracted."""
    y = y.astype(np.float64).copy()
    for r in range(y.shape[0]):
        for t, x in (logit_bias[r] or {}).items():
            y[r, t] += x
        rep = repetition[r] or 1.0
        seen = sorted(set(prompt[r]) | set(output[r]))
        x = y[r, seen]
        y[r, seen] = np.where(x > 0, x / rep, x * rep)
        counts = np.bincount(np.asarray(output[r], dtype=np.int64), minlength=y.shape[1])
        y[r] -= frequency[r] * counts + presence[r] * (counts > 0)
    return y


def penalty_case(b, v, y, seed):
    """Per-row biases, penalties and token lists that move each row's argmax around: each row's six best
    tokens are in its output (1 to 3 times), the next three in its prompt."""
    rng = np.random.default_rng(seed)
    top = np.argsort(-y, axis=1, kind="stable")
    logit_bias, prompt, output = [], [], []
    for r in range(b):
        bias = {int(t): float(x) for t, x in zip(rng.choice(v, 4, replace=False), rng.uniform(-2, 2, 4))}
        bias[int(top[r, 0])] = -0.5
        logit_bias.append(None if r % 7 == 3 else bias)
        prompt.append(rng.choice(v, 12).tolist() + top[r, 6:9].tolist())
        repeated = [int(t) for i, t in enumerate(top[r, :6]) for _ in range(1 + (r + i) % 3)]
        output.append(rng.choice(v, 8).tolist() + repeated)
    repetition = [[1.0, 1.3, 2.0, 0.0, 0.7, 0.5][r % 6] for r in range(b)]
    frequency = [[0.0, 0.5, 0.25, 0.1][r % 4] for r in range(b)]
    presence = [[0.0, 0.75, -0.5][r % 3] for r in range(b)]
    return dict(logit_bias=logit_bias, repetition_penalty=repetition, frequency_penalty=frequency,
                presence_penalty=presence, prompt_tokens=prompt, output_tokens=output)


def test_logit_bias_forces_or_bans_a_token():
    hidden, weight = lm_head(64, 64, 500, 21)
    forced = fs.sample(hidden, weight, 1.0, seed=3, logit_bias=[{123: 100.0}] * 64).tokens
    assert forced.tolist() == [123] * 64
    assert fs.sample(hidden, weight, 1.0, seed=3, logit_bias={"123": 100.0}).tokens.tolist() == [123] * 64  # one dict
    assert (fs.sample(hidden, weight, 1.0, seed=3, n=3, logit_bias=[{123: 100.0}] * 64).tokens == 123).all()
    # A large negative bias on each row's most likely token: never drawn, over many draws.
    y = logits(hidden, weight)
    best = y.argmax(axis=1)
    plain = fs.sample(hidden, weight, 1.0, seed=3).tokens
    hit = np.zeros(64, dtype=bool)
    for s in range(20):
        t = fs.sample(hidden, weight, 1.0, seed=3, sample=s, logit_bias=[{int(x): -100.0} for x in best]).tokens
        assert not (t == best).any()
        hit |= fs.sample(hidden, weight, 1.0, seed=3, sample=s).tokens == best
    assert hit.sum() > 10  # without the bias the best token does come up
    # A row without a bias (None) draws exactly what it draws without the keyword.
    rows = [None if r % 2 else {int(best[r]): -100.0} for r in range(64)]
    t = fs.sample(hidden, weight, 1.0, seed=3, logit_bias=rows).tokens
    assert np.array_equal(t[1::2], plain[1::2])


def test_penalties_match_a_float64_reference_on_greedy_rows():
    b, d, v = 100, 64, 300
    hidden, weight = integer_head(b, d, v, 22)
    y = logits(hidden, weight)
    case = penalty_case(b, v, y, 23)
    got = fs.sample(hidden, weight, 0.0, **case).tokens
    want = adjusted_logits(y, case["logit_bias"], case["repetition_penalty"], case["frequency_penalty"],
                           case["presence_penalty"], case["prompt_tokens"], case["output_tokens"])
    rows = np.arange(b)
    # The backend adjusts in f32: its winner is the float64 argmax wherever the top two are clearly apart.
    assert (want[rows, got] >= want.max(axis=1) - 1e-5).all()
    top2 = np.sort(want, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-4
    assert clear.sum() >= b - 5
    assert np.array_equal(got[clear], want.argmax(axis=1)[clear])
    assert (got != y.argmax(axis=1)).sum() >= b // 3  # the adjustments do move the argmax
    # NumPy arrays and per-row arrays work as lists do; scalars apply to every row.
    arrays = dict(case, prompt_tokens=[np.asarray(p, dtype=np.int64) for p in case["prompt_tokens"]],
                  output_tokens=[np.asarray(o, dtype=np.uint32) for o in case["output_tokens"]],
                  repetition_penalty=np.asarray(case["repetition_penalty"], dtype=np.float32))
    assert np.array_equal(fs.sample(hidden, weight, 0.0, **arrays).tokens, got)
    scalar = fs.sample(hidden, weight, 0.0, repetition_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.25,
                       prompt_tokens=case["prompt_tokens"], output_tokens=case["output_tokens"]).tokens
    want = adjusted_logits(y, [None] * b, [1.3] * b, [0.5] * b, [0.25] * b, case["prompt_tokens"],
                           case["output_tokens"])
    assert (want[rows, scalar] >= want.max(axis=1) - 1e-5).all()


def test_penalised_samples_follow_the_adjusted_softmax():
    hidden, weight = lm_head(1, 64, 50, 24)
    y = logits(hidden, weight)
    kw = dict(logit_bias=[{3: 1.5, 7: -2.0}], repetition_penalty=1.4, frequency_penalty=0.3, presence_penalty=0.2,
              prompt_tokens=[[1, 2, 3, 40]], output_tokens=[[int(y.argmax()), int(y.argmax()), 5, 9, 9, 9]])
    z = adjusted_logits(y, kw["logit_bias"], [1.4], [0.3], [0.2], kw["prompt_tokens"], kw["output_tokens"])[0]
    h = np.repeat(hidden, 256, axis=0)
    rows = {k: x * 256 if isinstance(x, list) else x for k, x in kw.items()}
    counts = np.zeros(50, dtype=np.int64)
    for r in range(40):
        t = fs.sample(h, weight, 0.8, seed=7, streams=list(range(r * 256, (r + 1) * 256)), **rows).tokens
        counts += np.bincount(t, minlength=50)
    probs = np.exp((z - z.max()) / 0.8)
    ok, stat, dof, p = chi2_ok(counts, probs / probs.sum())
    assert ok, (stat, dof, p)


def test_empty_adjustments_change_nothing():
    b = 6
    hidden, weight = lm_head(b, 64, 400, 25)
    kw = dict(seed=11, temperatures=[1.0, 0.0, 0.7, 1.3, 0.0, 2.0], n=3, logprobs="processed_and_raw")
    plain = fs.sample(hidden, weight, **kw)
    for adj in [
        dict(logit_bias=[None] * b),
        dict(logit_bias=[{}] * b),
        dict(logit_bias=[{5: 0.0}] * b),
        dict(prompt_tokens=[[]] * b, output_tokens=[None] * b),
        dict(repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=[0.0] * b),
        dict(repetition_penalty=0.0, prompt_tokens=[[1, 2, 3]] * b),  # 0 is read as 1: off
        dict(repetition_penalty=1.5, frequency_penalty=2.0, presence_penalty=1.0),  # no tokens to count
        dict(frequency_penalty=0.0, presence_penalty=0.0, output_tokens=[[7, 7, 8]] * b),
    ]:
        got = fs.sample(hidden, weight, **kw, **adj)
        for key in ("tokens", "scores", "logprobs", "raw_logprobs", "logsumexp"):
            assert getattr(got, key).tobytes() == getattr(plain, key).tobytes(), (adj, key)


def test_bad_adjustments_raise_the_librarys_errors():
    hidden, weight = lm_head(2, 64, 100, 26)
    bad = [
        (dict(logit_bias=[{100: 1.0}, None]), r"row 0: token id 100 is out of range \(V = 100\)"),
        (dict(prompt_tokens=[[1], [2, 100]]), r"row 1: token id 100 is out of range \(V = 100\)"),
        (dict(output_tokens=[[5], [250]], frequency_penalty=1.0), "row 1: token id 250 is out of range"),
        (dict(logit_bias=[{1: float("nan")}, None]), "row 0: invalid logit adjustments: bias and penalties"),
        (dict(logit_bias=[None, {1: float("inf")}]), "row 1: invalid logit adjustments"),
        (dict(repetition_penalty=[1.0, -1.0]), "row 1: invalid logit adjustments: penalties must be finite"),
        (dict(frequency_penalty=float("inf")), "row 0: invalid logit adjustments"),
        (dict(presence_penalty=[0.0, float("nan")]), "row 1: invalid logit adjustments"),
        (dict(logit_bias=[None] * 3), "per-row logit biases has 3 elements, but its shape needs 2"),
        (dict(repetition_penalty=[1.0, 1.1, 1.2]), "per-row repetition penalties has 3 elements"),
        (dict(frequency_penalty=[1.0]), "per-row frequency penalties has 1 elements"),
        (dict(presence_penalty=[]), "per-row presence penalties has 0 elements"),
        (dict(prompt_tokens=[[1]]), "per-row prompt tokens has 1 elements"),
        (dict(output_tokens=[[1], [2], [3]]), "per-row output tokens has 3 elements"),
        (dict(prompt_tokens=[[-1], []]), "token id -1 is out of range"),
        (dict(output_tokens=[[1.5], []]), "token ids must be integers"),
        (dict(output_tokens=[3, 4]), "each row is a 1-D list"),
        (dict(logit_bias=[{-2: 1.0}, None]), "token id -2 is out of range"),
        (dict(logit_bias=[{"x": 1.0}, None]), "is not an integer"),
        (dict(logit_bias=[[1, 2], None]), "each row is a dict"),
    ]
    for kw, message in bad:
        with pytest.raises(ValueError, match=message):
            fs.sample(hidden, weight, 1.0, **kw)
    assert fs.sample(hidden, weight, 0.0, logit_bias=[{1: 50.0}, {2: 50.0}]).tokens.tolist() == [1, 2]


def test_integer_controls_must_be_integers():
    # Issue 48, item 10: a float, a string or a bool where an integer goes was truncated silently.
    hidden, weight = lm_head(2, 64, 100, 7)
    for kw in [dict(seed=1.5), dict(seed="7"), dict(seed=True), dict(sample=1.5), dict(top_logprobs=2.5),
               dict(n=2.0), dict(seed=np.float64(3.0)), dict(seed=np.array(2.5))]:
        with pytest.raises(TypeError, match="must be an integer"):
            fs.sample(hidden, weight, **kw)
    for kw in [dict(temperature="0.7"), dict(temperature=True), dict(softcap="30")]:
        with pytest.raises(TypeError, match="must be a real number"):
            fs.sample(hidden, weight, **kw)
    with pytest.raises(TypeError):
        fs.sample(hidden, weight, seeds=[1.5, 2.5])
    with pytest.raises(TypeError):
        fs.sample(hidden, weight, top_k=[2.5, 3])
    for kw in [dict(repetition_penalty="12"), dict(frequency_penalty=True), dict(presence_penalty=[0.5, "1"])]:
        with pytest.raises(TypeError, match="must be a real number"):
            fs.sample(hidden, weight, **kw)
    # NumPy integers and 0-d integer arrays are integers; the draws are the plain int's.
    want = fs.sample(hidden, weight, 1.0, seed=7, sample=3).tokens
    for seed in [np.int64(7), np.uint32(7), np.array(7)]:
        assert np.array_equal(fs.sample(hidden, weight, np.float32(1.0), seed=seed, sample=np.int16(3)).tokens, want)


def test_the_native_call_checks_shapes_before_it_builds_rows():
    # Issue 48, item 7: the importable native function built per-row lists for any `b` before it
    # checked the buffers (2^62 rows: a capacity-overflow panic; 2^40: an allocation that aborts).
    def controls(**kw):
        return dict(temperature=1.0, seed=0, **kw)

    h, w = np.zeros(8, np.uint16), np.zeros(128, np.uint16)
    for b in [2**62, 2**40, 2**31]:
        with pytest.raises(ValueError, match="exceeds the supported maximum"):
            fs._sample_cpu(h, b, 8, w, 16, 8, controls(repetition_penalty=[1.0]))
        with pytest.raises(ValueError, match="exceeds the supported maximum"):
            fs._sample_cuda(0, 0, 0, b, 8, 0, 16, 8, 0, 0, 1, controls(presence_penalty=[0.5]))
    with pytest.raises(ValueError, match="hidden states has 8 elements, but its shape needs 1024"):
        fs._sample_cpu(h, 128, 8, w, 16, 8, controls(frequency_penalty=[0.0] * 128))
    with pytest.raises(ValueError, match="vocab size V is 0"):
        fs._sample_cpu(h, 1, 8, w, 0, 8, controls())
    out = fs._sample_cpu(h, 1, 8, w, 16, 8, controls(repetition_penalty=[1.2]))
    assert len(out["tokens"]) == 1


def test_exact_logsumexp_is_a_control_the_cpu_path_accepts_and_ignores():
    # The CPU backend's sums are f64: exact_logsumexp (a GPU path) changes nothing there, as a keyword or in params.
    hidden, weight = lm_head(6, 32, 90, 53)
    out = fs.sample(hidden, weight, seed=9, logprobs="processed_and_raw", temperatures=[0.7, 0.0, 1.3, 1.0, 0.5, 2.0])
    for kw in (dict(exact_logsumexp=True),
               dict(params=fs.SamplingParams(seed=9, logprobs="processed_and_raw", exact_logsumexp=True,
                                             temperatures=[0.7, 0.0, 1.3, 1.0, 0.5, 2.0]))):
        call = kw if "params" in kw else dict(kw, seed=9, logprobs="processed_and_raw",
                                               temperatures=[0.7, 0.0, 1.3, 1.0, 0.5, 2.0])
        again = fs.sample(hidden, weight, **call)
        for key in ("tokens", "logprobs", "raw_logprobs", "logsumexp"):
            assert np.array_equal(np.asarray(getattr(again, key)).view(np.uint32),
                                  np.asarray(getattr(out, key)).view(np.uint32)), key
    s = fs.score(hidden, weight, out.tokens, exact_logsumexp=True)
    assert np.array_equal(s["raw_logprobs"].view(np.uint32), fs.score(hidden, weight, out.tokens)["raw_logprobs"].view(np.uint32))


def test_score_gives_the_sampled_tokens_logprobs_and_matches_numpy():
    hidden, weight = lm_head(6, 32, 90, 52)
    ctl = dict(temperatures=[0.7, 0.0, 1.3, 1.0, 0.5, 2.0], top_k=[0, 0, 20, 5, 0, 0], softcap=6.0,
               logit_bias=[{3: 2.0}, None, None, {7: -1.0}, None, None])
    out = fs.sample(hidden, weight, seed=9, logprobs="processed_and_raw", **ctl)
    s = fs.score(hidden, weight, out.tokens, **ctl)
    # Bit for bit the log-probabilities the sampling call reported (NaN log-sum-exp for the greedy row).
    for key in ("logprobs", "raw_logprobs", "logsumexp"):
        assert np.array_equal(s[key].view(np.uint32), getattr(out, key).view(np.uint32)), key
    # Against NumPy on the raw logits: log softmax at the given tokens, and the row's log-sum-exp.
    y = logits(hidden, weight).astype(np.float64)
    tokens = np.arange(6) * 11 % 90
    s = fs.score(hidden, weight, tokens)
    lse = np.log(np.exp(y - y.max(1, keepdims=True)).sum(1)) + y.max(1)
    assert np.allclose(s["raw_logsumexp"], lse, rtol=1e-5)
    assert np.allclose(s["raw_logprobs"], y[np.arange(6), tokens] - lse, atol=1e-4)
    assert np.allclose(s["logprobs"], s["raw_logprobs"], atol=1e-5)  # T = 1, no controls: the same distribution
    # Top log-probabilities as sample gives them, and each token's rank in their order.
    top = fs.score(hidden, weight, out.tokens, top_logprobs=4, **ctl)
    again = fs.sample(hidden, weight, seed=9, top_logprobs=4, **ctl)
    for a, b in zip(top["top_logprobs"], again.top_logprobs):
        assert np.array_equal(a, b, equal_nan=True)
    listed = top["top_logprobs"][0]
    for r in range(6):
        hit = np.flatnonzero(listed[r] == out.tokens[r])
        assert top["ranks"][r] == hit[0] + 1 if hit.size else top["ranks"][r] > 4
    assert top["ranks"].dtype == np.int32 and fs.score(hidden, weight, out.tokens)["ranks"] is None
    with pytest.raises(ValueError):
        fs.score(hidden, weight, tokens[:5])
    with pytest.raises(ValueError):
        fs.score(hidden, weight, [90] * 6)


def test_a_row_without_a_token_is_minus_one_as_on_the_gpu():
    # Issue 51.7: a NaN row gave -1 on CUDA but raised on the CPU; both give -1 now, with the row's NaN
    # (NaN logits) or -inf (every token masked) score, and the other rows draw what they draw alone.
    hidden, weight = lm_head(4, 64, 100, 53)
    want = fs.sample(hidden, weight, 0.9, seed=5, logprobs="processed").tokens
    h = hidden.copy()
    h[1, 7] = np.nan
    allowed = np.ones((4, 100), dtype=bool)
    allowed[2] = False
    for kw in (dict(), dict(logprobs="processed"), dict(top_k=[5] * 4), dict(top_logprobs=3)):
        out = fs.sample(h, weight, 0.9, seed=5, allowed=allowed, **kw)
        assert out.tokens[1] == -1 and np.isnan(out.scores[1]), kw
        assert out.tokens[2] == -1 and out.scores[2] == -np.inf, kw
        if not kw:
            assert out.tokens[[0, 3]].tolist() == want[[0, 3]].tolist()
    # Scoring still raises: a given token has no log-probability under NaN logits.
    with pytest.raises(ValueError, match="NaN"):
        fs.score(h, weight, [0] * 4)

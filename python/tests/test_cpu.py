"""The Python package's CPU path (NumPy arrays): the same tokens and rules as the Rust library, checked
against NumPy references. Run by `./x.sh test` (pytest) after building the wheel."""

import math

import numpy as np
import pytest

import flashsampling as fs


def bf16_values(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def lm_head(b, d, v, seed):
    rng = np.random.default_rng(seed)
    hidden = rng.standard_normal((b, d)).astype(np.float32)
    weight = (rng.standard_normal((v, d)) * (2.0 / math.sqrt(d))).astype(np.float32)
    return hidden, weight


def logits(hidden, weight):
    return bf16_values(fs.bf16_bits(hidden)) @ bf16_values(fs.bf16_bits(weight)).T


def chi2_ok(counts, probs, alpha=1e-4):
    """Pearson chi-squared with bins of expected count < 5 pooled; p-value by Wilson-Hilferty."""
    n = counts.sum()
    e = probs * n
    big = e >= 5
    stat = (((counts[big] - e[big]) ** 2) / e[big]).sum()
    if e[~big].sum() >= 5:
        stat += (counts[~big].sum() - e[~big].sum()) ** 2 / e[~big].sum()
        dof = big.sum()
    else:
        dof = big.sum() - 1
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    p = 0.5 * math.erfc(z / math.sqrt(2))
    return p > alpha, stat, dof, p


def test_bf16_rounding_is_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.inf, np.nan], dtype=np.float32)
    bits = fs.bf16_bits(x)
    assert bits[0] == 0x3F80 and bits[1] == 0x3F80 and bits[2] == 0x3F82  # ties go to even
    assert bits[3] == 0xC020 and bits[4] == 0x7F80 and (bits[5] & 0x7FFF) > 0x7F80
    assert np.array_equal(fs.bf16_bits(bits), bits)  # uint16 passes through


def test_greedy_is_the_argmax():
    hidden, weight = lm_head(6, 64, 1000, 1)
    tokens = fs.sample(hidden, weight, temperature=0.0)
    assert tokens.dtype == np.uint32 and tokens.shape == (6,)
    assert np.array_equal(tokens, logits(hidden, weight).argmax(axis=1))


def test_samples_follow_softmax():
    hidden, weight = lm_head(1, 64, 50, 2)
    y = logits(hidden, weight)[0]
    h = np.repeat(hidden, 256, axis=0)
    counts = np.zeros(50, dtype=np.int64)
    for r in range(40):
        t = fs.sample(h, weight, temperature=0.8, seed=7, streams=list(range(r * 256, (r + 1) * 256)))
        counts += np.bincount(t, minlength=50)
    probs = np.exp((y - y.max()) / 0.8)
    ok, stat, dof, p = chi2_ok(counts, probs / probs.sum())
    assert ok, (stat, dof, p)


def test_determinism_per_row_controls_and_n_samples():
    hidden, weight = lm_head(4, 64, 777, 3)
    a = fs.sample(hidden, weight, 0.9, seed=5)
    assert np.array_equal(a, fs.sample(hidden, weight, 0.9, seed=5))
    temps = [0.5, 1.0, 0.0, 2.0]
    mixed = fs.sample(hidden, weight, 1.0, seed=5, temperatures=temps, return_dict=True)
    for r, t in enumerate(temps):
        scalar = fs.sample(hidden, weight, t, seed=5, return_dict=True)
        assert mixed["tokens"][r] == scalar["tokens"][r]
        assert mixed["scores"][r].tobytes() == scalar["scores"][r].tobytes()
    many = fs.sample(hidden, weight, 0.9, seed=5, n=5, sample=2)
    assert many.shape == (4, 5)
    for j in range(5):
        assert np.array_equal(many[:, j], fs.sample(hidden, weight, 0.9, seed=5, sample=2 + j))


def test_logprobs_match_numpy():
    hidden, weight = lm_head(3, 64, 300, 4)
    y = logits(hidden, weight)
    out = fs.sample(hidden, weight, 0.7, seed=9, logprobs="processed_and_raw", top_logprobs=5)
    for r in range(3):
        z = y[r] / 0.7
        lse = z.max() + np.log(np.exp(z - z.max()).sum())
        tok = out["tokens"][r]
        assert abs(out["logprobs"][r] - (z[tok] - lse)) < 1e-4
        assert abs(out["logsumexp"][r] - lse) < 1e-4 * max(1.0, abs(lse))
        raw_lse = y[r].max() + np.log(np.exp(y[r] - y[r].max()).sum())
        assert abs(out["raw_logprobs"][r] - (y[r][tok] - raw_lse)) < 1e-4
        top = out["top_logprobs"][r]
        assert [t for t, _ in top] == list(np.argsort(-z, kind="stable")[:5])
        assert all(abs(lp - (z[t] - lse)) < 1e-4 for t, lp in top)


def test_masks_and_truncation():
    hidden, weight = lm_head(2, 64, 100, 5)
    allowed = np.zeros((2, 100), dtype=bool)
    allowed[0, ::7] = True
    allowed[1, 50:] = True
    h = np.repeat(hidden, 64, axis=0)
    a = np.repeat(allowed, 64, axis=0)
    t = fs.sample(h, weight, 1.0, seed=1, allowed=a)
    assert all(a[i, tok] for i, tok in enumerate(t))
    y = logits(hidden, weight)
    top3 = set(np.argsort(-y[0], kind="stable")[:3])
    t = fs.sample(np.repeat(hidden[:1], 128, axis=0), weight, 1.0, seed=2, top_k=[3] * 128)
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
    assert fs.sample(hidden, weight, 0.0).tolist() == [1]
    assert fs.sample(hidden.astype(np.float32), weight.astype(np.float32), 0.0).tolist() == [0]


def test_cpu_tensors_run_on_the_cpu_backend():
    torch = pytest.importorskip("torch", reason="PyTorch not installed: CPU tensors not tested")
    hidden, weight = lm_head(5, 64, 300, 7)
    want = fs.sample(hidden, weight, 0.9, seed=3)
    got = fs.sample(torch.from_numpy(hidden).to(torch.bfloat16), torch.from_numpy(weight).to(torch.bfloat16), 0.9,
                    seed=3)
    assert isinstance(got, np.ndarray) and np.array_equal(got, want)

"""The Python package's CUDA path (PyTorch CUDA tensors, the fused GPU kernels): the same tokens as the
CPU path, softmax frequencies, the fused log-probabilities against torch.log_softmax and the CPU path,
PyTorch's stream semantics, and clear errors.

Without PyTorch or a CUDA device every test that needs one is skipped with the reason (``pytest -rs``
lists them); with ``FLASHSAMPLING_REQUIRE_GPU=1`` they fail instead."""

import math
import os
import sys

import numpy as np
import pytest

import flashsampling as fs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _stats import chi2_ok  # noqa: E402  (the tests' own helper module, beside this file)

REQUIRE_GPU = os.environ.get("FLASHSAMPLING_REQUIRE_GPU") == "1"

try:
    import torch
except ImportError as e:  # PyTorch is optional for the package
    torch = None
    NO_CUDA = f"PyTorch is not installed ({e})"
else:
    NO_CUDA = None if torch.cuda.is_available() else "torch.cuda.is_available() is False"


@pytest.fixture(scope="module")
def dev():
    """The CUDA device the tests run on (cuda:0), or a visible skip (a failure with REQUIRE_GPU)."""
    if NO_CUDA is not None:
        if REQUIRE_GPU:
            pytest.fail(f"FLASHSAMPLING_REQUIRE_GPU=1 but no CUDA: {NO_CUDA}")
        pytest.skip(f"SKIP CUDA tests: {NO_CUDA}")
    return torch.device("cuda", 0)


def lm_head(b, d, v, seed, dev, integer=False):
    """bf16 hidden states [B, D] and weight [V, D] on `dev`. With `integer`, values whose dot products
    are exact in f32 in any summation order (hidden in {-2..2}, weight in {-2..2}/16): the GPU and the
    CPU then compute identical logits, so tokens and scores must agree bit for bit."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    if integer:
        hidden = torch.randint(-2, 3, (b, d), generator=g).float()
        weight = torch.randint(-2, 3, (v, d), generator=g).float() / 16
    else:
        hidden = torch.randn(b, d, generator=g)
        weight = torch.randn(v, d, generator=g) * (2.0 / math.sqrt(d))
    return hidden.to(dev, torch.bfloat16), weight.to(dev, torch.bfloat16)


def on_cpu(hidden, weight, **kw):
    """The CPU path on the same bf16 values (CPU tensors go to the CPU backend as bf16 bits)."""
    return fs.sample(hidden.cpu(), weight.cpu(), **kw)


@pytest.mark.parametrize("d,v", [(256, 1000), (128, 4096)])
@pytest.mark.parametrize("b", [1, 7, 64, 200])
@pytest.mark.parametrize("t", [1.0, 0.7, 0.0])
def test_tokens_and_scores_equal_the_cpu_path_bit_for_bit(dev, b, d, v, t):
    hidden, weight = lm_head(b, d, v, seed=b * 7919 + v, dev=dev, integer=True)
    kw = dict(temperature=t, seed=12345 + v, streams=[31 * i + 5 for i in range(b)], sample=3)
    got = fs.sample(hidden, weight, **kw)
    want = on_cpu(hidden, weight, **kw)
    assert got.tokens.device == dev and got.tokens.dtype == torch.int32 and got.tokens.shape == (b,)
    assert got.scores.device == dev and got.scores.dtype == torch.float32
    tokens = got.tokens.cpu().numpy()
    assert np.array_equal(tokens.astype(np.int32), want.tokens), (tokens, want.tokens)
    assert np.array_equal(got.scores.cpu().numpy().view(np.uint32), want.scores.view(np.uint32))


@pytest.mark.parametrize("d,v,batches", [(256, 1000, [1, 7, 64, 200]), (4096, 151936, [1, 7])])
def test_tokens_equal_the_cpu_path_up_to_f32_near_ties(dev, d, v, batches):
    # Random bf16 values: the tensor cores and the CPU sum the products in different orders, so a row
    # may differ only where its two best perturbed scores are within f32 rounding of each other.
    for b in batches:
        hidden, weight = lm_head(b, d, v, seed=b + d + v, dev=dev)
        kw = dict(temperature=1.0, seed=99, streams=[7 * i + 1 for i in range(b)])
        got = fs.sample(hidden, weight, **kw)
        want = on_cpu(hidden, weight, **kw)
        tokens, scores = got.tokens.cpu().numpy().astype(np.int64), got.scores.cpu().numpy()
        assert ((tokens >= 0) & (tokens < v)).all()
        differ = tokens != want.tokens.astype(np.int64)
        tol = 1e-4 * max(1.0, float(np.abs(want.scores).max()))
        assert np.allclose(scores, want.scores, rtol=0, atol=tol), "winning scores differ beyond f32 rounding"
        assert differ.sum() <= max(1, b // 100), f"B={b}: {differ.sum()} of {b} rows differ from the CPU path"


@pytest.mark.parametrize("t", [1.0, 0.6])
def test_samples_of_one_row_follow_torch_softmax(dev, t):
    d, v, rows, calls = 64, 200, 1024, 64  # 65536 draws of one row
    hidden, weight = lm_head(1, d, v, seed=11, dev=dev)
    logits = hidden.double() @ weight.double().T  # bf16 values, exact products in f64
    probs = torch.softmax(logits[0] / t, dim=0).cpu().numpy()
    h = hidden.expand(rows, d).contiguous()
    counts = torch.zeros(v, dtype=torch.int64, device=dev)
    for c in range(calls):
        if c % 2:  # half the draws from other streams, half from other sample indices
            tok = fs.sample(h, weight, t, seed=2024, streams=list(range(c * rows, (c + 1) * rows))).tokens
        else:
            tok = fs.sample(h, weight, t, seed=2024, sample=c).tokens
        counts += torch.bincount(tok.long(), minlength=v)
    ok, stat, dof, p = chi2_ok(counts.cpu().numpy(), probs)
    assert ok, f"chi-squared {stat:.1f} on {dof} degrees of freedom, p = {p:.2e}"


def test_result_is_on_the_device_and_follows_the_current_stream(dev):
    # A weight large enough that the kernel takes a while (65536 x 4096 bf16, 512 MiB).
    b, d, v = 64, 4096, 65536
    hidden, weight = lm_head(b, d, v, seed=5, dev=dev)
    kw = dict(temperature=0.8, seed=77, streams=list(range(1000, 1000 + b)))
    want = fs.sample(hidden, weight, **kw).tokens
    torch.cuda.synchronize(dev)
    assert want.device == dev and want.dtype == torch.int32
    s = torch.cuda.Stream(dev)
    s.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(s):
        for _ in range(3):
            # The input is written on `s` only after a spin of the GPU: without the event that makes the
            # kernel wait for `s`, it would read zeros. The copy that follows the call on `s` must see
            # the tokens, not the empty tensor's bytes.
            h = torch.zeros_like(hidden)
            torch.cuda._sleep(20_000_000)
            h.copy_(hidden)
            got = fs.sample(h, weight, **kw).tokens
            seen = got.clone()
            s.synchronize()
            assert torch.equal(seen, want)
            assert torch.equal(got, want)
    # Back on the default stream: the same tokens again.
    assert torch.equal(fs.sample(hidden, weight, **kw).tokens, want)


def test_buffers_follow_changing_batches(dev):
    for b in [3, 300, 1, 64]:
        hidden, weight = lm_head(b, 64, 500, seed=b, dev=dev, integer=True)
        got = fs.sample(hidden, weight, 1.0, seed=b).tokens
        want = on_cpu(hidden, weight, temperature=1.0, seed=b).tokens
        assert np.array_equal(got.cpu().numpy().astype(np.int32), want)
    one = fs.sample(hidden[0], weight, 1.0, seed=b).tokens  # a [D] hidden state is one row
    assert one.shape == (1,) and one.item() == got[0].item()


def test_a_second_device(dev):
    if torch.cuda.device_count() < 2:
        pytest.skip("SKIP second-device test: one CUDA device")
    other = torch.device("cuda", 1)
    hidden, weight = lm_head(8, 64, 500, seed=8, dev=dev, integer=True)
    a = fs.sample(hidden, weight, 1.0, seed=8).tokens
    c = fs.sample(hidden.to(other), weight.to(other), 1.0, seed=8).tokens
    assert c.device == other and torch.equal(a.cpu(), c.cpu())
    with pytest.raises(ValueError, match="one device"):
        fs.sample(hidden, weight.to(other))


def test_nan_rows_get_token_minus_one(dev):
    hidden, weight = lm_head(4, 64, 100, seed=3, dev=dev)
    hidden[2, 5] = float("nan")
    out = fs.sample(hidden, weight, 1.0)
    tokens = out.tokens.cpu().tolist()
    assert tokens[2] == -1 and all(0 <= t < 100 for i, t in enumerate(tokens) if i != 2)
    assert math.isnan(out.scores[2].item())
    # The CPU path gives the same outcome (issue 51.7: it raised before).
    on_host = on_cpu(hidden, weight, temperature=1.0)
    assert on_host.tokens[2] == -1 and math.isnan(on_host.scores[2])


def test_clear_errors(dev):
    hidden, weight = lm_head(4, 64, 100, seed=4, dev=dev)
    with pytest.raises(ValueError, match="hidden is on cpu"):
        fs.sample(hidden.cpu(), weight)
    with pytest.raises(ValueError, match="weight is on cpu"):
        fs.sample(hidden, weight.cpu())
    with pytest.raises(TypeError, match="NumPy|ndarray"):
        fs.sample(hidden.cpu().float().numpy(), weight)
    with pytest.raises(TypeError, match="both must be torch.bfloat16 or both torch.float16"):
        fs.sample(hidden, weight.half())
    with pytest.raises(TypeError, match="torch.float32"):
        fs.sample(hidden.float(), weight)
    with pytest.raises(ValueError, match="hidden size mismatch: hidden states have D = 64, the LM-head weight has D = 32"):
        fs.sample(hidden, weight[:, :32].contiguous())
    with pytest.raises(ValueError, match="contiguous rows"):
        fs.sample(hidden, weight[:, :32])  # rows of 32 with a stride of 64
    with pytest.raises(ValueError, match="contiguous rows"):
        fs.sample(hidden.T.contiguous().T, weight)  # column-major
    with pytest.raises(ValueError, match="contiguous rows"):
        fs.sample(hidden[::2], weight)
    flat = torch.zeros(4 * 64 + 1, dtype=torch.bfloat16, device=dev)
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        fs.sample(flat[1:].view(4, 64), weight)
    with pytest.raises(ValueError, match="temperature -1 is invalid"):
        fs.sample(hidden, weight, -1.0)
    with pytest.raises(ValueError, match="logprobs"):
        fs.sample(hidden, weight, logprobs="yes")
    with pytest.raises(ValueError, match="threads"):
        fs.sample(hidden, weight, threads=2)
    # Still usable after the errors.
    assert fs.sample(hidden, weight, 0.0).tokens.shape == (4,)


@pytest.mark.parametrize("b,d,v", [(1, 256, 1000), (7, 128, 4096), (200, 64, 1000)])
@pytest.mark.parametrize("t", [1.0, 0.0])
def test_float16_tensors_equal_the_cpu_path_bit_for_bit(dev, b, d, v, t):
    # Integer-valued heads (exact f32 dot products) in float16, with weights of float16 precision that
    # bfloat16 cannot hold (k/1024): the f16 kernels, the CPU backend's f16 path, the same bits.
    g = torch.Generator(device="cpu").manual_seed(b * 31 + v)
    hidden = torch.randint(-2, 3, (b, d), generator=g).half().to(dev)
    weight = (torch.randint(-64, 65, (v, d), generator=g).float() / 1024 + 1).half().to(dev)
    kw = dict(temperature=t, seed=77 + v, streams=[13 * i + 2 for i in range(b)], logprobs="processed")
    got = fs.sample(hidden, weight, **kw)
    want = fs.sample(hidden.cpu().numpy(), weight.cpu().numpy(), **kw)
    assert np.array_equal(got.tokens.cpu().numpy().astype(np.int32), want.tokens)
    assert np.array_equal(got.scores.cpu().numpy().view(np.uint32), want.scores.view(np.uint32))
    assert np.allclose(got.logprobs.cpu().numpy(), want.logprobs, rtol=0, atol=1e-4)
    # Not what the same values rounded to bfloat16 would give (the f16 path keeps the f16 precision).
    if t == 1.0 and b >= 7:
        rounded = fs.sample(hidden.bfloat16(), weight.bfloat16(), **kw).scores.cpu().numpy()
        assert not np.array_equal(rounded.view(np.uint32), want.scores.view(np.uint32))


@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty")  # the refused capture records nothing
def test_graph_capture_replays_each_steps_keys(dev):
    # Issue 51.6: with the per-row keys as CUDA tensors, a call recorded by torch.cuda.graph replays with
    # the values they hold at each replay: bit for bit the eager calls' tokens and log-probabilities.
    b, d, v = 4, 64, 1000
    hidden, weight = lm_head(b, d, v, seed=9, dev=dev)
    seeds = torch.arange(100, 100 + b, dtype=torch.int64, device=dev)
    positions = torch.zeros(b, dtype=torch.int64, device=dev)
    kw = dict(seeds=seeds, positions=positions, top_p=[0.9] * b, logprobs="processed")
    want = []
    for step in range(3):
        positions.fill_(step)
        s = fs.sample(hidden, weight, **kw)
        want.append((s.tokens.clone(), s.logprobs.clone()))
    assert any(not torch.equal(want[0][0], w[0]) for w in want[1:]), "the steps should draw other tokens"
    torch.cuda.synchronize(dev)  # the eager calls (the warm-up) have finished
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fs.sample(hidden, weight, **kw)
    for step in (2, 0, 1, 2):
        positions.fill_(step)
        graph.replay()
        torch.cuda.synchronize(dev)
        assert torch.equal(out.tokens, want[step][0]), step
        assert torch.equal(out.logprobs.view(torch.int32), want[step][1].view(torch.int32)), step
    # Calls after the capture get buffers of their own; the graph keeps its.
    positions.fill_(1)
    again = fs.sample(hidden, weight, **kw)
    assert torch.equal(again.tokens, want[1][0])
    positions.fill_(0)
    graph.replay()
    torch.cuda.synchronize(dev)
    assert torch.equal(out.tokens, want[0][0])
    # Keys from the host cannot be replayed with new noise: refused, nothing recorded.
    torch.cuda.synchronize(dev)
    with pytest.raises(RuntimeError, match="device memory"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            fs.sample(hidden, weight, seed=3)
    torch.cuda.synchronize(dev)
    assert fs.sample(hidden, weight, 0.0).tokens.shape == (b,)


@pytest.mark.parametrize("control", [
    dict(temperatures=[0.5, 1.0, 0.0, 2.0]),
    dict(seeds=[1, 2, 3, 4]),
    dict(n=3),
    dict(logprobs="processed"),
    dict(softcap=30.0),
    dict(top_k=[5, 0, 1, 10]),
    dict(top_p=[0.9, 1.0, 0.5, 0.99]),
    dict(min_p=[0.1, 0.0, 0.2, 0.05]),
    dict(top_logprobs=3),
    dict(allowed="mask"),
    dict(logit_bias=[{3: 2.0}, None, {7: -1.5, 50: 1.0}, {}]),
    dict(repetition_penalty=[1.3, 1.0, 0.7, 2.0], prompt_tokens=[[1, 2], [3], [], [4, 5, 6]]),
    dict(frequency_penalty=0.5, presence_penalty=[0.0, 0.3, -0.2, 1.0], output_tokens=[[1, 1, 2], [], [9], [4] * 3]),
])
def test_per_row_controls_reach_the_gpu_backend(dev, control):
    """Passed through to the Rust GPU backend, which takes every one of them: they must give the CPU
    path's tokens (exact logits); a control the kernels did not take would raise NotImplementedError."""
    hidden, weight = lm_head(4, 64, 100, seed=6, dev=dev, integer=True)
    if control.get("allowed") == "mask":
        allowed = torch.zeros(4, 100, dtype=torch.bool, device=dev)
        allowed[:, ::3] = True
        control = dict(allowed=allowed)
    got = fs.sample(hidden, weight, 0.9, seed=5, **control)
    want = on_cpu(hidden, weight, temperature=0.9, seed=5,
                  **{k: (x.cpu().numpy() if hasattr(x, "cpu") else x) for k, x in control.items()})
    assert np.array_equal(got.tokens.cpu().numpy().astype(np.int32), want.tokens)



@pytest.mark.parametrize("b,v", [(4, 100), (9, 1000), (3, 4097)])
def test_device_masks_equal_host_masks_without_a_host_copy(dev, b, v):
    # A CUDA mask (booleans [B, V] or int32 words [B, ceil(V/32)]) is packed on the current stream and
    # read by the kernel there: the same tokens and scores as the same mask from the host.
    hidden, weight = lm_head(b, 64, v, seed=b + v, dev=dev, integer=True)
    g = torch.Generator(device="cpu").manual_seed(v)
    allowed = torch.rand(b, v, generator=g) < 0.3
    allowed[:, v - 1] = True  # the last word's high bits, the sign bit of an int32 word
    kw = dict(temperature=0.9, seed=3, streams=list(range(b)), logit_bias=[{1: 2.0}] * b)
    host = fs.sample(hidden, weight, allowed=allowed.numpy(), **kw)
    on_device = fs.sample(hidden, weight, allowed=allowed.to(dev), **kw)
    words = -(-v // 32)
    padded = np.zeros((b, words * 32), dtype=np.uint64)
    padded[:, :v] = allowed.numpy()
    packed = (padded.reshape(b, words, 32) << np.arange(32, dtype=np.uint64)).sum(axis=-1).astype(np.uint32)
    as_words = fs.sample(hidden, weight, allowed=torch.from_numpy(packed.view(np.int32)).to(dev), **kw)
    for got in (on_device, as_words):
        assert torch.equal(got.tokens, host.tokens)
        assert torch.equal(got.scores.view(torch.int32), host.scores.view(torch.int32))
    tokens = on_device.tokens.cpu().numpy()
    assert allowed.numpy()[np.arange(b), tokens].all(), "a disallowed token was drawn"
    with pytest.raises(ValueError, match="booleans"):
        fs.sample(hidden, weight, allowed=allowed[:, :-1].to(dev))
    with pytest.raises(ValueError, match=r"ceil\(V/32\)"):
        fs.sample(hidden, weight, allowed=torch.zeros(b, words + 1, dtype=torch.int32, device=dev))
    with pytest.raises(TypeError, match="torch.bool"):
        fs.sample(hidden, weight, allowed=allowed.to(dev).float())


# Sparse logit adjustments (logit_bias, repetition / frequency / presence penalties): the GPU kernels
# score the adjusted tokens apart and merge them; on exact logits, the same tokens and scores as the CPU.


def penalty_controls(hidden, weight, seed):
    """Per-row logit biases, penalties and token lists that touch each row's likely tokens: the best three
    in the output (1 to 3 times), the next three in the prompt, a bias on the best and the seventh, random
    ones besides; some rows without a bias."""
    b, v = hidden.shape[0], weight.shape[0]
    top = torch.argsort(hidden.double() @ weight.double().T, dim=1, descending=True, stable=True)[:, :8].cpu()
    rng = np.random.default_rng(seed)
    logit_bias, prompt, output = [], [], []
    for r in range(b):
        best = top[r].tolist()
        bias = {int(t): float(x) for t, x in zip(rng.choice(v, 4, replace=False), rng.uniform(-3, 3, 4))}
        bias.update({best[0]: -0.75, best[6]: 1.5})
        logit_bias.append(None if r % 5 == 2 else bias)
        prompt.append(rng.choice(v, 16).tolist() + best[3:6])
        repeated = [t for i, t in enumerate(best[:3]) for _ in range(1 + (r + i) % 3)]
        output.append(rng.choice(v, 6).tolist() + repeated)
    return dict(logit_bias=logit_bias, prompt_tokens=prompt, output_tokens=output,
                repetition_penalty=[[1.0, 1.3, 0.8, 2.0, 0.0][r % 5] for r in range(b)],
                frequency_penalty=[[0.0, 0.4, 1.0][r % 3] for r in range(b)],
                presence_penalty=[[0.0, 0.6, -0.3, 0.2][r % 4] for r in range(b)])


@pytest.mark.parametrize("b,d,v", [(7, 256, 1000), (64, 128, 4096)])
@pytest.mark.parametrize("t", [1.0, 0.7, 0.0])
@pytest.mark.parametrize("n", [1, 3])
def test_logit_bias_and_penalties_equal_the_cpu_path(dev, b, d, v, t, n):
    hidden, weight = lm_head(b, d, v, seed=41 * b + v, dev=dev, integer=True)
    adj = penalty_controls(hidden, weight, seed=b + v)
    kw = dict(temperature=t, seed=777, streams=[13 * i + 2 for i in range(b)], n=n)
    got = fs.sample(hidden, weight, **kw, **adj)
    want = on_cpu(hidden, weight, **kw, **adj)
    tokens = got.tokens.cpu().numpy().astype(np.int32)
    assert np.array_equal(tokens, want.tokens), (tokens, want.tokens)
    assert np.array_equal(got.scores.cpu().numpy().view(np.uint32), want.scores.view(np.uint32))
    if t == 0.0:  # the adjustments move the greedy rows' winners
        plain = on_cpu(hidden, weight, **kw).tokens
        assert (plain != want.tokens).any()


@pytest.mark.parametrize("n", [1, 3])
def test_logit_bias_and_penalties_with_logprobs_equal_the_cpu_path(dev, n):
    b, d, v = 37, 128, 3001
    hidden, weight = lm_head(b, d, v, seed=1414, dev=dev, integer=True)
    adj = penalty_controls(hidden, weight, seed=3)
    kw = dict(seed=17, streams=[5 * i + 1 for i in range(b)], n=n, logprobs="processed_and_raw",
              temperatures=[[0.7, 0.0, 1.0, 1.8, 0.35][i % 5] for i in range(b)])
    got = fs.sample(hidden, weight, **kw, **adj)
    want = on_cpu(hidden, weight, **kw, **adj)
    assert_logprob_outputs(got, b, n, dev)
    assert np.array_equal(got.tokens.cpu().numpy().astype(np.int32), want.tokens)
    assert np.array_equal(got.scores.cpu().numpy().view(np.uint32), want.scores.view(np.uint32))
    assert_close_to_cpu(got, want, b, n, np.ones(b, dtype=bool))


def test_adjustment_inputs_on_the_cuda_path(dev):
    b, v = 6, 500
    hidden, weight = lm_head(b, 64, v, seed=12, dev=dev, integer=True)
    kw = dict(temperature=1.0, seed=4, streams=list(range(b)))
    plain = fs.sample(hidden, weight, **kw)
    # Empty and neutral keywords: the same tokens and scores as none.
    for adj in [dict(logit_bias=[None] * b), dict(logit_bias=[{}] * b, prompt_tokens=[[]] * b),
                dict(repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0, output_tokens=[[1, 2]] * b)]:
        got = fs.sample(hidden, weight, **kw, **adj)
        assert torch.equal(got.tokens, plain.tokens), adj
        assert torch.equal(got.scores.view(torch.int32), plain.scores.view(torch.int32)), adj
    # Token lists as CUDA tensors (copied to the host), a bias that forces a token.
    rows = [torch.tensor([3, 4, 4, 9], device=dev)] * b
    got = fs.sample(hidden, weight, output_tokens=rows, frequency_penalty=0.5, presence_penalty=0.25, **kw).tokens
    want = on_cpu(hidden, weight, output_tokens=[[3, 4, 4, 9]] * b, frequency_penalty=0.5, presence_penalty=0.25,
                  **kw).tokens
    assert np.array_equal(got.cpu().numpy().astype(np.int32), want)
    assert fs.sample(hidden, weight, logit_bias={42: 100.0}, **kw).tokens.tolist() == [42] * b
    # Bad input: the library's messages, and the device stays usable.
    with pytest.raises(ValueError, match=r"token id 500 is out of range \(V = 500\)"):
        fs.sample(hidden, weight, logit_bias=[{500: 1.0}] + [None] * (b - 1), **kw)
    with pytest.raises(ValueError, match="invalid logit adjustments"):
        fs.sample(hidden, weight, repetition_penalty=-1.0, **kw)
    with pytest.raises(ValueError, match="per-row presence penalties has 2 elements"):
        fs.sample(hidden, weight, presence_penalty=[0.1, 0.2], **kw)
    assert torch.equal(fs.sample(hidden, weight, **kw).tokens, plain.tokens)

# Fused log-probabilities (logprobs="processed" / "processed_and_raw"): the GPU kernel's values, as
# float32 CUDA tensors.


def reference(hidden, weight, temps, tokens):
    """f64 references from the bf16 values: each token's log-probability under softmax(logits / T_r)
    (None where T_r = 0) and under softmax(logits), and each row's log-sum-exp of logits / T_r.
    `temps` [B] (Python floats), `tokens` [B, n] int64 on the device."""
    logits = hidden.double() @ weight.double().T  # exact products of bf16 values, f64 sums
    t = torch.tensor([x if x > 0 else 1.0 for x in temps], dtype=torch.float64, device=logits.device)
    scaled = logits / t[:, None]
    processed = torch.log_softmax(scaled, dim=1).gather(1, tokens)
    raw = torch.log_softmax(logits, dim=1).gather(1, tokens)
    return processed, raw, torch.logsumexp(scaled, dim=1)


def assert_logprob_outputs(got, b, n, dev, raw=True):
    shape = (b,) if n == 1 else (b, n)
    keys = ("logprobs", "raw_logprobs") if raw else ("logprobs",)
    for key in keys:
        x = getattr(got, key)
        assert x.device == dev and x.dtype == torch.float32 and tuple(x.shape) == shape, (key, x)
    if not raw:
        assert got.raw_logprobs is None
    lse = got.logsumexp
    assert lse.device == dev and lse.dtype == torch.float32 and tuple(lse.shape) == (b,) and lse.is_contiguous()
    assert got.top_logprobs is None


def assert_lse_close(got, want, what):
    """Within 1e-5 relative (of max(1, |want|)); NaN exactly where `want` is NaN."""
    got, want = got.double().cpu(), want.double().cpu()
    assert torch.equal(got.isnan(), want.isnan()), f"{what}: NaN rows differ: {got} vs {want}"
    ok = ~want.isnan()
    err = (got[ok] - want[ok]).abs() / want[ok].abs().clamp(min=1.0)
    assert err.numel() == 0 or err.max().item() <= 1e-5, f"{what}: relative error {err.max().item():.2e}"


@pytest.mark.parametrize("b,d,v", [(7, 256, 1000), (64, 128, 4096), (3, 4096, 32000)])
@pytest.mark.parametrize("t", [1.0, 0.6, 1.7])
@pytest.mark.parametrize("n", [1, 3])
def test_logprobs_match_torch_log_softmax(dev, b, d, v, t, n):
    hidden, weight = lm_head(b, d, v, seed=31 * b + v, dev=dev)
    got = fs.sample(hidden, weight, t, seed=4242, streams=[5 * i + 2 for i in range(b)], n=n,
                    logprobs="processed_and_raw")
    assert_logprob_outputs(got, b, n, dev)
    tokens = got.tokens.long().view(b, n)
    assert ((tokens >= 0) & (tokens < v)).all()
    processed, raw, lse = reference(hidden, weight, [t] * b, tokens)
    err = (got.logprobs.double().view(b, n) - processed).abs().max().item()
    assert err <= 1e-4, f"processed log-probabilities off by {err:.2e}"
    err = (got.raw_logprobs.double().view(b, n) - raw).abs().max().item()
    assert err <= 1e-4, f"raw log-probabilities off by {err:.2e}"
    assert_lse_close(got.logsumexp, lse, "log-sum-exp")


@pytest.mark.parametrize("n", [1, 2])
def test_greedy_rows_have_logprob_zero_and_nan_logsumexp(dev, n):
    b, d, v = 6, 256, 3000
    temps = [1.0, 0.0, 0.7, 0.0, 1.3, 0.0]
    hidden, weight = lm_head(b, d, v, seed=77, dev=dev)
    got = fs.sample(hidden, weight, seed=8, temperatures=temps, n=n, logprobs="processed_and_raw")
    assert_logprob_outputs(got, b, n, dev)
    tokens = got.tokens.long().view(b, n)
    lps = got.logprobs.view(b, n).cpu()
    processed, raw, lse = reference(hidden, weight, temps, tokens)
    greedy = torch.tensor([x == 0 for x in temps])
    assert (lps[greedy] == 0).all(), lps  # the argmax has probability 1
    assert (tokens[greedy.to(dev)] == tokens[greedy.to(dev)][:, :1]).all()  # every sample of a greedy row
    err = (lps[~greedy].double() - processed.cpu()[~greedy]).abs().max().item()
    assert err <= 1e-4, f"sampled rows' log-probabilities off by {err:.2e}"
    # Raw log-probabilities are defined for greedy rows too: log_softmax(logits) at the argmax.
    err = (got.raw_logprobs.double().view(b, n) - raw).abs().max().item()
    assert err <= 1e-4, f"raw log-probabilities off by {err:.2e}"
    assert_lse_close(got.logsumexp, torch.where(greedy.to(dev), float("nan"), lse), "log-sum-exp")
    # A global temperature of 0: every row greedy.
    got = fs.sample(hidden, weight, 0.0, n=n, logprobs="processed")
    assert_logprob_outputs(got, b, n, dev, raw=False)
    assert (got.logprobs == 0).all() and got.logsumexp.isnan().all()


@pytest.mark.parametrize("n", [1, 4])
def test_logprobs_do_not_change_tokens_or_scores(dev, n):
    b, d, v = 64, 256, 4096
    hidden, weight = lm_head(b, d, v, seed=123, dev=dev)
    kw = dict(seed=99, streams=[3 * i + 1 for i in range(b)], sample=2, n=n,
              temperatures=[[0.8, 0.0, 1.0, 1.9][i % 4] for i in range(b)])
    plain = fs.sample(hidden, weight, **kw)
    assert plain.logprobs is None and plain.raw_logprobs is None and plain.logsumexp is None
    both = fs.sample(hidden, weight, logprobs="processed_and_raw", **kw)
    processed = fs.sample(hidden, weight, logprobs="processed", **kw)
    for got in (both, processed):
        assert torch.equal(got.tokens, plain.tokens)
        assert torch.equal(got.scores.view(torch.int32), plain.scores.view(torch.int32))
    assert_logprob_outputs(processed, b, n, dev, raw=False)
    # One kernel computes both: the processed values do not depend on asking for the raw ones too.
    assert torch.equal(processed.logprobs, both.logprobs)
    assert torch.equal(processed.logsumexp.isnan(), both.logsumexp.isnan())
    ok = ~both.logsumexp.isnan()
    assert torch.equal(processed.logsumexp[ok], both.logsumexp[ok])


def assert_close_to_cpu(got, want, b, n, same):
    """GPU and CPU log-probabilities on the rows (`same`, a [B] bool array) whose tokens agree:
    within 1e-4; log-sum-exp within 1e-5 relative, NaN where the CPU has NaN."""
    for key in ("logprobs", "raw_logprobs"):
        g = getattr(got, key).cpu().numpy().astype(np.float64).reshape(b, n)[same]
        c = np.asarray(getattr(want, key), dtype=np.float64).reshape(b, n)[same]
        assert np.array_equal(np.isnan(g), np.isnan(c)), key
        diff = np.abs(g - c)[~np.isnan(c)]
        err = diff.max() if diff.size else 0.0
        assert err <= 1e-4, f"{key}: GPU and CPU differ by {err:.2e}"
    assert_lse_close(got.logsumexp.cpu()[torch.from_numpy(same)],
                     torch.from_numpy(np.asarray(want.logsumexp)[same]), "log-sum-exp vs the CPU")


@pytest.mark.parametrize("n", [1, 3])
def test_logprobs_equal_the_cpu_path_on_exact_logits(dev, n):
    # Integer heads: identical logits on both backends, so tokens and scores agree bit for bit.
    b, d, v = 37, 128, 3001
    hidden, weight = lm_head(b, d, v, seed=2718, dev=dev, integer=True)
    kw = dict(seed=31, streams=[11 * i + 3 for i in range(b)], n=n, logprobs="processed_and_raw",
              temperatures=[[0.7, 0.0, 1.0, 1.8, 0.35][i % 5] for i in range(b)])
    got = fs.sample(hidden, weight, **kw)
    want = on_cpu(hidden, weight, **kw)
    assert_logprob_outputs(got, b, n, dev)
    tokens = got.tokens.cpu().numpy().astype(np.int32)
    assert np.array_equal(tokens, want.tokens)
    assert np.array_equal(got.scores.cpu().numpy().view(np.uint32), want.scores.view(np.uint32))
    assert_close_to_cpu(got, want, b, n, np.ones(b, dtype=bool))


def test_logprobs_agree_with_the_cpu_path_on_random_heads(dev):
    # Random bf16 values: different summation orders, so a row may differ on an f32 near-tie; the
    # project's standard is tokens equal on at least 99.9 % of the rows.
    b, d, v = 2048, 256, 8192
    hidden, weight = lm_head(b, d, v, seed=1618, dev=dev)
    kw = dict(seed=5, streams=[7 * i + 1 for i in range(b)], logprobs="processed_and_raw",
              temperatures=[[1.0, 0.6, 0.0, 1.4][i % 4] for i in range(b)])
    got = fs.sample(hidden, weight, **kw)
    want = on_cpu(hidden, weight, **kw)
    assert_logprob_outputs(got, b, 1, dev)
    same = got.tokens.cpu().numpy().astype(np.int64) == want.tokens.astype(np.int64)
    assert same.mean() >= 0.999, f"{(~same).sum()} of {b} rows differ from the CPU path"
    assert_close_to_cpu(got, want, b, 1, same)


def test_logprobs_follow_the_current_stream(dev):
    b, d, v, n = 64, 4096, 65536, 2  # a kernel that takes a while; n = 2: the log-sum-exp is reduced
    hidden, weight = lm_head(b, d, v, seed=15, dev=dev)
    kw = dict(temperature=0.9, seed=3, streams=list(range(b)), n=n, logprobs="processed_and_raw")
    want = fs.sample(hidden, weight, **kw)
    torch.cuda.synchronize(dev)
    s = torch.cuda.Stream(dev)
    s.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(s):
        h = torch.zeros_like(hidden)
        torch.cuda._sleep(20_000_000)
        h.copy_(hidden)
        got = fs.sample(h, weight, **kw)
        seen = {k: getattr(got, k).clone() for k in ("tokens", "logprobs", "raw_logprobs", "logsumexp")}
        s.synchronize()
    for k, x in seen.items():
        assert torch.equal(x.view(torch.int32), getattr(want, k).view(torch.int32)), k


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("n", [1, 3])
def test_top_logprobs_equal_the_cpu_path_on_exact_logits(dev, raw, n):
    # Integer heads: identical logits on both backends (many ties), so the lists agree token for token.
    b, d, v, k = 37, 128, 3001, 20
    hidden, weight = lm_head(b, d, v, seed=1618, dev=dev, integer=True)
    kw = dict(seed=7, n=n, top_logprobs=k, top_logprobs_raw=raw, top_k=[[0, 5, 50][i % 3] for i in range(b)],
              temperatures=[[0.7, 0.0, 1.0, 1.8][i % 4] for i in range(b)])
    got = fs.sample(hidden, weight, **kw)
    want = on_cpu(hidden, weight, **kw)
    tokens, lps = got.top_logprobs
    assert tokens.device == dev and tokens.dtype == torch.int32 and tuple(tokens.shape) == (b, k)
    assert lps.device == dev and lps.dtype == torch.float32 and tuple(lps.shape) == (b, k)
    tokens, lps = tokens.cpu().numpy(), lps.cpu().numpy()
    assert np.array_equal(got.tokens.cpu().numpy().astype(np.int32), want.tokens)
    want_tokens, want_lps = want.top_logprobs
    for r in range(b):
        assert np.array_equal(tokens[r], want_tokens[r]), r
        assert np.allclose(lps[r], want_lps[r], rtol=0, atol=1e-4, equal_nan=True), r


def test_native_call_checks_the_logprob_outputs():
    # The native entry point refuses log-probability output tensors that do not match the option, before
    # it touches a device (so this runs without CUDA; the addresses are never used).
    args = (0, 0, 0, 1, 8, 0, 16, 8, 0, 0, 1)

    def controls(**kw):
        return dict(temperature=1.0, seed=0, **kw)

    with pytest.raises(ValueError, match="logprobs_ptr"):
        fs._sample_cuda(*args, controls(logprobs="processed"))
    with pytest.raises(ValueError, match="logsumexp_ptr"):
        fs._sample_cuda(*args, controls(logprobs="processed"), logprobs_ptr=256)
    with pytest.raises(ValueError, match="raw_logprobs_ptr"):
        fs._sample_cuda(*args, controls(logprobs="processed_and_raw"), logprobs_ptr=256, logsumexp_ptr=512)
    with pytest.raises(ValueError, match="raw_logprobs_ptr"):
        fs._sample_cuda(*args, controls(logprobs="processed"), logprobs_ptr=256, raw_logprobs_ptr=512,
                        logsumexp_ptr=768)
    with pytest.raises(ValueError, match="logprobs_ptr"):
        fs._sample_cuda(*args, controls(logprobs="off"), logprobs_ptr=256)
    with pytest.raises(ValueError, match="off, processed, processed_and_raw"):
        fs._sample_cuda(*args, controls(logprobs="raw"))
    # A misspelt control is an error, not its default.
    with pytest.raises(ValueError, match='unknown control "temperatures_"'):
        fs._sample_cuda(*args, controls(temperatures_=[0.5]))
    with pytest.raises(ValueError, match="unknown control"):
        fs._sample_cpu(np.zeros(8, np.uint16), 1, 8, np.zeros(128, np.uint16), 16, 8, controls(topk=[3]))


def test_native_call_builds_the_adjustments_first():
    # The native entry point turns the flat logit-bias and penalty arguments into the library's sparse
    # adjustments before it touches a device (so this runs without CUDA; the addresses are never used).
    args = (0, 0, 0, 1, 8, 0, 16, 8, 0, 0, 1)  # B = 1, D = 8, V = 16

    def native(**kw):
        return fs._sample_cuda(*args, dict(temperature=1.0, seed=0, **kw))

    with pytest.raises(ValueError, match=r"row 0: token id 20 is out of range \(V = 16\)"):
        native(logit_bias=([1], [20], [1.0]))
    with pytest.raises(ValueError, match=r"row 0: token id 16 is out of range \(V = 16\)"):
        native(prompt_tokens=([2], [3, 16]))
    with pytest.raises(ValueError, match="penalties must be finite, repetition > 0"):
        native(repetition_penalty=[-1.0])
    with pytest.raises(ValueError, match="per-row output tokens has 2 elements, but its shape needs 1"):
        native(output_tokens=([1, 1], [3, 4]))
    with pytest.raises(ValueError, match="per-row frequency penalties has 2 elements"):
        native(frequency_penalty=[0.5, 0.5])
    with pytest.raises(ValueError, match="logit-bias values"):
        native(logit_bias=([2], [3, 4], [1.0]))
    with pytest.raises(ValueError, match="per-row prompt tokens has 2 elements, but its shape needs 3"):
        native(prompt_tokens=([3], [3, 4]))


def test_per_row_keys_as_cuda_tensors_match_lists(dev):
    # Issue 51.7: temperatures, seeds, streams and positions as CUDA tensors are turned into the row words on the
    # device (no .tolist(), no host sync) and draw what the same controls as lists draw, bit for bit.
    b, d, v = 12, 256, 5000
    hidden, weight = lm_head(b, d, v, seed=62, dev=dev)
    temps = [[0.7, 0.0, 1.0, 1.8, 1e-3, 0.35][i % 6] for i in range(b)]
    seeds = [1000 + i for i in range(b)]
    streams = [5 * i + 1 for i in range(b)]
    positions = [17 * i for i in range(b)]
    on_device = dict(temperatures=torch.tensor(temps, dtype=torch.float32, device=dev),
                     seeds=torch.tensor(seeds, dtype=torch.int64, device=dev),
                     streams=torch.tensor(streams, dtype=torch.int64, device=dev),
                     positions=torch.tensor(positions, dtype=torch.int64, device=dev))
    for extra in (dict(), dict(top_k=[30] * b), dict(n=3)):
        want = fs.sample(hidden, weight, temperatures=temps, seeds=seeds, streams=streams, positions=positions,
                         logprobs="processed", **extra)
        got = fs.sample(hidden, weight, logprobs="processed", **on_device, **extra)
        assert torch.equal(got.tokens, want.tokens), extra
        assert torch.equal(got.logprobs.view(torch.int32), want.logprobs.view(torch.int32)), extra
    # A scalar temperature and seed with tensor streams only.
    want = fs.sample(hidden, weight, 0.8, seed=5, streams=streams)
    got = fs.sample(hidden, weight, 0.8, seed=5, streams=on_device["streams"])
    assert torch.equal(got.tokens, want.tokens)
    with pytest.raises(ValueError, match="CUDA tensors"):
        fs.sample(hidden, weight, temperatures=on_device["temperatures"], seeds=seeds)
    with pytest.raises(ValueError, match="temperature -1"):
        fs.sample(hidden, weight, -1.0, streams=on_device["streams"])


def test_score_on_the_gpu_matches_the_sampled_tokens_and_the_cpu_path(dev):
    # Issue 52.1: fs.score with CUDA tensors runs the GPU's fused pass. Scoring the tokens a call sampled gives its
    # log-probabilities bit for bit; given tokens agree with the CPU path's fs.score (exact logits) under per-row
    # temperatures (greedy rows too), soft-cap, a CUDA-tensor mask and a logit bias.
    b, d, v = 9, 128, 1000
    hidden, weight = lm_head(b, d, v, seed=52, dev=dev)
    temps = [0.7, 1.0, 0.0, 1.6, 1.0, 0.4, 1.0, 2.0, 0.9]
    s = fs.sample(hidden, weight, temperatures=temps, softcap=3.0, seed=4, logprobs="processed_and_raw")
    got = fs.score(hidden, weight, s.tokens, temperatures=temps, softcap=3.0)
    assert got["logprobs"].is_cuda and got["top_logprobs"] is None and got["ranks"] is None
    for key, want in (("logprobs", s.logprobs), ("raw_logprobs", s.raw_logprobs), ("logsumexp", s.logsumexp)):
        assert torch.equal(got[key].view(torch.int32), want.view(torch.int32)), key
    xh, xw = lm_head(b, d, v, seed=53, dev=dev, integer=True)
    g = torch.Generator(device="cpu").manual_seed(5)
    allowed = torch.rand(b, v, generator=g) < 0.6
    allowed[:, 0] = True
    tokens = torch.randint(0, v, (b,), generator=g)
    kw = dict(temperatures=temps, softcap=3.0, logit_bias=[{int(tokens[r]): 0.5} for r in range(b)])
    on_gpu = fs.score(xh, xw, tokens.to(dev), allowed=allowed.to(dev), **kw)
    on_host = fs.score(xh.cpu(), xw.cpu(), tokens.tolist(), allowed=allowed.numpy(), **kw)
    for key in ("logprobs", "raw_logprobs", "logsumexp", "raw_logsumexp"):
        a, want = on_gpu[key].cpu().numpy(), on_host[key]
        assert np.array_equal(np.isnan(a), np.isnan(want)) and np.array_equal(np.isinf(a), np.isinf(want)), key
        finite = np.isfinite(want)
        assert np.allclose(a[finite], want[finite], rtol=1e-5, atol=1e-4), (key, a, want)
    assert np.isinf(on_host["logprobs"]).any() and np.isfinite(on_host["logprobs"]).any()  # both kinds of row
    # Top-k / top-p / min-p: each token scored over its row's kept set, as on the CPU path.
    trunc = dict(kw, top_k=[0, 5, 40, 0, 3, 0, 100, 1, 0], top_p=[0.9, 1.0, 0.5, 0.95, 1.0, 0.7, 1.0, 1.0, 0.99],
                 min_p=[0.0, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.05])
    on_gpu = fs.score(xh, xw, tokens.to(dev), **trunc)
    on_host = fs.score(xh.cpu(), xw.cpu(), tokens.tolist(), **trunc)
    for key in ("logprobs", "raw_logprobs", "logsumexp", "raw_logsumexp"):
        a, want = on_gpu[key].cpu().numpy(), on_host[key]
        assert np.array_equal(np.isnan(a), np.isnan(want)) and np.array_equal(np.isinf(a), np.isinf(want)), key
        finite = np.isfinite(want)
        assert np.allclose(a[finite], want[finite], rtol=1e-5, atol=1e-4), (key, a, want)
    s = fs.sample(xh, xw, seed=3, logprobs="processed_and_raw", **trunc)
    got = fs.score(xh, xw, s.tokens, **trunc)
    for key, want in (("logprobs", s.logprobs), ("raw_logprobs", s.raw_logprobs), ("logsumexp", s.logsumexp)):
        assert torch.equal(got[key].view(torch.int32), want.view(torch.int32)), key
    # Top log-probabilities and the given tokens' ranks, processed and raw, as on the CPU path.
    for raw in (False, True):
        on_gpu = fs.score(xh, xw, tokens.to(dev), top_logprobs=6, top_logprobs_raw=raw, **trunc)
        on_host = fs.score(xh.cpu(), xw.cpu(), tokens.tolist(), top_logprobs=6, top_logprobs_raw=raw, **trunc)
        assert on_gpu["ranks"].dtype == torch.int32 and on_gpu["ranks"].device == xh.device
        assert np.array_equal(on_gpu["ranks"].cpu().numpy(), on_host["ranks"]), (raw, on_gpu["ranks"], on_host["ranks"])
        (gt, gl), (ct, cl) = on_gpu["top_logprobs"], on_host["top_logprobs"]
        assert np.array_equal(gt.cpu().numpy(), ct), raw
        gl = gl.cpu().numpy()
        assert np.array_equal(np.isnan(gl), np.isnan(cl)) and np.allclose(gl[~np.isnan(cl)], cl[~np.isnan(cl)], atol=1e-4)


def test_exact_logsumexp_on_the_gpu_scores_what_it_samples_and_does_not_depend_on_the_batch(dev):
    # Issue 52: exact_logsumexp=True sums each row's log-sum-exps in integer bins: the sampled tokens score their
    # reported log-probabilities bit for bit, a row scored alone gives the bits it gets in the batch, and the values
    # agree with the CPU path (exact logits) and with the default GPU path.
    b, d, v = 9, 128, 1001
    xh, xw = lm_head(b, d, v, seed=54, dev=dev, integer=True)
    temps = [0.7, 1.0, 0.0, 1.6, 1.0, 0.4, 1.0, 2.0, 0.9]
    kw = dict(temperatures=temps, softcap=3.0, exact_logsumexp=True)
    s = fs.sample(xh, xw, seed=4, logprobs="processed_and_raw", **kw)
    got = fs.score(xh, xw, s.tokens, **kw)
    for key, want in (("logprobs", s.logprobs), ("raw_logprobs", s.raw_logprobs), ("logsumexp", s.logsumexp)):
        assert torch.equal(got[key].view(torch.int32), want.view(torch.int32)), key
    for r in (0, 3, 8):
        one = fs.score(xh[r:r + 1], xw, s.tokens[r:r + 1], temperatures=temps[r:r + 1], softcap=3.0,
                       exact_logsumexp=True)
        for key in ("logprobs", "raw_logprobs", "logsumexp", "raw_logsumexp"):
            assert torch.equal(one[key].view(torch.int32), got[key][r:r + 1].view(torch.int32)), (r, key)
    on_host = fs.score(xh.cpu(), xw.cpu(), s.tokens.tolist(), temperatures=temps, softcap=3.0)
    default = fs.score(xh, xw, s.tokens, temperatures=temps, softcap=3.0)
    for key in ("logprobs", "raw_logprobs", "logsumexp", "raw_logsumexp"):
        a, want, fused = got[key].cpu().numpy(), on_host[key], default[key].cpu().numpy()
        assert np.array_equal(np.isnan(a), np.isnan(want)), key
        finite = np.isfinite(want)
        assert np.allclose(a[finite], want[finite], rtol=1e-5, atol=1e-4), (key, a, want)
        assert np.allclose(a[finite], fused[finite], rtol=1e-6, atol=1e-5), (key, a, fused)


def test_exact_logsumexp_with_top_k_and_top_p_on_the_gpu(dev):
    # Issue 52: with truncation every row goes through the exact fallback: a row that does not truncate has the
    # bits of the call without truncation, the sampled tokens score their log-probabilities bit for bit, and the
    # tokens and values agree with the CPU path (exact logits).
    b, d, v = 9, 128, 1001
    xh, xw = lm_head(b, d, v, seed=56, dev=dev, integer=True)
    temps = [0.7, 1.0, 0.0, 1.6, 1.0, 0.4, 1.0, 2.0, 0.9]
    top_k = [0, 20, 0, 0, 5, 0, 0, 50, 0]
    top_p = [1.0, 1.0, 0.8, 1.0, 0.9, 1.0, 1.0, 0.95, 0.7]
    kw = dict(temperatures=temps, top_k=top_k, top_p=top_p, exact_logsumexp=True)
    s = fs.sample(xh, xw, seed=4, logprobs="processed_and_raw", **kw)
    plain = fs.sample(xh, xw, seed=4, logprobs="processed_and_raw", temperatures=temps, exact_logsumexp=True)
    for r in (0, 3, 5, 6):  # no truncation of their own
        assert s.tokens[r] == plain.tokens[r], r
        for key in ("logprobs", "raw_logprobs", "logsumexp"):
            a, want = getattr(s, key)[r:r + 1], getattr(plain, key)[r:r + 1]
            assert torch.equal(a.view(torch.int32), want.view(torch.int32)), (r, key)
    got = fs.score(xh, xw, s.tokens, **kw)
    for key, want in (("logprobs", s.logprobs), ("raw_logprobs", s.raw_logprobs), ("logsumexp", s.logsumexp)):
        assert torch.equal(got[key].view(torch.int32), want.view(torch.int32)), key
    host = on_cpu(xh, xw, seed=4, logprobs="processed_and_raw", temperatures=temps, top_k=top_k, top_p=top_p)
    assert np.array_equal(s.tokens.cpu().numpy().astype(np.int32), host.tokens)
    for key in ("logprobs", "raw_logprobs", "logsumexp"):
        a, want = getattr(s, key).cpu().numpy(), getattr(host, key)
        assert np.array_equal(np.isnan(a), np.isnan(want)), key
        finite = np.isfinite(want)
        assert np.allclose(a[finite], want[finite], rtol=1e-5, atol=1e-4), (key, a, want)


def test_score_on_the_gpu_checks_its_input(dev):
    b, d, v = 3, 64, 100
    hidden, weight = lm_head(b, d, v, seed=54, dev=dev)
    with pytest.raises(ValueError, match="one per row"):
        fs.score(hidden, weight, [0, 1])
    with pytest.raises(ValueError, match="0 .. 99"):
        fs.score(hidden, weight, [0, 100, 1])
    with pytest.raises(ValueError, match="integer CUDA tensor"):
        fs.score(hidden, weight, torch.tensor([True, False, True], device=dev))
    # Device-resident ids are not checked on the host: out of range scores NaN (rank 0), in range as from a
    # list.
    top = fs.score(hidden, weight, torch.tensor([7, 100, -1], device=dev), top_logprobs=2)
    assert top["ranks"][1:].tolist() == [0, 0] and top["ranks"][0] >= 1
    assert top["ranks"][0] == fs.score(hidden.cpu(), weight.cpu(), [7, 0, 0], top_logprobs=2)["ranks"][0]
    out = fs.score(hidden, weight, torch.tensor([7, 100, -1], device=dev))
    ref = fs.score(hidden, weight, [7, 0, 0])
    assert torch.isnan(out["logprobs"][1:]).all() and torch.isnan(out["raw_logprobs"][1:]).all()
    assert torch.equal(out["logprobs"][0:1], ref["logprobs"][0:1])
    assert torch.equal(out["raw_logsumexp"], ref["raw_logsumexp"])

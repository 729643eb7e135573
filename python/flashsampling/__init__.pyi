# Type stubs of the flashsampling package (for IDEs and type checkers). python/tests/test_stubs.py checks that
# every public function is here with the parameters it has.
from typing import Any, Literal, Sequence, Union

import numpy as np
import numpy.typing as npt

_Array = Any  # a NumPy array, a CPU tensor, or (sample_cuda / sample) a PyTorch CUDA tensor
_Ints = Union[Sequence[int], npt.NDArray[np.integer], Any]
_Floats = Union[Sequence[float], npt.NDArray[np.floating], Any]
_LogProbs = Literal["off", "processed", "processed_and_raw"]

__all__ = ["sample", "sample_cuda", "score", "verify", "bf16_bits", "SamplingParams", "Samples", "Verified"]

class Verified:
    """What ``verify`` returns: accepted drafts per request, emitted tokens per request, and (when asked) their
    log-probabilities."""

    accepted: npt.NDArray[np.int32]
    tokens: list[npt.NDArray[np.int32]]
    logprobs: list[npt.NDArray[np.float32]] | None
    raw_logprobs: list[npt.NDArray[np.float32]] | None
    def __init__(
        self,
        accepted: npt.NDArray[np.int32],
        tokens: list[npt.NDArray[np.int32]],
        logprobs: list[npt.NDArray[np.float32]] | None = None,
        raw_logprobs: list[npt.NDArray[np.float32]] | None = None,
    ) -> None: ...

class Samples:
    """What ``sample`` returns: NumPy arrays (CPU backend) or CUDA tensors (GPU backend), int32 tokens (-1: no
    token), float32 for the rest; entries not asked for are None."""

    tokens: Any
    scores: Any
    logprobs: Any | None
    raw_logprobs: Any | None
    logsumexp: Any | None
    top_logprobs: tuple[Any, Any] | None
    def __init__(
        self,
        tokens: Any,
        scores: Any,
        logprobs: Any | None = None,
        raw_logprobs: Any | None = None,
        logsumexp: Any | None = None,
        top_logprobs: tuple[Any, Any] | None = None,
    ) -> None: ...

class SamplingParams:
    """The controls of a call as one value (``sample(hidden, weight, params=...)``)."""

    temperature: float
    seed: int
    streams: _Ints | None
    sample: int
    positions: _Ints | None
    temperatures: _Floats | None
    seeds: _Ints | None
    n: int
    logprobs: _LogProbs
    top_k: _Ints | None
    top_p: _Floats | None
    min_p: _Floats | None
    softcap: float | None
    top_logprobs: int
    top_logprobs_raw: bool
    allowed: _Array | None
    logit_bias: Sequence[dict[int, float]] | None
    repetition_penalty: float | _Floats | None
    frequency_penalty: float | _Floats | None
    presence_penalty: float | _Floats | None
    prompt_tokens: Sequence[_Ints] | None
    output_tokens: Sequence[_Ints] | None
    exact_logsumexp: bool
    def __init__(
        self,
        temperature: float = 1.0,
        seed: int = 0,
        streams: _Ints | None = None,
        sample: int = 0,
        positions: _Ints | None = None,
        temperatures: _Floats | None = None,
        seeds: _Ints | None = None,
        n: int = 1,
        logprobs: _LogProbs = "off",
        top_k: _Ints | None = None,
        top_p: _Floats | None = None,
        min_p: _Floats | None = None,
        softcap: float | None = None,
        top_logprobs: int = 0,
        top_logprobs_raw: bool = False,
        allowed: _Array | None = None,
        logit_bias: Sequence[dict[int, float]] | None = None,
        repetition_penalty: float | _Floats | None = None,
        frequency_penalty: float | _Floats | None = None,
        presence_penalty: float | _Floats | None = None,
        prompt_tokens: Sequence[_Ints] | None = None,
        output_tokens: Sequence[_Ints] | None = None,
        exact_logsumexp: bool = False,
    ) -> None: ...

def bf16_bits(x: Any) -> npt.NDArray[np.uint16]: ...
def sample(
    hidden: _Array,
    weight: _Array,
    temperature: float = 1.0,
    seed: int = 0,
    *,
    streams: _Ints | None = None,
    sample: int = 0,
    positions: _Ints | None = None,
    temperatures: _Floats | None = None,
    seeds: _Ints | None = None,
    n: int = 1,
    logprobs: _LogProbs = "off",
    top_k: _Ints | None = None,
    top_p: _Floats | None = None,
    min_p: _Floats | None = None,
    softcap: float | None = None,
    top_logprobs: int = 0,
    top_logprobs_raw: bool = False,
    exact_logsumexp: bool = False,
    allowed: _Array | None = None,
    logit_bias: Sequence[dict[int, float]] | None = None,
    repetition_penalty: float | _Floats | None = None,
    frequency_penalty: float | _Floats | None = None,
    presence_penalty: float | _Floats | None = None,
    prompt_tokens: Sequence[_Ints] | None = None,
    output_tokens: Sequence[_Ints] | None = None,
    threads: int | None = None,
    params: SamplingParams | None = None,
) -> Samples:
    """Tokens (int32 ``[B]`` or ``[B, n]``; -1 for a row without one), scores and the log-probabilities asked for."""

def sample_cuda(
    hidden: Any,
    weight: Any,
    temperature: float = 1.0,
    seed: int = 0,
    *,
    streams: _Ints | None = None,
    sample: int = 0,
    positions: _Ints | None = None,
    temperatures: _Floats | None = None,
    seeds: _Ints | None = None,
    n: int = 1,
    logprobs: _LogProbs = "off",
    top_k: _Ints | None = None,
    top_p: _Floats | None = None,
    min_p: _Floats | None = None,
    softcap: float | None = None,
    top_logprobs: int = 0,
    top_logprobs_raw: bool = False,
    exact_logsumexp: bool = False,
    allowed: Any | None = None,
    logit_bias: Sequence[dict[int, float]] | None = None,
    repetition_penalty: float | _Floats | None = None,
    frequency_penalty: float | _Floats | None = None,
    presence_penalty: float | _Floats | None = None,
    prompt_tokens: Sequence[_Ints] | None = None,
    output_tokens: Sequence[_Ints] | None = None,
    params: SamplingParams | None = None,
) -> Samples:
    """``sample`` on PyTorch CUDA tensors (a ``Samples`` of tensors on the tensors' device)."""

def score(
    hidden: _Array,
    weight: _Array,
    tokens: _Ints,
    temperature: float = 1.0,
    *,
    temperatures: _Floats | None = None,
    top_k: _Ints | None = None,
    top_p: _Floats | None = None,
    min_p: _Floats | None = None,
    softcap: float | None = None,
    top_logprobs: int = 0,
    top_logprobs_raw: bool = False,
    exact_logsumexp: bool = False,
    allowed: Any | None = None,
    logit_bias: Sequence[dict[int, float]] | None = None,
    repetition_penalty: float | _Floats | None = None,
    frequency_penalty: float | _Floats | None = None,
    presence_penalty: float | _Floats | None = None,
    prompt_tokens: Sequence[_Ints] | None = None,
    output_tokens: Sequence[_Ints] | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Log-probabilities of one given token per row (CPU backend): logprobs, raw_logprobs, logsumexp, raw_logsumexp;
    with top_logprobs = k > 0 also top_logprobs (tokens, logprobs) [B, k] and ranks [B]."""

def verify(
    hidden: _Array,
    weight: _Array,
    offsets: _Ints,
    draft_tokens: _Ints,
    positions: _Ints,
    **controls: Any,
) -> Verified:
    """Exact speculative verification: accepted drafts and emitted tokens per request (and their log-probabilities)."""

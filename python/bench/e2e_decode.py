#!/usr/bin/env python3
"""End-to-end decode benchmark: time per output token (TPOT) of a Qwen3-8B- and a Llama-3-8B-shaped model
(transformers, random bf16 weights made on the GPU, no download), with three ways of turning the final
hidden states into the next tokens:

  multinomial   LM head (cuBLAS GEMM) + softmax in f32 + torch.multinomial
  gumbel        LM head (cuBLAS GEMM) + Gumbel-max over the f32 logits in torch
  flashsampling flashsampling.sample(hidden, lm_head_weight): the fused kernel, no [B, V] logits

A decode step is the base model on one new token per row with a KV cache, then the sampler on the final
hidden states [B, D]; its token is the next step's input. Per (model, B, sampler): a fresh cache, a
prefill of --prompt random tokens, --warmup steps, then --steps timed steps. Each step ends with a CUDA
event on the current stream; TPOT is the median gap between consecutive events (steady state: it is the
wall time per token whether the GPU or the host is the bottleneck). The LM head + sampling part is also
timed alone on the prefill's final hidden states (--reps calls back to back between two events, median of
5 such runs), and its share of the TPOT is reported.

CUDA graphs: off by default (the model runs eagerly, as transformers does without compilation, so small
batches are bound by the host's launch overhead). --cuda-graphs captures the base model's decode step in
a CUDA graph with a StaticCache (the sampler stays outside the graph, for all three samplers alike); when
the capture fails it says why and falls back to eager. The output and the JSON say which was used.

Usage (on the GPU machine; torch, transformers and the flashsampling wheel installed):
  python3 python/bench/e2e_decode.py --quick --out e2e-quick.json       # 2 layers, B in 1,64,256, ~1-2 min
  python3 python/bench/e2e_decode.py --out e2e.json                     # all layers, B in 1,8,...,256
  python3 python/bench/e2e_decode.py --layers 8 --batches 1,64 --cuda-graphs --out e2e-graphs.json
--budget-s (default 540) stops starting new measurements after that many seconds, so a 10-minute call
always ends with the table and the JSON (written after every batch size, so partial results survive).
--cpu-smoke runs tiny models on the CPU (flashsampling's CPU backend; wall-clock timing) to check the
script without a GPU; its numbers mean nothing.
"""

import argparse
import inspect
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch

import flashsampling as fs

# The real sizes (Qwen3-8B and Meta-Llama-3-8B configs).
MODELS = {
    "qwen3-8b": dict(family="Qwen3", hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                     rope_theta=1_000_000.0, rms_norm_eps=1e-6, max_position_embeddings=40960),
    "llama3-8b": dict(family="Llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256,
                      rope_theta=500_000.0, rms_norm_eps=1e-5, max_position_embeddings=8192),
}
# --cpu-smoke: the same families, tiny.
SMOKE = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             vocab_size=1000)
SAMPLERS = ("multinomial", "gumbel", "flashsampling")


def log(*a):
    print(*a, flush=True)


class Clock:
    """CUDA events on the current stream (GPU), or perf_counter after a synchronize (CPU smoke)."""

    def __init__(self, dev):
        self.cuda = dev.type == "cuda"

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def gaps_ms(self, marks):
        if self.cuda:
            marks[-1].synchronize()
            return [a.elapsed_time(b) for a, b in zip(marks, marks[1:])]
        return [(b - a) * 1e3 for a, b in zip(marks, marks[1:])]


def build(name, spec, layers, dev, smoke):
    """The base model (no LM head) with random bf16 weights made on `dev`, its config, and an LM-head
    weight [V, D]."""
    import transformers

    kw = {k: v for k, v in spec.items() if k != "family"}
    if smoke:
        kw.update(SMOKE)
    kw["num_hidden_layers"] = layers if layers else kw["num_hidden_layers"]
    config_cls = getattr(transformers, spec["family"] + "Config")
    model_cls = getattr(transformers, spec["family"] + "Model")
    config = config_cls(**kw, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    t0 = time.perf_counter()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(dev):  # parameters are made (and initialized) on the GPU
            model = model_cls(config)
    finally:
        torch.set_default_dtype(previous)
    model = model.to(dev, torch.bfloat16).eval().requires_grad_(False)
    std = getattr(config, "initializer_range", 0.02)
    weight = torch.empty(config.vocab_size, config.hidden_size, device=dev, dtype=torch.bfloat16).normal_(0, std)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    params = sum(p.numel() for p in model.parameters()) + weight.numel()
    log(f"{name}: {config.num_hidden_layers} layers, D={config.hidden_size}, V={config.vocab_size}, "
        f"{params / 1e9:.2f} B parameters, built in {time.perf_counter() - t0:.1f} s")
    return model, config, weight


def _forward_params(model):
    return inspect.signature(model.forward).parameters


def _new_dynamic_cache(config):
    from transformers import DynamicCache

    try:
        return DynamicCache(config=config)
    except TypeError:  # older transformers
        return DynamicCache()


def _new_static_cache(config, b, length, dev):
    from transformers import StaticCache

    accepted = inspect.signature(StaticCache.__init__).parameters
    kw = dict(config=config, max_cache_len=length)
    # Older transformers size and place the cache up front.
    for key, value in dict(max_batch_size=b, batch_size=b, device=dev, dtype=torch.bfloat16).items():
        if key in accepted:
            kw[key] = value
    return StaticCache(**kw)


class Decoder:
    """The base model with a KV cache: `prefill(prompt)` and `step(ids)` return the final hidden states of
    the last position, [B, D] contiguous bf16. Eager with a DynamicCache, or (graphs=True) the decode step
    replayed from a CUDA graph with a StaticCache."""

    def __init__(self, model, config, b, length, dev, graphs):
        self.model, self.b, self.dev, self.graph = model, b, dev, None
        params = _forward_params(model)
        # transformers 5 renamed `past_key_values` to `cache` (the old name is deprecated, then removed).
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        self.explicit_positions = "cache_position" in params  # older transformers' static caches need it
        self.cache = _new_static_cache(config, b, length, dev) if graphs else _new_dynamic_cache(config)
        self.static = graphs
        self.pos = 0

    def _run(self, ids, cache_position=None):
        kw = {self.cache_kw: self.cache, "use_cache": True}
        if cache_position is not None:
            kw["cache_position"] = cache_position
        out = self.model(input_ids=ids, **kw)
        return out.last_hidden_state[:, -1, :]

    def _positions(self, n):
        if not (self.static and self.explicit_positions):
            return None
        return torch.arange(self.pos, self.pos + n, device=self.dev)

    def prefill(self, prompt):
        h = self._run(prompt, self._positions(prompt.shape[1])).contiguous()
        self.pos += prompt.shape[1]
        return h

    def capture(self):
        """Captures the decode step (static input ids in, static hidden states out)."""
        self.ids = torch.zeros(self.b, 1, dtype=torch.long, device=self.dev)
        self.cpos = self._positions(1)
        side = torch.cuda.Stream(self.dev)
        side.wait_stream(torch.cuda.current_stream(self.dev))
        with torch.cuda.stream(side):  # warm-up off the capture (allocator, lazy inits), as torch advises
            for _ in range(2):
                self._run(self.ids, self.cpos)
                self._advance()
        torch.cuda.current_stream(self.dev).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):  # records kernels, runs none: the first replay is the next step
            self.out = self._run(self.ids, self.cpos)

    def _advance(self):
        self.pos += 1
        if self.cpos is not None:
            self.cpos.add_(1)

    def step(self, tokens):
        ids = tokens.view(self.b, 1)
        if self.graph is None:
            h = self._run(ids, self._positions(1))
            self.pos += 1
            return h
        self.ids.copy_(ids)
        self.graph.replay()
        self._advance()
        return self.out


def make_samplers(weight, temperature, seed, dev):
    """Each sampler maps (final hidden states [B, D], step) to next tokens [B] on the device."""

    def logits(h):
        return torch.nn.functional.linear(h, weight)  # [B, V] bf16, cuBLAS

    def multinomial(h, step):
        probs = torch.softmax(logits(h).float() / temperature, dim=-1)
        return torch.multinomial(probs, 1).view(-1)

    def gumbel(h, step):
        z = logits(h).float() / temperature
        # Gumbel noise -ln(E), E ~ Exp(1): argmax(z + g) is a sample from softmax(z).
        return (z - torch.empty_like(z).exponential_().log_()).argmax(dim=-1)

    def flash(h, step):
        tokens = fs.sample(h, weight, temperature, seed=seed, sample=step).tokens
        if dev.type != "cuda":  # --cpu-smoke: the CPU backend gives NumPy
            tokens = torch.from_numpy(tokens.astype(np.int64))
        return tokens

    return {"multinomial": multinomial, "gumbel": gumbel, "flashsampling": flash, "lm_head_gemm_only": logits}


def time_head(fn, h, reps, clock):
    """Median ms per call of fn(h, step) over 5 runs of `reps` calls back to back."""
    per_call = []
    for run in range(5):
        marks = [clock.mark()]
        for i in range(reps):
            fn(h, run * reps + i)
        marks.append(clock.mark())
        per_call.append(clock.gaps_ms(marks)[0] / reps)
    return statistics.median(per_call)


def decode(model, config, sampler, b, args, dev, clock, graphs):
    """One decode run: prefill, warm-up, timed steps. Returns (per-step ms list, graph status, the
    prefill's final hidden states)."""
    g = torch.Generator(device=dev).manual_seed(1000 + b)
    prompt = torch.randint(0, config.vocab_size, (b, args.prompt), device=dev, generator=g)
    length = args.prompt + args.warmup + args.steps + 8
    status = "off"
    dec = None
    if graphs:
        try:
            dec = Decoder(model, config, b, length, dev, graphs=True)
            h0 = dec.prefill(prompt)
            dec.capture()
            status = "used"
        except Exception as e:  # capture failed: eager instead, and say why
            status = f"failed ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
            dec = None
            torch.cuda.synchronize(dev)
    if dec is None:
        dec = Decoder(model, config, b, length, dev, graphs=False)
        h0 = dec.prefill(prompt)
    h = h0
    marks = []
    for i in range(args.warmup + args.steps):
        tokens = sampler(h, i)
        if i >= args.warmup - 1:
            marks.append(clock.mark())  # the end of step i (the first mark closes the warm-up)
        if i + 1 < args.warmup + args.steps:
            h = dec.step(tokens)
    # Each gap: one model step and the sampling of its hidden states.
    gaps = clock.gaps_ms(marks)
    assert tokens.shape[0] == b
    return gaps, status, h0


def run_model(name, args, dev, clock, results, started, write):
    spec = MODELS[name]
    model, config, weight = build(name, spec, args.layers, dev, args.cpu_smoke)
    samplers = make_samplers(weight, args.temperature, args.seed, dev)
    entry = {"model": name, "layers": config.num_hidden_layers, "hidden_size": config.hidden_size,
             "vocab_size": config.vocab_size, "batches": {}}
    results["models"].append(entry)
    # Sanity: greedy flashsampling equals the argmax of the bf16 GEMM's logits (up to f32 near-ties).
    hs = torch.randn(8, config.hidden_size, device=dev).to(torch.bfloat16)
    fs_greedy = fs.sample(hs, weight, 0.0).tokens
    fs_greedy = torch.as_tensor(np.asarray(fs_greedy, dtype=np.int64)) if dev.type != "cuda" else fs_greedy.long()
    ref = (hs.float() @ weight.float().T).argmax(dim=-1).cpu()
    entry["greedy_agreement"] = f"{int((fs_greedy.cpu() == ref).sum())}/8"
    log(f"  greedy check: flashsampling argmax equals the f32 reference on {entry['greedy_agreement']} rows")
    for b in args.batches:
        if time.perf_counter() - started > args.budget_s:
            log(f"  B={b}: skipped (time budget of {args.budget_s} s used)")
            entry["batches"][str(b)] = {"skipped": "time budget"}
            continue
        row = {"tpot_ms": {}, "tpot_p10_p90_ms": {}, "head_ms": {}, "cuda_graphs": {}}
        try:
            for s in SAMPLERS:
                gaps, status, h0 = decode(model, config, samplers[s], b, args, dev, clock, args.cuda_graphs)
                row["tpot_ms"][s] = statistics.median(gaps)
                q = np.percentile(gaps, [10, 90])
                row["tpot_p10_p90_ms"][s] = [float(q[0]), float(q[1])]
                row["cuda_graphs"][s] = status
            for s in (*SAMPLERS, "lm_head_gemm_only"):
                fn = samplers[s] if s != "lm_head_gemm_only" else (lambda h, i: samplers["lm_head_gemm_only"](h))
                fn(h0, 0)  # warm
                row["head_ms"][s] = time_head(fn, h0, args.reps, clock)
        except torch.cuda.OutOfMemoryError as e:
            row = {"error": f"out of memory: {str(e).splitlines()[0][:200]}"}
            torch.cuda.empty_cache()
        entry["batches"][str(b)] = row
        if "error" in row:
            log(f"  B={b}: {row['error']}")
        else:
            t, hd = row["tpot_ms"], row["head_ms"]
            log(f"  B={b:>4}: TPOT ms " + "  ".join(f"{s} {t[s]:.3f}" for s in SAMPLERS)
                + " | head+sampling ms " + "  ".join(f"{s} {hd[s]:.3f}" for s in SAMPLERS)
                + f"  (GEMM alone {hd['lm_head_gemm_only']:.3f}) | graphs {row['cuda_graphs']['flashsampling']}")
        write()
    del model, weight, samplers
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def table(results):
    lines = []
    graphs = sorted({st for m in results["models"] for r in m["batches"].values()
                     for st in r.get("cuda_graphs", {}).values()})
    lines.append(f"CUDA graphs for the model body: {', '.join(graphs) or 'n/a'}; T = {results['args']['temperature']};"
                 " TPOT = median ms per output token; head = LM head + sampling alone; share = head / TPOT")
    hdr = (f"{'model':<10} {'L':>3} {'B':>4} | {'TPOT multin':>11} {'gumbel':>8} {'flash':>8} | "
           f"{'head multin':>11} {'gumbel':>8} {'flash':>8} {'GEMM':>7} | {'share mult':>10} {'gumb':>5} "
           f"{'flash':>5} | {'TPOT x vs mult':>14} {'vs gumb':>7}")
    lines.append(hdr)
    lines.append("-" * len(hdr))
    for m in results["models"]:
        for b, r in m["batches"].items():
            if "tpot_ms" not in r:
                lines.append(f"{m['model']:<10} {m['layers']:>3} {b:>4} | {r.get('error') or r.get('skipped')}")
                continue
            t, hd = r["tpot_ms"], r["head_ms"]
            sh = {s: 100 * hd[s] / t[s] for s in SAMPLERS}
            lines.append(
                f"{m['model']:<10} {m['layers']:>3} {b:>4} | {t['multinomial']:>11.3f} {t['gumbel']:>8.3f} "
                f"{t['flashsampling']:>8.3f} | {hd['multinomial']:>11.3f} {hd['gumbel']:>8.3f} "
                f"{hd['flashsampling']:>8.3f} {hd['lm_head_gemm_only']:>7.3f} | {sh['multinomial']:>9.1f}% "
                f"{sh['gumbel']:>4.1f}% {sh['flashsampling']:>4.1f}% | "
                f"{t['multinomial'] / t['flashsampling']:>14.3f} {t['gumbel'] / t['flashsampling']:>7.3f}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="qwen3-8b,llama3-8b", help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--layers", type=int, default=0, help="decoder layers (default: the model's, 36 / 32)")
    ap.add_argument("--batches", default="1,8,32,64,128,256")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens per row (prefill)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30, help="timed decode steps")
    ap.add_argument("--reps", type=int, default=20, help="calls per run when timing LM head + sampling alone")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cuda-graphs", action="store_true", help="replay the model body from a CUDA graph")
    ap.add_argument("--quick", action="store_true", help="2 layers, B in 1,64,256, 10 steps")
    ap.add_argument("--budget-s", type=float, default=540.0, help="start no new measurement after this")
    ap.add_argument("--out", default="e2e_decode.json", help="JSON results (written after every batch size)")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny models on the CPU: checks the script only")
    args = ap.parse_args()
    if args.quick:
        args.layers = args.layers or 2
        args.batches = "1,64,256"
        args.steps, args.warmup, args.reps = min(args.steps, 10), min(args.warmup, 3), min(args.reps, 10)
    args.batches = [int(x) for x in str(args.batches).split(",") if x]
    args.warmup = max(1, args.warmup)
    names = [x for x in args.models.split(",") if x]
    for n in names:
        if n not in MODELS:
            ap.error(f"unknown model {n}; known: {', '.join(MODELS)}")
    if args.cpu_smoke:
        dev = torch.device("cpu")
        args.cuda_graphs = False
    else:
        if not torch.cuda.is_available():
            sys.exit("no CUDA device (torch.cuda.is_available() is False); --cpu-smoke checks the script on the CPU")
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(args.seed)
    started = time.perf_counter()
    import transformers

    info = {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu (smoke test)"}
    if dev.type == "cuda":
        info["flashsampling"] = dict(fs._flashsampling.cuda_device_info(dev.index))
    results = {"args": {k: v for k, v in vars(args).items()}, "env": info, "models": []}
    log(f"e2e decode: {info}")
    log(f"args: {results['args']}")

    def write():
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1)
        os.replace(tmp, args.out)

    clock = Clock(dev)
    with torch.inference_mode():
        for name in names:
            if time.perf_counter() - started > args.budget_s:
                log(f"{name}: skipped (time budget)")
                continue
            run_model(name, args, dev, clock, results, started, write)
    results["wall_s"] = time.perf_counter() - started
    results["table"] = table(results)
    write()
    log("")
    log(results["table"])
    log(f"\nwrote {args.out} ({results['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()

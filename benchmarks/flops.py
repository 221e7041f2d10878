"""The machine's arithmetic ceiling and a decoder's matmul FLOPs per token, for the benchmarks.

FLOPs follow the usual dense-transformer count (Kaplan et al. 2020, "Scaling Laws", section 2.1):
a forward pass costs 2 FLOPs per matmul parameter per token, forward + backward about 6. Attention
score/value products (2 x 2 x layers x context x hidden per token) are left out: at the benchmark's
contexts (< 100 tokens, hidden 256) they are under 5 % of the total. The LM head is counted apart
from the body because an ideal implementation applies it only where a token is predicted (the last
prompt position and every generated token), not at every prompt position.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MatmulParams:
    """Matmul parameters of a decoder-only LM: `body` (attention + MLP projections of all layers)
    and `head` (the output projection, vocab x hidden)."""

    body: int
    head: int

    @classmethod
    def of(cls, config) -> "MatmulParams":
        h, layers = config.hidden_size, config.num_hidden_layers
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or h // heads
        attention = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2  # q, o and k, v
        mlp = 3 * h * config.intermediate_size  # gate, up, down (SwiGLU)
        return cls(body=layers * (attention + mlp), head=config.vocab_size * h)

    def forward_flops(self, tokens: float, predicted: float) -> float:
        """Forward FLOPs over `tokens` positions of which `predicted` go through the LM head."""
        return 2.0 * (self.body * tokens + self.head * predicted)


def matmul_gflops(threads: int, n: int = 2048, repeats: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """Best achieved GFLOP/s of an n x n x n matmul in `dtype` (fp32 unless told) at `threads` torch
    threads: the ceiling.

    On a machine shared with other jobs, wall time also counts the time-slices they take, so the
    rate is also computed from the process's CPU time (x threads) and the larger of the two is
    kept; on a quiet machine both agree."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        torch.mm(a, b)  # warm-up (thread pool, page faults)
        best_wall = best_cpu = float("inf")
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            torch.mm(a, b)
            best_wall = min(best_wall, time.perf_counter() - t0)
            best_cpu = min(best_cpu, (time.process_time() - c0) / threads)
        return 2.0 * n**3 / min(best_wall, best_cpu) / 1e9
    finally:
        torch.set_num_threads(previous)

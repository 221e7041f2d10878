"""A decoder's model FLOPs per token and the device's arithmetic ceiling: the two halves of model
FLOPs utilisation (MFU, Chowdhery et al. 2022, "PaLM", appendix B).

FLOPs follow the usual dense-transformer count (Kaplan et al. 2020, "Scaling Laws", section 2.1):
a forward pass costs 2 FLOPs per matmul parameter per token, forward + backward 3 times that. The
LM head is counted apart from the body because an ideal implementation applies it only where a
token is predicted (response positions), not at every prompt position. Attention score and value
products are counted apart too (`attention_flops`): they grow with the square of the sequence.
Model FLOPs leave out recomputation (gradient checkpointing): MFU measures useful work.

The ceiling (`peak_flops`): on a CPU the best rate of a large matmul measured in this process; on a
GPU the dense rate of its data sheet (`GPU_PEAK_TFLOPS`), measured like a CPU's for a GPU the table
does not know.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MatmulParams:
    """Matmul parameters of a decoder-only LM: `body` (attention + MLP projections of all layers),
    `head` (the output projection, vocab x hidden; hidden x 1 for a value head) and `attention`
    (layers x query width: the coefficient of the attention products)."""

    body: int
    head: int
    attention: int = 0

    @classmethod
    def of(cls, config, head_outputs: int | None = None) -> "MatmulParams":
        """From a Hugging Face decoder config (a vision-language one's text config: the vision tower's
        FLOPs are not counted); `head_outputs` overrides the head's width (1 for a critic)."""
        config = config.get_text_config() if hasattr(config, "get_text_config") else config
        h, layers = config.hidden_size, config.num_hidden_layers
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or h // heads
        attention = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2  # q, o and k, v
        mlp = 3 * h * config.intermediate_size  # gate, up, down (SwiGLU)
        outputs = config.vocab_size if head_outputs is None else head_outputs
        return cls(body=layers * (attention + mlp), head=outputs * h, attention=layers * heads * head_dim)

    def forward_flops(self, tokens: float, predicted: float) -> float:
        """Forward matmul FLOPs over `tokens` positions of which `predicted` go through the LM head
        (attention products not included: `attention_flops`)."""
        return 2.0 * (self.body * tokens + self.head * predicted)

    def attention_flops(self, lengths: torch.Tensor) -> float:
        """Forward FLOPs of the causal attention products of sequences of `lengths` tokens: position
        i attends to i + 1 keys, in QK^T and again in the weighted sum of values, 2 FLOPs per
        multiply-add: 2 x 2 x attention x L(L+1)/2 per sequence."""
        lengths = lengths.double()
        return 2.0 * self.attention * float((lengths * (lengths + 1)).sum())

    def sequence_flops(self, lengths: torch.Tensor, predicted: float) -> float:
        """Forward FLOPs over whole sequences of `lengths` tokens, `predicted` of them through the head."""
        return self.forward_flops(float(lengths.sum()), predicted) + self.attention_flops(lengths)


def matmul_gflops(threads: int, n: int = 2048, repeats: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """Best achieved GFLOP/s of an n x n x n matmul in `dtype` (fp32 unless told) at `threads` torch
    threads: the ceiling.

    On a machine shared with other jobs, wall time also counts the time-slices they take, so the
    rate is also computed from the process's CPU time (x threads) and the larger of the two is
    kept; on a quiet machine both agree."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)  # not the global generator: a run's randomness stays its own
        a, b = torch.randn(n, n, generator=gen).to(dtype), torch.randn(n, n, generator=gen).to(dtype)
        torch.mm(a, b)  # warm-up (thread pool, page faults)
        best_wall = best_cpu = float("inf")
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            torch.mm(a, b)
            best_wall = min(best_wall, time.perf_counter() - t0)
            best_cpu = min(best_cpu, (time.process_time() - c0) / threads)
        return 2.0 * n**3 / max(min(best_wall, best_cpu), 1e-9) / 1e9
    finally:
        torch.set_num_threads(previous)


# Dense (no sparsity) peak TFLOP/s of NVIDIA data sheets: (bf16, tf32, fp32) by a part of the device
# name, most specific first ("L40S" before "L4", "A100" before "A10"). Not verified on posttrain's CI.
GPU_PEAK_TFLOPS: tuple[tuple[str, tuple[float, float, float]], ...] = (
    ("H200", (989.4, 494.7, 66.9)),
    ("H100 NVL", (835.5, 417.8, 60.0)),
    ("H100 PCIe", (756.0, 378.0, 51.2)),
    ("H100", (989.4, 494.7, 66.9)),  # SXM
    ("A100", (312.0, 156.0, 19.5)),
    ("L40S", (362.1, 183.2, 91.6)),
    ("L4", (121.0, 60.0, 30.3)),
    ("A10", (125.0, 62.5, 31.2)),
)


@dataclass(frozen=True)
class Peak:
    """A device's matmul ceiling in FLOP/s and where the number comes from."""

    flops: float
    source: str


def gpu_spec_peak(name: str, dtype: torch.dtype, tf32: bool) -> Peak | None:
    """The data-sheet peak of the GPU called `name` for matmuls in `dtype`; None when unknown.

    >>> gpu_spec_peak("NVIDIA H100 80GB HBM3", torch.bfloat16, tf32=False).flops
    989400000000000.0
    >>> gpu_spec_peak("NVIDIA L4", torch.float32, tf32=True).source
    'data sheet: L4 tf32'
    """
    for part, (bf16, tf32_rate, fp32) in GPU_PEAK_TFLOPS:
        if part in name:
            if dtype in (torch.bfloat16, torch.float16):
                return Peak(bf16 * 1e12, f"data sheet: {part} bf16")
            return Peak((tf32_rate if tf32 else fp32) * 1e12, f"data sheet: {part} {'tf32' if tf32 else 'fp32'}")
    return None


def peak_flops(device: str, dtype: torch.dtype) -> Peak:
    """This process's matmul ceiling on `device` ("cpu" or "cuda") in `dtype`: a CPU's measured at
    the current torch thread count (matmuls up to 1024 wide, a fraction of a second, once per process and
    thread count), a GPU's from `GPU_PEAK_TFLOPS`, or measured once when the table does not know it."""
    if device == "cuda":
        name = torch.cuda.get_device_name()
        spec = gpu_spec_peak(name, dtype, torch.backends.cuda.matmul.allow_tf32)
        return spec if spec is not None else Peak(_cuda_matmul_flops(dtype), f"measured: {name} matmul")
    return _cpu_peak(torch.get_num_threads(), dtype)


@functools.lru_cache(maxsize=None)
def _cpu_peak(threads: int, dtype: torch.dtype) -> Peak:
    # 1024-wide matmuls reach a CPU's fp32 ceiling in a fraction of a second. A dtype the CPU has no
    # instructions for is emulated: bf16 without AVX512-BF16/AMX took 2.5 s per 1024-wide matmul on a
    # 2-core machine, 10 s at the start of every bf16 run. A 256-wide matmul times the dtype first,
    # and the ceiling is measured at the widest of 256, 512, 1024 whose matmul takes under 50 ms.
    rough = matmul_gflops(threads, n=256, repeats=1, dtype=dtype) * 1e9
    n = 1024
    while n > 256 and 2.0 * n**3 / rough > 0.05:
        n //= 2
    rate = matmul_gflops(threads, n=n, repeats=3, dtype=dtype) * 1e9
    return Peak(rate, f"measured: CPU matmul at {threads} thread{'s' * (threads > 1)}")


@functools.lru_cache(maxsize=None)
def _cuda_matmul_flops(dtype: torch.dtype, n: int = 8192, repeats: int = 5) -> float:
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen).to("cuda", dtype) for _ in range(2))
    torch.mm(a, b)
    torch.cuda.synchronize()  # once, at start: the timing needs the kernels finished
    t0 = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, b)
    torch.cuda.synchronize()
    return 2.0 * n**3 * repeats / (time.perf_counter() - t0)

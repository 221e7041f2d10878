"""The machine's arithmetic ceiling and a decoder's matmul FLOPs per token, for the benchmarks.

They live in the package (posttrain.models.flops), where the trainer's MFU metric uses them too;
this module keeps the benchmarks' `from flops import ...` working.
"""

from __future__ import annotations

from posttrain.models.flops import MatmulParams, matmul_gflops

__all__ = ["MatmulParams", "matmul_gflops"]

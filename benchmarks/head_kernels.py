"""Memory and time of the LM-head paths: plain autograd, entropy checkpointing, the fused head.

    python benchmarks/head_kernels.py                              # vocab 131072, hidden 64, 512 and 4096 tokens
    python benchmarks/head_kernels.py --vocab 65536 --tokens 256 2048 --repeats 3

A one-layer tiny Qwen2 with a large vocabulary (so the head dominates, as it does in memory for a
small model with a 150k vocabulary) computes the log-probs and entropy of `--tokens` response tokens
and runs the backward of `sum(logprob) - 0.01 * sum(entropy)`, as the actor's update does. Each
(tokens, path) runs in a fresh Python process, which prints:

- `saved_MiB`: what the forward keeps for the backward (distinct storages that reach autograd's
  saved-tensor hooks; the head's weight, which the model holds anyway, is not counted). Exact, and
  the same on any machine;
- `peak_MiB`: the process's peak resident memory during forward + backward above its resident
  memory just before (VmHWM reset through /proc/self/clear_refs; tensors this large are mmapped, so
  freed ones leave the resident set at once): activations, logits chunks, gradients;
- `seconds`: the median wall time of `--repeats` forward + backward passes (after one warm-up).

The plain path applies the head to at most 2**26 logits per chunk and recomputes each chunk in the
backward when there is more than one; with one chunk it keeps the chunk's graph. Timing belongs
here, never in a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
PATHS = {
    "plain": {},
    "entropy_checkpointing": {"entropy_checkpointing": True},
    "fused_torch": {"fused": "torch"},
}


def _status(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB -> MiB
    raise SystemExit(f"no {field} in /proc/self/status: this benchmark reads Linux's process accounting")


def measure(args: argparse.Namespace) -> dict:
    """One (tokens, path) in this process (the child's work)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from posttrain.models.logprobs import HeadKernel, response_logprobs

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    config = Qwen2Config(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=2 * args.hidden, max_position_embeddings=8192)
    model = Qwen2ForCausalLM(config).train()
    kernel = HeadKernel(**PATHS[args.path])
    rows, T = args.tokens // 256 or 1, min(args.tokens, 256)  # responses of 256 tokens, 8-token prompts
    prompt = torch.randint(1, args.vocab, (rows, 8))
    response = torch.randint(1, args.vocab, (rows, T))
    ones_p, ones_r = torch.ones(rows, 8), torch.ones(rows, T)
    weight_ptr = model.lm_head.weight.untyped_storage().data_ptr()

    def step(saved: dict | None = None):
        model.zero_grad(set_to_none=False)
        hooks = torch.autograd.graph.saved_tensors_hooks(
            lambda t: saved.__setitem__(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) or t
            if saved is not None else t, lambda t: t)
        with hooks:
            out = response_logprobs(model, prompt, ones_p, response, ones_r, with_entropy=True, kernel=kernel)
        (out.logprobs.sum() - 0.01 * out.entropy.sum()).backward()

    step()  # warm-up: allocates the gradients
    saved: dict[int, int] = {}
    step(saved)
    saved.pop(weight_ptr, None)
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current resident set
    before = _status("VmRSS")
    step()
    peak = _status("VmHWM") - before
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {"tokens": rows * T, "path": args.path, "saved_MiB": round(sum(saved.values()) / MIB, 1),
            "peak_MiB": round(peak, 1), "seconds": round(statistics.median(times), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=131072)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--path", choices=list(PATHS), help=argparse.SUPPRESS)  # the child's one measurement
    args = parser.parse_args()
    if args.path is not None:
        args.tokens = args.tokens[0]
        print(json.dumps(measure(args)))
        return
    print(f"vocab {args.vocab}, hidden {args.hidden}, {args.threads} thread(s); log-probs + entropy, forward + backward")
    print(f"{'tokens':>7} {'path':<22} {'saved_MiB':>10} {'peak_MiB':>9} {'seconds':>8}")
    for tokens in args.tokens:
        for path in PATHS:
            cmd = [sys.executable, __file__, "--path", path, "--tokens", str(tokens), "--vocab", str(args.vocab),
                   "--hidden", str(args.hidden), "--repeats", str(args.repeats), "--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{r['tokens']:>7} {r['path']:<22} {r['saved_MiB']:>10} {r['peak_MiB']:>9} {r['seconds']:>8}")


if __name__ == "__main__":
    main()

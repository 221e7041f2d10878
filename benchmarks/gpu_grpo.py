"""GRPO steps on one GPU: posttrain (its `hf` engine, and vLLM when installed) against TRL's GRPOTrainer.

    pip install -e ".[bench]"                  # TRL (never imported by the tests)
    python benchmarks/gpu_grpo.py              # Qwen2.5-0.5B shape, 8 prompts x 8, 256 new tokens
    python benchmarks/gpu_grpo.py --shape qwen2.5-1.5b --completion-length 512 --steps 6

Same model (random weights with a real architecture's dimensions, `posttrain make-model tiny
--shape ...`: nothing is downloaded), same arithmetic prompts, same settings for both: bf16 compute
with fp32 master weights (posttrain's default on a GPU, TRL's `bf16=True`), temperature 1, no KL
term, one PPO epoch, one optimizer step per RL step, AdamW lr 1e-6, grad clip 1.0, token-mean
loss. A random model rarely emits EOS, so every response runs to the completion length: the
benchmark measures throughput, not learning.

Each framework runs in its own process (`bench_workers.py`), one after the other, on the same GPU.
Reported per framework: seconds per step (median over the steps after the first), generated and
trained tokens per second, the share of each phase, the weight-sync time per step (posttrain: its
engine holds a bf16 copy refreshed after each update), and peak allocated GPU memory.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

from bench_workers import PHASES  # noqa: E402


def run_worker(framework: str, spec: dict) -> dict:
    """`bench_workers.py` in its own process; its per-step lines (stderr) pass through as they come."""
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(HERE / "bench_workers.py"), framework, json.dumps(spec)],
                          env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{framework} worker failed (exit {proc.returncode}); its output is above")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def prepare(workdir: Path, shape: str) -> tuple[Path, Path]:
    from posttrain.models.tiny import SHAPES, make_tiny_model
    from posttrain.tasks import write_task_data

    model_dir = workdir / f"model-{shape}"
    if not (model_dir / "config.json").exists():
        make_tiny_model(model_dir, seed=0, **SHAPES[shape])  # fp32 weights: both frameworks keep fp32 masters
    data_dir = workdir / "arithmetic"
    if not (data_dir / "train.parquet").exists():
        write_task_data("arithmetic", data_dir)
    return model_dir, data_dir / "train.parquet"


def summarise(run: dict) -> dict:
    steps = run["steps"][1:] or run["steps"]
    med = statistics.median
    step_s = med([s["step_s"] for s in steps])
    return {
        "step_s": step_s,
        "gen_tok_s": med([s["gen_tokens"] for s in steps]) / step_s,
        "trained_tok_s": med([s["trained_tokens"] for s in steps]) / step_s,
        "phase_s": {p: med([s["phases"][p] for s in steps]) for p in PHASES},
        "gpu_mib": run.get("peak_gpu_mib", float("nan")),
        "gen_tokens": med([s["gen_tokens"] for s in steps]),
    }


def report(name: str, s: dict) -> None:
    shares = "  ".join(f"{p} {100 * s['phase_s'][p] / s['step_s']:.0f}%" for p in PHASES)
    print(f"{name:>16}: {s['step_s']:.3f} s/step  generated {s['gen_tok_s']:.0f} tok/s  trained {s['trained_tok_s']:.0f} tok/s  "
          f"sync {s['phase_s']['sync']:.3f} s/step  peak GPU {s['gpu_mib'] / 1024:.1f} GiB  ({s['gen_tokens']:.0f} generated tokens/step)")
    print(f"{'':>16}  phases: {shares}", flush=True)


def main(argv: list[str] | None = None) -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="qwen2.5-0.5b", help="a posttrain.models.tiny.SHAPES name")
    ap.add_argument("--steps", type=int, default=5, help="GRPO steps per framework (the first is not timed)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8, help="responses per prompt")
    ap.add_argument("--completion-length", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--frameworks", default="posttrain,trl", help="comma-separated subset of posttrain,posttrain-vllm,trl")
    ap.add_argument("--workdir", default="/tmp/posttrain-gpu-bench")
    ap.add_argument("--posttrain-override", action="append", default=[], help="extra posttrain config key=value")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("gpu_grpo.py needs a CUDA GPU (torch sees none); benchmarks/grpo_vs_trl.py is the CPU benchmark")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    model_dir, data = prepare(workdir, args.shape)
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; model {args.shape} (random weights); "
          f"{args.prompts} prompts x {args.n} responses, {args.completion_length} new tokens, bf16 compute", flush=True)
    results = {}
    for name in [f.strip() for f in args.frameworks.split(",") if f.strip()]:
        overrides = list(args.posttrain_override)
        framework = "trl" if name == "trl" else "posttrain"
        if name == "posttrain-vllm":
            if importlib.util.find_spec("vllm") is None:
                print(f"{name:>16}: not measured: vLLM is not installed on this machine", flush=True)
                continue
            overrides.append("rollout.name=vllm")
        spec = {
            "model_dir": str(model_dir), "data": str(data), "steps": args.steps, "threads": 8, "prompts": args.prompts,
            "n": args.n, "completion_length": args.completion_length, "lr": args.lr, "seed": 0, "device": "cuda",
            "bf16": True, "run_dir": str(workdir / "runs" / name), "posttrain_overrides": overrides,
        }
        shutil.rmtree(spec["run_dir"], ignore_errors=True)
        results[name] = summarise(run_worker(framework, spec))
        report(name, results[name])
    if "posttrain" in results and "trl" in results:
        pt, trl = results["posttrain"], results["trl"]
        print(f"speedup vs TRL (step throughput): {trl['step_s'] / pt['step_s']:.2f}x; generated tok/s "
              f"{pt['gen_tok_s'] / trl['gen_tok_s']:.2f}x; peak GPU memory {pt['gpu_mib'] / trl['gpu_mib']:.2f}x")


if __name__ == "__main__":
    main()

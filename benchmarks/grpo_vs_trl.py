"""GRPO steps of posttrain and of TRL's GRPOTrainer side by side, against the machine's FLOP ceiling.

    pip install -e ".[bench]"            # TRL (never imported by the tests)
    OMP_WAIT_POLICY=PASSIVE python benchmarks/grpo_vs_trl.py --threads 2 --completion-length 16
    python benchmarks/grpo_vs_trl.py --steps 3 --rounds 1 --threads 1     # a quick look

Same model (a random tiny Qwen2 from `posttrain.models.tiny.make_tiny_model`: hidden 256, 4 layers,
4 heads, MLP 1024, ~4.3M parameters with the 100-token vocabulary), same arithmetic prompts
(`posttrain make-data arithmetic`), same settings: 8 prompts x 8 responses per step, temperature 1,
fp32, no KL term (no reference model), one PPO epoch, one optimizer step per RL step, AdamW lr 1e-5,
weight decay 0.01, grad clip 1.0, token-mean loss, group-std-normalised advantages, no gradient
checkpointing, the same torch thread count.

Model state: random weights, and neither framework filters groups (posttrain's
`algorithm.filter_groups` is off, TRL has no such filter), so every rollout is trained on in both
even though all rewards are 0. A random model rarely emits EOS, so responses run to (nearly) the
completion length, the case this benchmark is about. `--vocab 32000` gives the realistic-vocabulary
configuration, where the LM head dominates.

Each framework runs in its own subprocess (so its peak RSS is its own), alternating A B A B for
`--rounds` rounds so machine drift hits both. Seconds per step are the median over a round's steps
after the first; the speedup is the median over rounds of TRL's step time / posttrain's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

from flops import MatmulParams, matmul_gflops  # noqa: E402
from bench_workers import PHASES  # noqa: E402


def prepare(workdir: Path, vocab: int | None) -> tuple[Path, Path]:
    """The model and data directories, built once per configuration and reused."""
    from posttrain.models.tiny import make_tiny_model
    from posttrain.tasks import write_task_data

    model_dir = workdir / f"model-h256-l4-v{vocab or 'char'}"
    if not (model_dir / "config.json").exists():
        make_tiny_model(model_dir, layers=4, hidden=256, heads=4, intermediate=1024, vocab_size=vocab, seed=0)
    data_dir = workdir / "arithmetic"
    if not (data_dir / "train.parquet").exists():
        write_task_data("arithmetic", data_dir)
    return model_dir, data_dir / "train.parquet"


def run_worker(framework: str, spec: dict, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false")
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, str(HERE / "bench_workers.py"), framework, json.dumps(spec)],
        env=env, capture_output=True, text=True,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"{framework} worker failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarise(run: dict, params: MatmulParams, ceiling: float) -> dict:
    """Medians over the steps after the first, shares per phase, and GFLOP/s per phase."""
    steps = run["steps"][1:] or run["steps"]
    med = lambda xs: statistics.median(xs)  # noqa: E731
    step_s = med([s["step_s"] for s in steps])
    cpu_s = med([s.get("cpu_s", s["step_s"]) for s in steps])
    gen_tok = med([s["gen_tokens"] for s in steps])
    all_tok = med([s["trained_tokens"] for s in steps])
    phase_s = {p: med([s["phases"][p] for s in steps]) for p in PHASES}
    # Ideal work: sampling runs the body over prompt and response tokens and the head once per
    # generated token; training runs forward + backward (3x forward) over the same tokens.
    gen_flops = params.forward_flops(all_tok, gen_tok)
    train_flops = 3 * params.forward_flops(all_tok, gen_tok)
    ideal_s = (gen_flops + train_flops) / (ceiling * 1e9)
    train_s = phase_s["fwd_loss"] + phase_s["backward"]
    return {
        "step_s": step_s, "cpu_s": cpu_s, "gen_tok_s": gen_tok / step_s, "trained_tok_s": all_tok / step_s,
        "rss_mib": run["peak_rss_mib"], "phase_s": phase_s, "ideal_s": ideal_s,
        "gen_frac": gen_flops / max(phase_s["gen"], 1e-9) / (ceiling * 1e9),
        "logprob_frac": (gen_flops / max(phase_s["logprob"], 1e-9) / (ceiling * 1e9)) if phase_s["logprob"] > 1e-4 else None,
        "train_frac": train_flops / max(train_s, 1e-9) / (ceiling * 1e9),
        "gen_tokens": gen_tok, "tokens": all_tok,
    }


def report(name: str, s: dict) -> None:
    shares = "  ".join(f"{p} {100 * s['phase_s'][p] / s['step_s']:.0f}%" for p in PHASES)
    lp = "n/a (skipped)" if s["logprob_frac"] is None else f"{100 * s['logprob_frac']:.0f}%"
    print(f"{name:>9}: {s['step_s']:.3f} s/step ({s['cpu_s']:.3f} CPU s)  gen {s['gen_tok_s']:.0f} tok/s  trained {s['trained_tok_s']:.0f} tok/s  "
          f"peak RSS {s['rss_mib']:.0f} MiB  ({s['gen_tokens']:.0f} generated / {s['tokens']:.0f} tokens per step)")
    print(f"{'':>9}  phases: {shares}")
    print(f"{'':>9}  of ceiling: generate {100 * s['gen_frac']:.0f}%  log-probs {lp}  train fwd+bwd "
          f"{100 * s['train_frac']:.0f}%  |  FLOP-ideal step {s['ideal_s']:.3f} s, actual / ideal {s['step_s'] / s['ideal_s']:.2f}x")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=6, help="GRPO steps per round and framework (the first is not timed)")
    ap.add_argument("--rounds", type=int, default=2, help="A B alternations")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--completion-length", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=None, help="vocabulary size (default: the 100-char tokenizer)")
    ap.add_argument("--frameworks", default="posttrain,trl", help="comma-separated subset of posttrain,trl")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--workdir", default="/tmp/posttrain-bench")
    ap.add_argument("--posttrain-override", action="append", default=[], help="extra posttrain config key=value")
    ap.add_argument(
        "--bf16", action="store_true",
        help="both in bf16 mixed precision (work-changing): posttrain actor.fsdp_config.mixed_precision."
        "param_dtype=bf16 (rollout.dtype auto follows), TRL bf16=True; the ceiling is a bf16 matmul",
    )
    ap.add_argument(
        "--fused-adamw", action="store_true",
        help="both with torch's fused AdamW: posttrain actor.optim.fused=true, TRL optim=adamw_torch_fused "
        "(its default; without the flag both run the loop implementation)",
    )
    args = ap.parse_args(argv)
    if args.fused_adamw:
        args.posttrain_override = ["actor.optim.fused=true", *args.posttrain_override]
    if args.bf16:
        args.posttrain_override = ["actor.fsdp_config.mixed_precision.param_dtype=bf16", *args.posttrain_override]
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    model_dir, data = prepare(workdir, args.vocab)
    from transformers import AutoConfig

    params = MatmulParams.of(AutoConfig.from_pretrained(model_dir))
    ceiling = matmul_gflops(args.threads, dtype=torch.bfloat16 if args.bf16 else torch.float32)
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    print(f"model {model_dir.name}: {params.body / 1e6:.2f}M body + {params.head / 1e6:.2f}M head matmul params; "
          f"forward {params.forward_flops(1, 1) / 1e6:.1f} MFLOP/token (x3 with backward)")
    print(f"threads {args.threads} (OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'PASSIVE')}), "
          f"{'bf16' if args.bf16 else 'fp32'} matmul ceiling {ceiling:.1f} GFLOP/s; 8 prompts x 8 responses, completion length {args.completion_length}")
    summaries: dict[str, list[dict]] = {f: [] for f in frameworks}
    for r in range(args.rounds):
        for f in frameworks:
            spec = {
                "model_dir": str(model_dir), "data": str(data), "steps": args.steps, "threads": args.threads,
                "prompts": 8, "n": 8, "completion_length": args.completion_length, "lr": args.lr, "seed": r,
                "run_dir": str(workdir / "runs" / f"{f}-{r}"), "posttrain_overrides": args.posttrain_override,
                "bf16": args.bf16, "fused_adamw": args.fused_adamw,
            }
            shutil.rmtree(spec["run_dir"], ignore_errors=True)
            summaries[f].append(summarise(run_worker(f, spec, args.threads), params, ceiling))
            print(f"round {r + 1}:", end=" ")
            report(f, summaries[f][-1])
    if len(frameworks) < 2:
        return
    print("\nratios posttrain / TRL (median over rounds):")
    pt, trl = summaries["posttrain"], summaries["trl"]
    for key, label in (("gen_tok_s", "generated tok/s"), ("trained_tok_s", "trained tok/s"), ("rss_mib", "peak RSS")):
        print(f"  {label}: {statistics.median(a[key] / b[key] for a, b in zip(pt, trl)):.2f}")
    cpu_speedup = statistics.median(b["cpu_s"] / a["cpu_s"] for a, b in zip(pt, trl))
    print(f"  step CPU time (TRL / posttrain; steadier than wall time on a shared machine): {cpu_speedup:.2f}")
    speedup = statistics.median(b["step_s"] / a["step_s"] for a, b in zip(pt, trl))
    print(f"speedup vs TRL (step throughput): {speedup:.2f}")


if __name__ == "__main__":
    main()

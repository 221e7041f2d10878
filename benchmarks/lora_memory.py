"""Memory of LoRA against full fine-tuning in one GRPO stage with the KL loss (so a reference policy).

    python benchmarks/lora_memory.py                             # hidden 1024, 8 layers: ~109M parameters
    python benchmarks/lora_memory.py --hidden 512 --layers 4 --rank 8 --steps 1

A tiny-tokenizer Qwen2 (vocabulary ~100, so the decoder body is nearly all of the weights) and the
sort task are built once in `--workdir`. Each configuration then runs one RL stage of `--steps`
steps in a fresh Python process, which prints:

- the bytes the roles' tensors hold after the last step, by kind: the actor's parameters, their
  gradients, the AdamW moments, the reference policy's own weights (full fine-tuning keeps a frozen
  copy; LoRA runs the actor's model with its adapters off, so none), and the rollout engine's own
  weights (full fine-tuning in one process shares the actor's module; LoRA keeps a plain copy that
  receives the merged weights). Storages are counted once however many tensors view them;
- the process's peak resident memory (VmHWM: ru_maxrss would also count the parent's memory, which
  Linux carries across fork and exec) up to the final save and in all, which adds activations,
  freed memory the allocator keeps, and the interpreter with torch, transformers and posttrain
  loaded (measured alone once). A LoRA stage's final save builds the merged weights of every
  adapted layer on the CPU (`posttrain.checkpoint.adapter.save_merged`): its overall peak includes them.

Expected: full fine-tuning holds about 5 copies of the weights (parameters, gradients, two AdamW
moments, the reference), LoRA about 2 (the base model and the engine's merged copy) plus the small
adapter with its gradients and moments. Memory belongs here, never in a test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


def peak_rss_mib() -> float:
    """This process's peak resident set (VmHWM), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    raise SystemExit("no VmHWM in /proc/self/status: this benchmark reads Linux's process accounting")


def storages(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (views and shared tensors counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is not None and t.numel():
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def account(roles) -> dict[str, float]:
    """MiB held by each kind of tensor of the roles (see the module docstring)."""
    actor = roles.actor.model
    params = list(actor.parameters())
    state = [v for s in roles.actor.optimizer.state.values() for v in s.values() if hasattr(v, "untyped_storage")]
    own = {p.untyped_storage().data_ptr() for p in params}
    reference = [] if roles.reference is None or roles.reference.model is actor else list(roles.reference.model.parameters())
    engine = [p for p in roles.engine.model.parameters() if p.untyped_storage().data_ptr() not in own]
    trainable = [p for p in params if p.requires_grad]
    return {
        "parameters": storages(params) / MIB,
        "trainable": sum(p.numel() for p in trainable) / 1e6,  # millions of parameters, not MiB
        "gradients": storages(p.grad for p in params) / MIB,
        "adam_moments": storages(state) / MIB,
        "reference_copy": storages(reference) / MIB,
        "engine_copy": storages(engine) / MIB,
    }


def child(args: argparse.Namespace) -> None:
    """One configuration in this process: train, then print its accounting as one JSON line."""
    import torch

    if args.baseline:
        import transformers  # noqa: F401  (what every run has loaded)

        import posttrain.trainer.rl  # noqa: F401

        print(json.dumps({"peak_rss_mib": peak_rss_mib()}))
        return
    from posttrain.config.load import load_config
    from posttrain.trainer.rl import RLTrainer
    from posttrain.trainer.stage import StageContext

    torch.set_num_threads(args.threads)
    work = Path(args.workdir)
    lora = [f"model.lora_rank={args.rank}", f"model.lora_alpha={2 * args.rank}"] if args.rank else []
    cfg = load_config(None, [
        f"model.path={work / 'model'}", f"data.train_files={work / 'data' / 'train.parquet'}", "data.train_batch_size=4",
        "data.max_prompt_length=32", "data.max_response_length=16", "rollout.n=2", "actor.ppo_mini_batch_size=4",
        "actor.ppo_micro_batch_size_per_gpu=8", "actor.use_kl_loss=true", f"trainer.total_training_steps={args.steps}",
        "trainer.logger=[]", *lora,
    ])
    trainer = RLTrainer(StageContext(name="main", cfg=cfg, run_dir=work / f"run_r{args.rank}", model_path=str(work / "model")))
    out: dict[str, float] = {}
    save = trainer.save_final

    def measured_save(path: Path) -> None:  # the training peak, before the final model is written
        out["training_peak_rss_mib"] = peak_rss_mib()
        save(path)

    trainer.save_final = measured_save
    trainer.fit()
    out.update(account(trainer.roles))
    out["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(out))


def run(args: argparse.Namespace, *extra: str) -> dict:
    cmd = [sys.executable, __file__, "--child", "--workdir", args.workdir, "--steps", str(args.steps),
           "--threads", str(args.threads), *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rank", type=int, default=16, help="LoRA rank of the LoRA run (all-linear)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/posttrain-lora-memory")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return
    sys.path.insert(0, str(ROOT))
    from posttrain.models.tiny import make_tiny_model
    from posttrain.tasks import write_task_data

    work = Path(args.workdir)
    if not (work / "model" / "config.json").is_file() or json.loads((work / "model" / "config.json").read_text())["hidden_size"] != args.hidden:
        make_tiny_model(work / "model", layers=args.layers, hidden=args.hidden, heads=16, seed=0)
        write_task_data("sort", work / "data", train=64, test=0, sft=0, dpo=0)
    base = run(args, "--baseline")["peak_rss_mib"]
    full, lora = run(args, "--rank", "0"), run(args, "--rank", str(args.rank))
    print(f"model: hidden {args.hidden}, {args.layers} layers; GRPO with the KL loss, {args.steps} steps; fp32; "
          f"interpreter with torch, transformers and posttrain: {base:.0f} MiB peak RSS")
    rows = [("trainable parameters (M)", "trainable"), ("parameters (MiB)", "parameters"), ("gradients", "gradients"),
            ("AdamW moments", "adam_moments"), ("reference weights", "reference_copy"), ("engine weights", "engine_copy")]
    print(f"{'':28}{'full fine-tuning':>18}{f'LoRA rank {args.rank}':>16}")
    for label, key in rows:
        print(f"{label:28}{full[key]:18.1f}{lora[key]:16.1f}")
    total = {k: sum(r[key] for _, key in rows[1:]) for k, r in (("full", full), ("lora", lora))}
    print(f"{'tensors held, total (MiB)':28}{total['full']:18.1f}{total['lora']:16.1f}")
    print(f"{'peak RSS, training (MiB)':28}{full['training_peak_rss_mib']:18.0f}{lora['training_peak_rss_mib']:16.0f}")
    print(f"{'peak RSS, with final save':28}{full['peak_rss_mib']:18.0f}{lora['peak_rss_mib']:16.0f}")
    print(f"LoRA holds {total['lora'] / total['full']:.0%} of full fine-tuning's tensor memory; its training peak RSS is "
          f"{lora['training_peak_rss_mib'] / full['training_peak_rss_mib']:.0%} of full fine-tuning's "
          f"({(lora['training_peak_rss_mib'] - base) / (full['training_peak_rss_mib'] - base):.0%} of what each adds to the interpreter)")


if __name__ == "__main__":
    main()

"""One framework's side of `grpo_vs_trl.py`, run in its own process (so peak RSS is its own).

    python benchmarks/bench_workers.py {posttrain,trl} SPEC_JSON

SPEC_JSON holds model_dir, data (a train.parquet of `posttrain make-data arithmetic`), steps, bf16, fused_adamw,
threads, prompts, n, completion_length, lr, seed, run_dir and optionally device ("cpu", the default,
or "cuda": the first GPU for both frameworks). The last stdout line is a JSON object: per step its
wall seconds, phase seconds, generated (response) and trained (prompt + response) real tokens, plus
the process's peak RSS and, on a GPU, its peak allocated GPU memory.

Phases: gen (sampling), reward, logprob (no-grad log-prob passes: old/ref), fwd_loss (training
forward + loss), backward, optim (clip + optimizer step), other (the rest of the step). Timing
wraps the frameworks' own methods from outside; nothing in either framework is changed.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections import defaultdict
from functools import wraps
from pathlib import Path

if __name__ == "__main__" and sys.argv[1:2] == ["posttrain"]:
    # Start the process as the `posttrain` command does (before torch is imported).
    from posttrain.runtime import configure_process

    configure_process()

import torch  # noqa: E402

PHASES = ("gen", "reward", "logprob", "fwd_loss", "backward", "optim", "sync", "other")


def _timed(fn, sink: dict, key: str, when=lambda: True):
    @wraps(fn)
    def inner(*args, **kwargs):
        if not when():
            return fn(*args, **kwargs)
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            sink[key] += time.perf_counter() - t0

    return inner


def _finish(step_s: float, cpu_s: float, phases: dict, gen_tokens: int, trained_tokens: int) -> dict:
    """One step's record. `cpu_s` is the process's CPU time (all its threads): on a machine shared
    with other jobs it is far steadier than wall time, which also counts time-slices lost to them."""
    known = sum(v for k, v in phases.items() if k != "other")
    out = {k: float(phases.get(k, 0.0)) for k in PHASES}
    out["other"] = max(0.0, step_s - known)
    return {"step_s": step_s, "cpu_s": cpu_s, "phases": out, "gen_tokens": gen_tokens, "trained_tokens": trained_tokens}


def _progress(framework: str, step: int, record: dict) -> None:
    """One line per step on stderr (stdout's last line is the result), so a slow run shows where it is."""
    phases = " ".join(f"{k} {v:.2f}" for k, v in record["phases"].items() if v >= 0.005)
    print(f"[{framework}] step {step}: {record['step_s']:.2f} s ({phases})", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------- posttrain
def run_posttrain(spec: dict) -> list[dict]:
    import posttrain.workers.actor as actor_module
    from posttrain.cluster.world import World
    from posttrain.config import load_config
    from posttrain.data import collate_prompts
    from posttrain.trainer.rl import RLTrainer
    from posttrain.trainer.stage import StageContext

    overrides = [
        f"data.train_files={spec['data']}", "data.val_files=[]", f"data.train_batch_size={spec['prompts']}",
        "data.max_prompt_length=64", f"data.max_response_length={spec['completion_length']}",
        f"model.path={spec['model_dir']}", f"rollout.n={spec['n']}", "rollout.temperature=1.0",
        f"actor.ppo_mini_batch_size={spec['prompts']}",
        f"actor.ppo_micro_batch_size_per_gpu={spec['prompts'] * spec['n']}",
        f"actor.optim.lr={spec['lr']}", "actor.dual_clip=false", "actor.grad_clip=1.0",
        "algorithm.kind=rl", "algorithm.adv_estimator=grpo",
        f"trainer.total_training_steps={spec['steps']}", "trainer.logger=[]",
        f"trainer.default_local_dir={spec['run_dir']}", f"trainer.seed={spec['seed']}",
    ] + (["cluster.n_gpus_per_node=1"] if spec.get("device") == "cuda" else []) + list(spec.get("posttrain_overrides", []))
    cfg = load_config(None, overrides)
    # The CLI gives a one-process GPU run World(device="cuda") (posttrain/cli/train.py); so must this
    # caller, or every role is built on the CPU whatever cluster.n_gpus_per_node says.
    world = World(device="cuda" if spec.get("device") == "cuda" else "cpu")
    trainer = RLTrainer(StageContext("main", cfg, Path(spec["run_dir"]), cfg.model.path, world=world))
    phases: dict = defaultdict(float)
    actor = trainer.roles.actor
    placed = next(actor.model.parameters()).device.type
    if placed != world.device:
        raise SystemExit(f"posttrain built its actor on {placed}, not {world.device}: the benchmark would time the wrong device")
    actor._micro_loss = _timed(actor._micro_loss, phases, "fwd_loss")
    actor_module.clip_and_step = _timed(actor_module.clip_and_step, phases, "optim")
    seen = []  # the step's rollout batch, for its token counts
    generate = trainer.roles.engine.generate

    def keep(*args, **kwargs):
        seen.append(generate(*args, **kwargs))
        return seen[-1]

    trainer.roles.engine.generate = keep
    results = []
    for step in range(1, spec["steps"] + 1):
        rows = trainer.sampler.next_batch()
        prompts = collate_prompts([trainer.train_set[i] for i in rows], trainer.pad_id, uid_prefix=f"s{step}")
        phases.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        m = trainer.step(prompts, step)
        step_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
        phases["gen"] = m.get("timing/gen_s", 0.0)
        phases["reward"] = m.get("timing/reward_s", 0.0)
        phases["logprob"] = m.get("timing/old_log_prob_s", 0.0) + m.get("timing/ref_s", 0.0)
        phases["sync"] = m.get("timing/sync_s", 0.0)
        update = m.get("timing/update_actor_s", 0.0)
        phases["backward"] = max(0.0, update - phases["fwd_loss"] - phases["optim"])
        batch = seen[-1]
        results.append(_finish(step_s, cpu_s, dict(phases), batch.num_response_tokens(), batch.num_tokens()))
        _progress("posttrain", step, results[-1])
    return results


# ---------------------------------------------------------------------------------------- TRL
def run_trl(spec: dict) -> list[dict]:
    import datasets
    import pyarrow.parquet as pq
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from posttrain.tasks.arithmetic import score

    phases: dict = defaultdict(float)
    results: list[dict] = []
    counts = {"gen": 0, "trained": 0}

    def reward(completions, ground_truth, **_):
        t0 = time.perf_counter()
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        out = [score(t, g)["score"] for t, g in zip(texts, ground_truth)]
        phases["reward"] += time.perf_counter() - t0
        return out

    rows = pq.read_table(spec["data"]).to_pylist()
    dataset = datasets.Dataset.from_list(
        [{"prompt": r["prompt"], "ground_truth": r["reward_model"]["ground_truth"]} for r in rows]
    )
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32)
    args = GRPOConfig(
        output_dir=spec["run_dir"], per_device_train_batch_size=spec["prompts"] * spec["n"],
        num_generations=spec["n"], max_completion_length=spec["completion_length"], learning_rate=spec["lr"],
        beta=0.0, num_iterations=1, gradient_accumulation_steps=1, max_steps=spec["steps"],
        lr_scheduler_type="constant", weight_decay=0.01, max_grad_norm=1.0, optim="adamw_torch_fused" if spec.get("fused_adamw") else "adamw_torch",
        gradient_checkpointing=False, use_cpu=spec.get("device", "cpu") == "cpu", bf16=bool(spec.get("bf16")), fp16=False, temperature=1.0, top_p=1.0, top_k=0,
        epsilon=0.2, loss_type="dapo", scale_rewards="group", logging_steps=1, save_strategy="no",
        report_to=[], seed=spec["seed"], disable_tqdm=True, dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=dataset, processing_class=tokenizer)

    class StepClock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            phases.clear()
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_pre_optimizer_step(self, *a, **k):
            self.t_opt = time.perf_counter()

        def on_optimizer_step(self, *a, **k):
            phases["optim"] += time.perf_counter() - self.t_opt

        def on_step_end(self, *a, **k):
            if torch.cuda.is_available():
                torch.cuda.synchronize()  # the step's kernels have finished before it is timed
            step_s, cpu_s = time.perf_counter() - self.t0, time.process_time() - self.c0
            results.append(_finish(step_s, cpu_s, dict(phases), counts["gen"], counts["trained"]))
            _progress("trl", len(results), results[-1])

    trainer.add_callback(StepClock())
    trainer.model.generate = _timed(trainer.model.generate, phases, "gen")
    trainer._get_per_token_logps_and_entropies = _timed(
        trainer._get_per_token_logps_and_entropies, phases, "logprob", when=lambda: not torch.is_grad_enabled()
    )
    trainer.compute_loss = _timed(trainer.compute_loss, phases, "fwd_loss")
    trainer.accelerator.backward = _timed(trainer.accelerator.backward, phases, "backward")
    score_fn = trainer._generate_and_score_completions

    @wraps(score_fn)
    def counting(*args, **kwargs):
        out = score_fn(*args, **kwargs)
        resp = int(out["completion_mask"].sum())
        counts["gen"], counts["trained"] = resp, resp + int(out["prompt_mask"].sum())
        return out

    trainer._generate_and_score_completions = counting
    trainer.train()
    return results


def main() -> None:
    framework, spec = sys.argv[1], json.loads(sys.argv[2])
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    steps = {"posttrain": run_posttrain, "trl": run_trl}[framework](spec)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    out = {"framework": framework, "steps": steps, "peak_rss_mib": peak_mib}
    if spec.get("device") == "cuda":
        out["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Where an RL step's time and memory go, logged every step: tokens per second and model FLOPs
utilisation (MFU) per phase, peak memory per role; and the profiler of the profiled steps.

`StepObserver` is built once per stage. Each step gets a `PhaseWatch`, the `PhaseTimer`'s hook:
it records the process's peak memory in every phase and, in a profiled step only, opens the
profiling tool's range for the phase (`posttrain.trainer.profiling`).

Definitions (all workers together: every rank processes its share of the same batch at once):
- tokens/s of a phase: the tokens it processed over its wall time. gen: generated tokens; reward:
  response tokens scored; old_log_prob (when the actor recomputes), ref, values: prompt + response
  tokens of the batch; update_actor, update_critic: those of the trained rows x epochs.
- MFU: model FLOPs (`posttrain.models.flops`: 2 per parameter per token forward, 3x that with the
  backward, plus causal attention) over wall time x the peak of every worker's device. CPU peaks are
  measured at the start of the stage, GPU peaks come from the data sheet. The greedy baseline's
  generation (gen_baseline) and the reward model's forward are timed but their FLOPs not counted.
- Peak memory of a role: the highest of this process's peaks in the role's phases, then the highest
  over the workers (`posttrain.trainer.memory`); every role shares every process.

Time a role spends waiting for another is not measured: posttrain runs every role in every worker,
one after the other, so no role waits on another's devices (docs/profiling.md).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Any, Iterator

import torch

from posttrain.models.flops import MatmulParams, peak_flops
from posttrain.models.precision import compute_dtype
from posttrain.records import RolloutBatch
from posttrain.trainer.memory import MemoryProbe
from posttrain.trainer.metrics import PhaseTimer
from posttrain.trainer.profile_plan import PHASE_ROLE
from posttrain.trainer.profiling import StepProfiler

GB = 1024**3


class PhaseWatch:
    """One step's hook of `PhaseTimer`: the peak memory of each phase, and the profiler's range."""

    def __init__(self, memory: MemoryProbe, profiler: StepProfiler | None):
        self.memory, self.profiler = memory, profiler
        self.peaks: dict[str, int] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        self.memory.begin()
        try:
            if self.profiler is None:
                yield
            else:
                with self.profiler.phase(phase):
                    yield
        finally:
            self.peaks[phase] = max(self.peaks.get(phase, 0), self.memory.end())


def _model_config(model: torch.nn.Module) -> Any:
    return getattr(model, "config", None) or getattr(getattr(model, "module", None), "config", None)


class StepObserver:
    """Throughput, MFU and memory metrics of every step, and the profiler of the chosen steps."""

    def __init__(self, cfg: Any, roles: Any, ctx: Any, total_steps: int):
        world = ctx.world
        self.actor, self.dp = roles.actor, roles.actor.dp
        self.memory = MemoryProbe(world.torch_device)
        self.profiler = StepProfiler.build(cfg, world.rank, ctx.run_dir, world.device, ctx.name, total_steps)  # None: off
        self.policy = MatmulParams.of(_model_config(roles.actor.model))
        critic = roles.critic
        self.critic = MatmulParams.of(_model_config(critic.model), head_outputs=1) if critic is not None else None
        self.epochs = {"update_actor": cfg.actor.ppo_epochs, "update_critic": cfg.critic.ppo_epochs}
        bf16 = compute_dtype(cfg.actor.fsdp_config.mixed_precision.param_dtype, world.torch_device) == "bf16"
        dtype = torch.bfloat16 if bf16 else next(roles.actor.model.parameters()).dtype
        peak = peak_flops(world.device, dtype)
        self.peak_total = sum(self.dp.gather_objects(peak.flops))  # every worker's device together
        if self.profiler is not None and world.is_main:
            plan = self.profiler.plan
            print(f"profiling steps {sorted(plan.windows)} with {plan.tool} into {plan.out_dir}; MFU against "
                  f"{self.peak_total / 1e12:.3g} TFLOP/s ({peak.source}, x{world.size} workers)", flush=True)

    def step(self, step: int) -> contextlib.AbstractContextManager:
        """The profiler's window around a training step (nothing when not profiling)."""
        return self.profiler.step(step) if self.profiler is not None else contextlib.nullcontext()

    def watch(self) -> PhaseWatch:
        return PhaseWatch(self.memory, self.profiler)

    def metrics(self, timer: PhaseTimer, batch: RolloutBatch, train: RolloutBatch) -> dict[str, float]:
        """perf/* metrics of a finished step timed by `timer` (whose hook is this observer's watch)."""
        seconds, step_s = dict(timer.seconds), timer.elapsed()
        m = {"perf/tokens_per_s": batch.num_tokens() / step_s}
        if "gen" in seconds:  # a decoupled learner's batch was generated in the explorer process
            m["perf/generated_tokens_per_s"] = batch.num_response_tokens() / max(seconds["gen"], 1e-9)
        tokens, flops = self._work(seconds, batch, train)
        for phase, n in tokens.items():
            m[f"perf/tokens_per_s_by_phase/{phase}"] = n / max(seconds[phase], 1e-9)
        for phase, f in flops.items():
            m[f"perf/mfu_by_phase/{phase}"] = f / (max(seconds[phase], 1e-9) * self.peak_total)
        m["perf/mfu"] = sum(flops.values()) / (step_s * self.peak_total)
        m["perf/peak_tflops"] = self.peak_total / 1e12
        m.update(self._memory(getattr(timer.watch, "peaks", {})))
        return m

    def _work(self, seconds: dict[str, float], batch: RolloutBatch, train: RolloutBatch) -> tuple[dict[str, float], dict[str, float]]:
        """Tokens and model FLOPs of each phase that ran in this step."""
        lengths = batch.prompt_mask.sum(1) + batch.response_mask.sum(1)  # (B,) real tokens per row
        predicted = float(batch.response_mask.sum())
        all_tokens, train_tokens = float(batch.num_tokens()), float(train.num_tokens())
        t_lengths = train.prompt_mask.sum(1) + train.response_mask.sum(1)  # (B',) after a PF-PPO filter
        t_predicted = float(train.response_mask.sum())
        policy = self.policy.sequence_flops(lengths, predicted)
        tokens: dict[str, float] = {"gen": predicted, "reward": predicted}
        flops: dict[str, float] = {"gen": policy}
        if self.actor.recomputed_last:
            tokens["old_log_prob"], flops["old_log_prob"] = all_tokens, policy
        tokens["ref"], flops["ref"] = all_tokens, policy
        tokens["update_actor"] = train_tokens * self.epochs["update_actor"]
        flops["update_actor"] = 3 * self.policy.sequence_flops(t_lengths, t_predicted) * self.epochs["update_actor"]
        if self.critic is not None:
            tokens["values"], flops["values"] = all_tokens, self.critic.sequence_flops(lengths, predicted)
            tokens["update_critic"] = train_tokens * self.epochs["update_critic"]
            flops["update_critic"] = 3 * self.critic.sequence_flops(t_lengths, t_predicted) * self.epochs["update_critic"]
        ran = set(seconds)
        return {k: v for k, v in tokens.items() if k in ran}, {k: v for k, v in flops.items() if k in ran}

    def _memory(self, peaks: dict[str, int]) -> dict[str, float]:
        """perf/peak_memory_gb_by_role/<role>: the highest peak over the role's phases and over the workers."""
        by_role: dict[str, int] = defaultdict(int)
        for phase, peak in peaks.items():
            role = PHASE_ROLE.get(phase, phase)
            by_role[role] = max(by_role[role], peak)
        if self.dp.distributed:  # every rank passes here once per step: one small gather
            gathered: dict[str, int] = defaultdict(int)
            for ranks in self.dp.gather_objects(dict(by_role)):
                for role, peak in ranks.items():
                    gathered[role] = max(gathered[role], peak)
            by_role = gathered
        out = {f"perf/peak_memory_gb_by_role/{role}": peak / GB for role, peak in by_role.items()}
        if by_role:
            out["perf/peak_memory_gb"] = max(by_role.values()) / GB
        return out

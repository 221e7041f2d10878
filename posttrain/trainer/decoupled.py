"""Decoupled exploring and training (Trinity-RFT's modes): the two halves of the RL step as two
processes that meet in an experience buffer.

    explorer: wait for weights fresh enough -> rollout -> reward -> write batch b to the buffer
    trainer:  claim batch s from the buffer -> log-probs, advantages, updates -> publish weights

`trainer.mode`:
- `both` with `synchronizer.sync_interval` 1, `sync_offset` 0 and `sync_style` fixed is the synchronous
  loop (`posttrain.trainer.rl`); any other interval, offset or style, or a split placement (the
  engines on devices of their own: `rollout.hybrid_engine: false`, or `cluster.device_mapping.rollout`
  after the training devices), starts an explorer and a trainer (`posttrain.cli.train`) that run
  `run_explorer` and `run_learner` concurrently, each one process or several;
- `explore` runs the explorer alone with the starting weights (collecting experiences, e.g. for a
  later `train` run or offline analysis);
- `train` runs the trainer alone on a buffer an earlier `explore` run (or another process) filled.

Staleness. Batch b is generated with the newest weights the explorer has, and it may not start
before the trainer has published the weights of step b - 1 - max_staleness, where max_staleness =
sync_interval - 1 + sync_offset: the trainer publishes every sync_interval steps, and sync_offset
lets the explorer run that many more batches ahead. With interval 1 and offset 0 every batch is
on-policy, as in the synchronous loop. That is the fixed `synchronizer.sync_style`; in the dynamic
styles the explorer syncs when it or the trainer asks (`posttrain.trainer.sync`). Each trained step logs `async/staleness`: how many steps
older the weights that sampled it are than the ones it trains (0 = on-policy). Off-policy rows get
their old log-probs recomputed by the actor (`Actor.old_logprobs`), and rollout importance sampling
(`algorithm.rollout_is_*`) corrects for the sampler's lag when asked.

Validation runs in the explorer (it holds the engine) on the weights of every validation step
(trainer.test_freq, the last step, and step 0 with val_before_train); the trainer publishes those
weights whatever the interval, waits for the evaluation and logs it with its own metrics of that
step, so `metrics.jsonl` reads as a synchronous run's. The explorer's own files (validation
generations, dumps) go to `<stage dir>/explorer/`.

Faults: a trainer that finds no batch within `max_read_timeout`, or an explorer that finds no fresh
weights within `sync_timeout`, ends with a message saying what the other side last reported. A
killed side stops the run (the launcher stops the other); the rerun resumes: the trainer from its
checkpoint, giving back to the buffer the batches of steps it had not checkpointed, the explorer
after the last batch it wrote (and after the prompt batches drawn through it: with dynamic sampling,
algorithm.filter_groups, a batch may take several). So no batch is lost or trained twice.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Callable

from posttrain.buffer.jsonl import JsonlBuffer
from posttrain.buffer.replay import replay_from_config
from posttrain.buffer.sqlite import BufferError, ExperienceBuffer, read_timed_out
from posttrain.buffer.weight_channel import WeightClient, WeightServer, backend_for
from posttrain.buffer.weights import WeightFiles
from posttrain.checkpoint import Checkpointer
from posttrain.checkpoint.manager import kill_point
from posttrain.cluster.fsdp import full_state_dict
from posttrain.config.access import device_lists, explorer_processes, is_decoupled
from posttrain.config.schema import Config
from posttrain.errors import UserError
from posttrain.models.lora import is_lora, merged_tensors
from posttrain.trainer.explorer_crew import Crew, follow_orders
from posttrain.trainer.explorer_order import STATE_FILE, OrderLog, learns, restore_order
from posttrain.trainer.metrics import PhaseTimer
from posttrain.trainer.stage import StageContext, StageResult, final_model_dir
from posttrain.trainer.sync import Follower, Publisher

ROLE_ENV = "POSTTRAIN_DECOUPLED"  # "explorer" or "trainer": this process is that half of a `both` run


def explores_alone(cfg: Config) -> bool:
    """Whether this command runs only the explorer of an RL stage: a decoupled run's explorer half, or
    trainer.mode explore. Its processes are one per engine (`access.explorer_processes`)."""
    return os.environ.get(ROLE_ENV) == "explorer" or (cfg.algorithm.kind == "rl" and cfg.trainer.mode == "explore")


def explorer_devices(cfg: Config) -> list[int]:
    """The device of each explorer process (its engine's first): cluster.device_mapping.rollout's, every
    rollout.tensor_model_parallel_size-th; [0] without a list."""
    ids = device_lists(cfg).get("rollout") or [0]
    tp = cfg.rollout.tensor_model_parallel_size
    return ids[::tp][:explorer_processes(cfg)]


def half_of(cfg: Config) -> str | None:
    """Which half this process runs for an RL stage: "explorer", "trainer", or None (both, in step)."""
    if cfg.algorithm.kind != "rl":
        return None
    if cfg.trainer.mode == "explore":
        return "explorer"
    if cfg.trainer.mode == "train":
        return "trainer"
    return os.environ.get(ROLE_ENV) if is_decoupled(cfg) else None


def max_staleness(cfg: Config) -> int:
    return cfg.synchronizer.sync_interval - 1 + cfg.synchronizer.sync_offset


def validation_steps(cfg: Config, total: int) -> list[int]:
    t = cfg.trainer
    if not (cfg.data.val_files or cfg.env.val_env_manager.tags):  # no prompts and no env groups to validate on
        return []
    steps = {total} | ({0} if t.val_before_train else set())
    if t.test_freq > 0:
        steps |= set(range(t.test_freq, total + 1, t.test_freq))
    return sorted(steps)


def buffer_path(cfg: Config, stage_dir: Path) -> Path:
    """The experience buffer's place: buffer.trainer_input.experience_buffer.path (a path or a
    sqlite:/// URL), else <stage dir>/<buffer name>.sqlite, or the directory <stage dir>/<buffer
    name> for storage_type file (JSON-lines files)."""
    b = cfg.buffer.trainer_input.experience_buffer
    if b.path:
        return Path(b.path.removeprefix("sqlite:///")).expanduser()
    return stage_dir / (b.name if b.storage_type == "file" else f"{b.name}.sqlite")


def open_buffer(cfg: Config, stage_dir: Path) -> ExperienceBuffer | JsonlBuffer:
    """The experience buffer of the stage: SQLite (storage_type queue or sql) or JSON-lines files (file)."""
    path = buffer_path(cfg, stage_dir)
    return JsonlBuffer(path) if cfg.buffer.trainer_input.experience_buffer.storage_type == "file" else ExperienceBuffer(path)


def weights_dir(stage_dir: Path) -> Path:
    return stage_dir / "published_weights"


def open_weights(cfg: Config, stage_dir: Path, side: str, world) -> WeightFiles | WeightServer | WeightClient | None:
    """How the trainer's weights reach the explorer in mode both (None in explore and train modes,
    which run one side alone), by synchronizer.sync_method: `checkpoint` (alias offline) as
    safetensors files in the weights directory; `nccl` (alias online) and `memory` over a process
    group from the trainer's rank 0 to each explorer process (posttrain.buffer.weight_channel):
    NCCL from a CUDA trainer for nccl, gloo from host memory otherwise."""
    if cfg.trainer.mode != "both":
        return None
    s, directory = cfg.synchronizer, weights_dir(stage_dir)
    if s.sync_method in ("checkpoint", "offline"):
        return WeightFiles(directory)
    if side == "trainer":
        backend = backend_for(s.sync_method, world.torch_device)
        return WeightServer(directory, explorer_processes(cfg), backend, world.torch_device, s.sync_timeout)
    return WeightClient(directory, world.rank, s.sync_timeout, world.torch_device)


# ---------------------------------------------------------------- the explorer
def run_explorer(ctx: StageContext) -> StageResult:
    """Generate and score batches into the buffer; with a trainer (mode both), follow its weights
    and validate them; alone (mode explore), explore with the starting weights. With several explorer
    processes rank 0 runs this loop and the others its orders (`posttrain.trainer.explorer_crew`)."""
    from posttrain.trainer.rl import RLTrainer

    cfg, stage_dir, world = ctx.cfg, ctx.run_dir, ctx.world
    explorer = RLTrainer(dataclasses.replace(ctx, run_dir=stage_dir / "explorer"), halves="explorer")
    total = explorer.derived.total_training_steps
    buffer = open_buffer(cfg, stage_dir) if world.is_main else None
    weights = open_weights(cfg, stage_dir, "explorer", world)
    start, drawn = world.from_main(resume_point(buffer) if buffer is not None else None)
    if explorer.sampler:  # the data order continues after the last batch written
        restore_order(explorer.sampler, stage_dir / "explorer" / STATE_FILE, start, drawn)
    try:
        if world.is_main:
            crew = Crew(explorer, world)
            try:
                _explore(ctx, crew, buffer, weights, (start, drawn), total)
            except BaseException as err:
                crew.stop(err)
                raise
            crew.stop()
        else:
            follow_orders(explorer, world, weights)
    finally:
        explorer.reader.close()
        if explorer.rewards is not None:  # an agentic stage scores in its environments
            explorer.rewards.close()
        if buffer is not None:
            buffer.close()
    # The explorer trains nothing: its "final model" is what it sampled with last.
    return StageResult(final_model=Path(ctx.model_path), last_metrics={}, steps=total)


def resume_point(buffer) -> tuple[int, int]:
    """(the last batch written, the prompt batches drawn through it): a resumed explorer writes the
    batches after the one and draws its prompts after the other (with dynamic sampling a batch may
    take several prompt batches, `Experience.drawn`)."""
    last = buffer.explored()
    return last, (buffer.read(last).drawn or last) if last else 0


def _explore(ctx: StageContext, crew: Crew, buffer, weights: WeightFiles | None, resumed: tuple[int, int], total: int) -> None:
    """Rank 0's loop: batches start+1..total into the buffer, each sampled with weights the
    synchronizer allows, validating on the way."""
    cfg, sync = ctx.cfg, ctx.cfg.synchronizer
    start, drawn = resumed
    follow = Follower(crew, buffer, weights, sync.sync_timeout, validation_steps(cfg, total), sync.sync_style, sync.sync_interval)
    replay = replay_from_config(cfg.buffer.trainer_input.experience_buffer)
    sampler = crew.explorer.sampler  # one that learns from rewards is saved per batch (posttrain.trainer.explorer_order)
    order = OrderLog(ctx.run_dir / "explorer" / STATE_FILE, sampler, start) if learns(sampler) else None
    for b in range(start + 1, total + 1):
        idle = follow.idle_s
        follow.before_batch(b, max_staleness(cfg))  # the weights batch b may use (validating on the way)
        idle = follow.idle_s - idle
        buffer.report("explorer", f"exploring batch {b} with the weights of step {follow.loaded}")
        timer = PhaseTimer()
        experience = crew.explore(b, timer, policy_step=follow.loaded)
        experience.explore_metrics = {k: v for k, v in timer.metrics().items() if k != "timing/step_s"}
        if not replay.enable:  # a replaying buffer drops its lowest batches instead of waiting
            idle += buffer.wait_for_room(len(set(experience.batch.group_index)), replay.capacity_groups, sync.sync_timeout)
        experience.explore_metrics["timing/idle_explorer_s"] = idle  # this batch's wait for fresh weights (and room)
        if order is not None:
            order.explored(b)  # before the write: a crash between the two finds batch b - 1's state too
        drawn += int(experience.reward_metrics.get("filter_groups/num_gen_batches", 1))  # algorithm.filter_groups' rounds
        experience.drawn = drawn
        buffer.write(b, experience)
        kill_point(ctx.name, b, "explored")  # the test hook (posttrain.checkpoint.manager)
    follow.finish()
    buffer.report("explorer", f"finished: {total} batches written")


# ---------------------------------------------------------------- the trainer
def run_learner(ctx: StageContext) -> StageResult:
    """Train on the buffer's batches in order; with an explorer (mode both), publish weights for it
    and log its evaluations; alone (mode train), train on what an earlier explore run stored."""
    from posttrain.trainer.rl import RLTrainer

    cfg, stage_dir = ctx.cfg, ctx.run_dir
    path = buffer_path(cfg, stage_dir)
    if cfg.trainer.mode == "train" and (not path.exists() or open_buffer(cfg, stage_dir).explored() == 0):
        raise BufferError(
            f"trainer.mode=train reads experiences from {path}, which holds none; fill it first with trainer.mode=explore "
            "(same buffer path), or run trainer.mode=both"
        )
    learner = RLTrainer(ctx, halves="learner")
    total = learner.derived.total_training_steps
    world = ctx.world  # several trainer ranks: rank 0 alone reads and writes the buffer, and tells the others
    buffer = open_buffer(cfg, stage_dir) if world.is_main else None
    following = cfg.trainer.mode == "both"
    weights = open_weights(cfg, stage_dir, "trainer", world)
    val_steps = set(validation_steps(cfg, total)) if following else set()
    ckpt = Checkpointer(ctx, total, learner.checkpoint_parts())
    last: dict[str, float] = {}
    wait = cfg.buffer.trainer_input.experience_buffer.max_read_timeout
    replay = replay_from_config(cfg.buffer.trainer_input.experience_buffer)
    sync = cfg.synchronizer
    try:
        start = ckpt.restore()
        released = buffer.release_after(start) if buffer is not None else 0
        if released:
            print(f"[{ctx.name}] {released} explored batch(es) claimed after step {start} go back to the buffer", flush=True)
        publisher = None if weights is None else Publisher(
            lambda k: _publish(learner, weights, k), weights, sync.sync_style, sync.sync_interval, val_steps | {total}, start, world)
        answer = publisher.answer if publisher is not None else (lambda: None)  # a dynamic sync_style: answer while waiting
        if 0 in val_steps and start == 0:
            last = _on_main(world, _evaluation(buffer, 0, sync.sync_timeout), answer)
            learner._log(last, ctx.step_offset)
        for step in range(start + 1, total + 1):
            if buffer is not None:
                buffer.report("trainer", f"training step {step}")
            waited = time.monotonic()
            experience = _on_main(world, _claim(buffer, step, wait, replay), answer)  # the whole batch, on every rank
            waited = time.monotonic() - waited
            timer = PhaseTimer(learner.observer.watch())
            metrics, train = learner.learn(experience, step, timer)
            if publisher is not None:
                with timer("sync"):
                    publisher.after_step(step)
            metrics = learner.step_metrics(experience, metrics, timer, step, train)
            metrics["async/staleness"] = float(step - 1 - experience.policy_step)
            metrics["timing/idle_trainer_s"] = waited  # the wait for this step's batch
            if step in val_steps:
                metrics.update(_on_main(world, _evaluation(buffer, step, sync.sync_timeout), answer))
            learner._log(metrics, ctx.step_offset + step)
            ckpt.after_step(step)
            last = metrics
        if buffer is not None:
            buffer.report("trainer", f"finished: {total} steps")
        result = StageResult(ckpt.final_model(learner.save_final, final_model_dir(ctx)), last, total)
        if isinstance(weights, WeightServer):  # the weights live in this process: serve them to the explorer's end
            _on_main(world, _explorer_finished(buffer, sync.sync_timeout), lambda: None)
        return result
    finally:
        learner.roles.close()  # a reference crew stops with the trainer
        if isinstance(weights, WeightServer):
            weights.close()
        if buffer is not None:
            buffer.close()
        learner.trackers.close()


def _on_main(world, attempt: Callable[[], Any], between: Callable[[], None], poll_s: float = 0.05) -> Any:
    """Rank 0's `attempt()` (None: not there yet; it raises when it gives up) repeated until it gives
    a result, which every rank returns. Between attempts every rank runs `between` together (answering
    the explorer's sync request: a collective when the actor is sharded). One rank: the same loop."""
    while True:
        try:
            result = attempt() if world.is_main else None
        except UserError as err:  # rank 0 gave up: every rank stops with its message
            result = err
        result = world.from_main(result)
        if isinstance(result, UserError):
            raise result
        if result is not None:
            return result
        between()
        time.sleep(poll_s)


def _until(timeout_s: float, probe: Callable[[], Any], timed_out: Callable[[], Exception]) -> Callable[[], Any]:
    """An attempt (for `_on_main`) that returns what `probe` finds (None: not yet), and raises
    `timed_out()` once `timeout_s` has passed with nothing found."""
    deadline = time.monotonic() + timeout_s

    def attempt():
        found = probe()
        if found is None and time.monotonic() > deadline:
            raise timed_out() from None
        return found
    return attempt


def _claim(buffer, step: int, timeout_s: float, replay) -> Callable[[], Any]:
    """An attempt at the batch of trainer step `step`, giving up after `timeout_s`."""
    def probe():
        try:
            return buffer.claim(step, 0.0, waiting_for="the explorer", replay=replay)
        except BufferError:
            return None
    return _until(timeout_s, probe, lambda: read_timed_out(buffer, step, timeout_s, "the explorer", replay))


def _publish(learner, weights: WeightFiles, step: int) -> None:
    """The actor's whole weights as those of `step` (a collective when sharded; rank 0 writes): with
    LoRA, the base weights with the adapters merged in, which is what the explorer's plain model holds."""
    model = learner.roles.actor.model
    state = dict(merged_tensors(model)) if is_lora(model) else full_state_dict(model, main_only=True)
    if learner.ctx.world.is_main:
        weights.publish(state, step)


def _explorer_finished(buffer, timeout_s: float) -> Callable[[], bool | None]:
    """An attempt at the explorer's end: a trainer whose weights live in its own memory (sync_method
    nccl or memory) serves them until the explorer needs none."""
    return _until(timeout_s, lambda: buffer.state("explorer").startswith("finished") or None, lambda: BufferError(
        f"the trainer finished and waited {timeout_s:g} s for the explorer to finish with its weights "
        f"(explorer: {buffer.state('explorer')}); raise synchronizer.sync_timeout or check the explorer"))


def _evaluation(buffer: ExperienceBuffer, step: int, timeout_s: float) -> Callable[[], dict[str, float] | None]:
    """An attempt at the explorer's evaluation of the weights of `step`."""
    return _until(timeout_s, lambda: buffer.evaluations_through(step).get(step), lambda: BufferError(
        f"the trainer waited {timeout_s:g} s for the explorer's validation of the weights of step {step} "
        f"(explorer: {buffer.state('explorer')}); raise synchronizer.sync_timeout or check the explorer"))

"""The checkpoint cadence of one stage, as its fit loop sees it: `restore()` once, `after_step(k)`
after each step, `final_model(save)` at the end.

Decisions (verl's `trainer.save_freq` semantics, made explicit):
- With `save_freq > 0` a checkpoint is written every `save_freq` steps and always after the last
  step; with `save_freq <= 0` none is written (the stage still saves `final_model/`), so a killed
  run restarts its stage from the beginning.
- `save_hf_checkpoint`: `last` writes `<stage dir>/final_model/` at the end (the policy the next
  stage starts from); `always` also copies every checkpoint's actor model to
  `<stage dir>/hf_checkpoints/global_step_N/` (never pruned); `never` writes no separate copy: the
  stage's final model is the last checkpoint's `actor/` directory (so it needs `save_freq > 0`).
- `del_local_ckpt_after_load`: the checkpoint a stage resumed from is deleted once loaded (and
  the marker with it, when it named that checkpoint).

Test hook: `POSTTRAIN_TEST_KILL=<stage>:<step>:<when>` SIGKILLs the process at stage-local step
`step`, `when` being `after_step` (after its log line and checkpoint) or `before_marker` (inside
the save, after the files are written and before the marker names them); a fourth field
`:<rank>` kills only that worker process of a multi-process run, and a fifth, `:stop`, stops it
(SIGSTOP) instead, the way a hung worker looks to its peers. The explorer of a decoupled run has
the point `explored` (after writing batch `step` to the experience buffer).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Callable

from posttrain.checkpoint.layout import MARKER, latest_checkpoint
from posttrain.checkpoint.load import CheckpointError, load_checkpoint
from posttrain.checkpoint.save import Parts, prune, save_checkpoint, save_hf
from posttrain.config.schema import Config

KILL_ENV = "POSTTRAIN_TEST_KILL"


def checkpoint_root(cfg: Config, run_dir: Path, stage: str, multi_stage: bool) -> Path:
    """`trainer.checkpoint_dir` (per stage in a multi-stage run), or `<stage dir>/checkpoints`."""
    if cfg.trainer.checkpoint_dir:
        base = Path(cfg.trainer.checkpoint_dir).expanduser()
        return base / stage if multi_stage else base
    return run_dir / "checkpoints"


def kill_point(stage: str, step: int, when: str, rank: int = 0) -> None:
    """SIGKILL (or with a fifth field `stop`, SIGSTOP: a hung worker) this process when the test hook
    names this point, and this rank when it names one."""
    fields = os.environ.get(KILL_ENV, "").split(":")
    if fields[:3] != [stage, str(step), when] or fields[3:4] not in ([], [str(rank)]):
        return
    os.kill(os.getpid(), signal.SIGSTOP if fields[4:] == ["stop"] else signal.SIGKILL)


class Checkpointer:
    """Saves and restores one stage's `Parts` (see the module docstring for the policy)."""

    def __init__(self, ctx, total_steps: int, parts: Parts):
        """`ctx` is the stage's `StageContext` (its `checkpoint_root` and `resume` were set by the run driver)."""
        t = ctx.cfg.trainer
        self.ctx, self.total, self.parts = ctx, total_steps, parts
        self.root: Path = ctx.checkpoint_root
        self.freq = t.save_freq
        self.keep = {"actor": t.max_actor_ckpt_to_keep, "critic": t.max_critic_ckpt_to_keep}
        self.load_contents = {"actor": ctx.cfg.actor.checkpoint.load_contents, "critic": ctx.cfg.critic.checkpoint.load_contents}
        self.save_contents = {"actor": ctx.cfg.actor.checkpoint.save_contents, "critic": ctx.cfg.critic.checkpoint.save_contents}
        self.last_saved: Path | None = None
        if self.freq > 0 and ctx.world.is_main:
            for role in parts.roles:
                left_out = [p for p in ("optimizer", "extra") if p not in self.save_contents.get(role, ("optimizer", "extra"))]
                if left_out:
                    print(f"posttrain: warning: {role}.checkpoint.save_contents leaves out {' and '.join(left_out)}: "
                          "a run resumed from these checkpoints continues without it, not exactly", file=sys.stderr)
        if t.save_hf_checkpoint == "never" and self.freq <= 0 and total_steps > 0:
            raise CheckpointError(
                "trainer.save_hf_checkpoint=never keeps the final policy only in the last checkpoint, but "
                "trainer.save_freq <= 0 writes none; set trainer.save_freq > 0 or save_hf_checkpoint: last"
            )

    def restore(self) -> int:
        """Load `ctx.resume` when set; returns the stage-local step it was saved after (0 if none)."""
        path = self.ctx.resume
        if path is None:
            return 0
        state = load_checkpoint(path, self.parts, self.load_contents)
        if state.get("stage") not in (None, self.ctx.name):
            raise CheckpointError(f"{path} is a checkpoint of stage {state['stage']!r}, not of stage {self.ctx.name!r}")
        step = int(state["step"])
        if step > self.total:
            raise CheckpointError(
                f"{path} was saved after step {step}, beyond this stage's {self.total} training steps; "
                "resume with the config that wrote it (or raise trainer.total_training_steps)"
            )
        self.last_saved = path
        if self.ctx.cfg.trainer.del_local_ckpt_after_load:
            self.ctx.world.barrier()  # every rank has read it
            if self.ctx.world.is_main:
                self._delete_loaded(path)
            self.last_saved = None
        return step

    def _delete_loaded(self, path: Path) -> None:
        if latest_checkpoint(self.root) == path:
            (self.root / MARKER).unlink()
        shutil.rmtree(path)
        self.last_saved = None

    def due(self, step: int) -> bool:
        return self.freq > 0 and (step % self.freq == 0 or step == self.total)

    def after_step(self, step: int) -> None:
        """Save when due (then prune); the test hook may kill the process here."""
        if self.due(step):
            state = {
                "stage": self.ctx.name,
                "global_step": self.ctx.step_offset + step,
                "total_training_steps": self.total,
            }
            world = self.ctx.world
            self.last_saved = save_checkpoint(
                self.root, step, self.parts, state, world=world, contents=self.save_contents,
                before_marker=lambda: kill_point(self.ctx.name, step, "before_marker", world.rank),
            )
            if world.is_main:
                prune(self.root, self.keep)
            if self.ctx.cfg.trainer.save_hf_checkpoint == "always":
                self._copy_hf(step)
        kill_point(self.ctx.name, step, "after_step", self.ctx.world.rank)

    def _copy_hf(self, step: int) -> None:
        """The actor as a Hugging Face directory beside the checkpoint (a collective when sharded)."""
        actor = self.parts.roles["actor"]
        out = self.ctx.run_dir / "hf_checkpoints" / f"global_step_{step}"
        if self.ctx.world.is_main and out.exists():
            shutil.rmtree(out)
        save_hf(actor.model, out, actor.tokenizer)

    def final_model(self, save: Callable[[Path], None], out: Path) -> Path:
        """Where the stage's final policy is: `out` written by `save`, or with save_hf_checkpoint
        `never`, the newest checkpoint's actor directory."""
        if self.ctx.cfg.trainer.save_hf_checkpoint == "never" and self.last_saved is not None:
            return self.last_saved / "actor"
        save(out)
        return out

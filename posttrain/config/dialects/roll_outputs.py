"""ROLL's ``rollout_dump_dir``: where its pipelines write each step's rollouts for inspection.

ROLL (roll/pipeline/rlvr/utils.py) writes a step's rollouts (decoded responses, scores, the prompt
columns) as ``rollout_dump_data.step_<k>.jsonl`` in that directory, and only when the path is
absolute: its one writer is registered for paths starting with ``/`` (``json_checker``), so a
relative path writes nothing. posttrain's counterpart is ``trainer.rollout_data_dir``: one JSONL
file of the step's rollouts (prompt, response, score, ...) per step, in posttrain's own row layout.

ROLL's ``rollout_mock`` (enable, mode dump|mock, dump_dir; roll/distributed/scheduler/
rollout_mock_mixin.py): its schedulers pickle each step's generated batch to
``<dump_dir>/<train|val>/step_<k>.pkl``, or load it in place of generating (mock), failing on a
missing step. posttrain's ``trainer.rollout_mock`` dump|replay with ``trainer.rollout_mock_dir`` does
that for the training steps (posttrain.trainer.rollout_mock), in its own file format; validation
generates as usual.

ROLL's ``max_ckpt_to_keep`` (roll/pipeline/base_pipeline.py): after each save, only the newest n
``checkpoint-<step>`` folders of every role are kept; 0 keeps all. posttrain keeps the newest n of
the actor's and of the critic's (``trainer.max_actor_ckpt_to_keep`` / ``max_critic_ckpt_to_keep``).
"""

from __future__ import annotations

from collections.abc import Mapping

from posttrain.config.dialects.checkpoints import keep_newest
from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule

KEY = "rollout_dump_dir"


def rollout_dump(ctx: Context) -> None:
    if not ctx.has(KEY):
        return
    ctx.consume(KEY)
    path = ctx.get(KEY)
    if path is None or path == "":
        ctx.drop(KEY, "null: ROLL dumps nothing")
    elif not isinstance(path, str):
        ctx.refuse(KEY, f"expected a directory path, got {path!r}", "trainer.rollout_data_dir", path)
    elif not path.startswith("/"):
        ctx.drop(KEY, "ROLL writes rollout dumps only under an absolute path (its writer is registered for paths starting "
                      "with '/'), so this relative one writes nothing; posttrain writes rollouts with trainer.rollout_data_dir")
    else:
        ctx.set("trainer.rollout_data_dir", path, KEY,
                "each step's rollouts as JSON lines in that directory, in posttrain's row layout (one row per response), "
                "not ROLL's rollout_dump_data.step_<k>.jsonl columns")


MOCK = "rollout_mock"
_MOCK_MODES = {"dump": "dump", "mock": "replay"}


def rollout_mock(ctx: Context) -> None:
    if not ctx.has(MOCK):
        return
    ctx.consume(MOCK)
    block = ctx.get(MOCK)
    if block is None or (isinstance(block, Mapping) and block.get("enable", False) is False):
        ctx.drop(MOCK, "enable false (ROLL's default): rollouts are generated")
        return
    if not isinstance(block, Mapping) or block.get("enable") is not True:
        ctx.refuse(MOCK, f"expected a mapping with enable: true|false, mode: dump|mock, dump_dir, got {block!r}", "trainer.rollout_mock", block)
        return
    mode, folder = block.get("mode", "dump"), block.get("dump_dir", "./rollout_mock_dumps")  # ROLL's defaults
    extra = sorted(set(block) - {"enable", "mode", "dump_dir"})
    if extra or mode not in _MOCK_MODES or not isinstance(folder, str) or not folder:
        why = f"{', '.join(extra)}: not fields of ROLL's RolloutMockConfig" if extra else f"expected mode dump or mock and a dump_dir path, got {mode!r}, {folder!r}"
        ctx.refuse(MOCK, why, "trainer.rollout_mock", dict(block))
        return
    how = ("each training step's rollouts and rewards written to the folder's train/ (posttrain's format, not ROLL's pickles)" if mode == "dump"
           else "each training step's rollouts read from a posttrain dump in place of generating; validation generates")
    ctx.set("trainer.rollout_mock", _MOCK_MODES[mode], MOCK, how)
    ctx.set("trainer.rollout_mock_dir", folder, MOCK, "ROLL's dump_dir")


KEEP = "max_ckpt_to_keep"


def keep_checkpoints(ctx: Context) -> None:
    keep_newest(ctx, KEEP, (0, None), "the newest checkpoints kept, for every role")


RULES: dict[str, Rule] = {
    KEEP: Rule("trainer.max_actor_ckpt_to_keep, trainer.max_critic_ckpt_to_keep", "n > 0: both; 0 (keep all): dropped", 3),
    MOCK: Rule("trainer.rollout_mock, trainer.rollout_mock_dir", "enable true: mode dump -> dump, mock -> replay (training steps; "
               "posttrain's file format), dump_dir -> rollout_mock_dir; enable false: nothing", {"enable": True, "mode": "dump", "dump_dir": "/tmp/d"}),
    KEY: Rule("trainer.rollout_data_dir", "an absolute path: each step's rollouts as JSONL there (posttrain's row layout); "
              "a relative path is dropped, as ROLL writes nothing to one", "/tmp/rollout_dump"),
}
HANDLERS = [rollout_dump, rollout_mock, keep_checkpoints]

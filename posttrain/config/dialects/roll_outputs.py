"""ROLL's ``rollout_dump_dir``: where its pipelines write each step's rollouts for inspection.

ROLL (roll/pipeline/rlvr/utils.py) writes a step's rollouts (decoded responses, scores, the prompt
columns) as ``rollout_dump_data.step_<k>.jsonl`` in that directory, and only when the path is
absolute: its one writer is registered for paths starting with ``/`` (``json_checker``), so a
relative path writes nothing. posttrain's counterpart is ``trainer.rollout_data_dir``: one JSONL
file of the step's rollouts (prompt, response, score, ...) per step, in posttrain's own row layout.
"""

from __future__ import annotations

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


RULES: dict[str, Rule] = {
    KEY: Rule("trainer.rollout_data_dir", "an absolute path: each step's rollouts as JSONL there (posttrain's row layout); "
              "a relative path is dropped, as ROLL writes nothing to one", "/tmp/rollout_dump"),
}
HANDLERS = [rollout_dump]

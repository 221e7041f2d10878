"""`task`: any built-in task of `posttrain.tasks` as a one-action environment.

``env_config: {task: sort, length: 5}`` names the task and its options (those of ``posttrain
make-data <task> --help``). `reset(seed)` draws the problem the seed picks and shows its prompt; the
one action is the model's answer, scored by the task's own scorer: the reward is the scorer's
``score``, the episode ends, and it is a success when ``acc`` is 1. So an agentic stage over this
env trains exactly what a single-turn stage over the task's files does, through the agent loop.

>>> env = TaskEnv(task="arithmetic", digits=1, ops=["+"])
>>> env.reset(seed=0)
'6+6='
>>> env.step("12")
('', 1.0, True, {'action_is_valid': True, 'success': True})
"""

from __future__ import annotations

import random
from typing import Any

from posttrain.envs.registry import register_env
from posttrain.errors import ConfigError
from posttrain.tasks import Problem, get_task


@register_env("task")
class TaskEnv:
    """One problem of a registered task per episode, answered in one action."""

    instruction = ""

    def __init__(self, task: str = "sort", **options: Any):
        try:
            self.spec = get_task(task)
            self.options = self.spec.resolve_options(options)
            self.spec.draw(random.Random(0), self.options)  # the generator checks the option values
        except ConfigError as e:  # make_env names the env_config key
            raise ValueError(e.problems[0]) from None
        self.problem: Problem | None = None

    def reset(self, seed: int) -> str:
        self.problem = self.spec.draw(random.Random(seed), self.options)
        return self.problem.prompt

    def state(self) -> str:
        return self.problem.prompt if self.problem else ""

    def expert_action(self) -> str:
        """The task's correct response."""
        assert self.problem is not None, "reset first"
        return self.problem.response

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        assert self.problem is not None, "reset first"
        result = self.spec.score(action_text, self.problem.ground_truth, None)
        return "", float(result["score"]), True, {"action_is_valid": True, "success": result.get("acc", 0.0) == 1.0}

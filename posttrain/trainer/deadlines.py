"""explorer.max_timeout and max_retry_times in a single-turn or tool-calling RL stage.

Trinity-RFT runs each task (one prompt's repeat_times responses, generated and scored by its
workflow) under ``max_timeout`` seconds; a task past it is cancelled and run again, each attempt with
the whole timeout, up to ``max_retry_times`` more times; a task that never finished gives no
experiences, so its step trains on the tasks that did. posttrain's counterpart of a task is a prompt
group: every group of a batch starts together, so a batch's deadline is its start plus
``max_timeout``. The engine stops decoding at it (`SamplingParams.deadline`, the rows it cut flagged
in `RolloutBatch.timed_out`), a group with a cut row is late, and so is every group whose scoring
ended past the deadline (the batch is scored together, so those are all the groups scored). The
late groups are generated again under a deadline of their own, with new sampling noise (their uids
get an ``r<attempt>`` suffix, which keys the noise; the rows keep the group's uid), and the groups
still late after the last retry are left out of the step. ``rollout/timed_out_groups`` counts those,
``rollout/retried_groups`` the groups generated again (a group retried twice counts twice). A step
whose every group was left out trains on nothing and skips its updates (``rollout/skipped_update``),
as Trinity-RFT's explorer writes no experiences for a batch whose tasks all failed.

An agentic stage's env groups are bounded the same way by posttrain.trainer.agentic (between turns).

explorer.over_rollout moves the first attempt's deadline earlier once enough groups have finished
(posttrain.rollout.progress). A group it cut (`RolloutBatch.over_rolled`) is dropped, not late: it is
left out of the step without a retry, as Trinity-RFT cancels the tasks still running, and counted in
``rollout/over_rollout_groups``. Retries of late groups run without it, under their own deadline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from posttrain.records import PromptBatch, RolloutBatch
from posttrain.trainer.dynamic_sampling import Round, merge_round_metrics


@dataclass
class Attempt:
    """One attempt at a batch of prompt groups: the on-time groups scored, and the late ones."""

    round: Round  # the groups that finished (generated and scored) by the deadline
    late: list[int]  # the prompts (indices into the attempt's PromptBatch) whose group did not
    dropped: int = 0  # groups over-rollout cut (explorer.over_rollout): left out, not retried


def cut_groups(batch: RolloutBatch) -> set[str]:
    """The groups (uids) with a row the deadline cut; none when the batch had no deadline.

    >>> b = dataclasses.replace(_demo(), timed_out=torch.tensor([False, True, False]))
    >>> sorted(cut_groups(b))
    ['p0']
    """
    return _flagged_groups(batch, batch.timed_out)


def over_rolled_groups(batch: RolloutBatch) -> set[str]:
    """The groups (uids) with a row over-rollout's deadline cut; none without over-rollout.

    >>> b = dataclasses.replace(_demo(), over_rolled=torch.tensor([False, False, True]))
    >>> sorted(over_rolled_groups(b))
    ['p1']
    """
    return _flagged_groups(batch, batch.over_rolled)


def _flagged_groups(batch: RolloutBatch, flags: torch.Tensor | None) -> set[str]:
    """The groups with a row `flags` (B,) marks; none when there are no flags."""
    if flags is None:
        return set()
    return {g for g, flagged in zip(batch.group_index, flags.tolist()) if flagged}


def late_prompts(uids: list[str], late_groups: set[str]) -> list[int]:
    """Indices of the prompts whose group is late, in prompt order.

    >>> late_prompts(["a", "b", "c"], {"c", "a"})
    [0, 2]
    """
    return [i for i, uid in enumerate(uids) if uid in late_groups]


def retry_prompts(prompts: PromptBatch, rows: list[int], attempt: int) -> PromptBatch:
    """The late prompts again, their uids suffixed ``r<attempt>``: a uid keys a response's sampling
    noise (posttrain.rollout.sampling), so the same uid would draw the same responses again."""
    again = prompts[rows]
    return dataclasses.replace(again, uid=[f"{uid}r{attempt}" for uid in again.uid])


def explore_with_deadline(attempt: Callable[[PromptBatch, float, bool], Attempt], prompts: PromptBatch, timeout: float, retries: int,
                          clock: Callable[[], float]) -> Round:
    """The batch's groups that finished within `timeout` seconds of their attempt's start, in at most
    1 + `retries` attempts (module docstring); `attempt(prompts, deadline, first)` generates and scores
    the prompts' groups by the wall-clock `deadline` (the first attempt with over-rollout, when it is
    on). The round's metrics count the late groups, and the dropped ones."""
    first = attempt(prompts, clock() + timeout, True)
    rounds, late, retried = [first.round], first.late, 0
    for k in range(1, retries + 1):
        if not late:
            break
        retried += len(late)
        again = retry_prompts(prompts, late, k)
        result = attempt(again, clock() + timeout, False)  # each attempt gets the whole timeout, as Trinity-RFT's do
        original = dict(zip(again.uid, prompts[late].uid))
        result.round.batch.group_index = [original[g] for g in result.round.batch.group_index]  # the group's own uid again
        rounds.append(result.round)
        late = [late[i] for i in result.late]
    kept = [r for r in rounds if len(r.batch)] or rounds[:1]  # an empty batch alone when nothing finished
    metrics = merge_round_metrics([(r.metrics, len(r.batch)) for r in kept])
    metrics.update({"rollout/timed_out_groups": float(len(late)), "rollout/retried_groups": float(retried)})
    if "rollout/over_rollout_groups" in first.round.metrics:  # over-rollout was on: the first attempt's count, not merged
        metrics["rollout/over_rollout_groups"] = float(first.dropped)
    return Round(RolloutBatch.cat([r.batch for r in kept]), torch.cat([r.scores for r in kept]),
                 [t for r in kept for t in r.texts], metrics, torch.cat([r.values for r in kept]))


def _demo() -> RolloutBatch:
    """A three-row batch of groups p0, p0, p1 (for the doctests)."""
    z = torch.zeros(3, 1)
    return RolloutBatch(z.long(), z, z.long(), z + 1, z, torch.zeros(3, dtype=torch.long), ["p0", "p0", "p1"],
                        ["d"] * 3, [None] * 3, [{}] * 3, [""] * 3)

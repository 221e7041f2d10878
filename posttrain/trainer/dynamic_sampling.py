"""DAPO dynamic sampling in the RL step (`algorithm.filter_groups`).

With `enable`, the step's exploration runs in rounds: each round takes the sampler's next batch of
`data.gen_batch_size` prompts (null: `data.train_batch_size`), generates and scores it (query filters included), and keeps the
groups whose `metric` is not the same for all their responses (posttrain.algorithms.dynamic_sampling).
Rounds go on until `data.train_batch_size` groups are kept; the first that many, in the order
generated, train and the rest are discarded, as verl's DAPO trainer does. Groups that ride on a
prompt's group (`Round.rides`: reward.self_judge's judge rows) are filtered by the same rule and
kept with the prompts the step took up, without counting towards train_batch_size. `max_num_gen_batches` > 0
bounds the rounds: still short after that many, the run stops with a `DataError` (verl raises too).

The per-response metric, as verl's DAPO trainer reads it:
- ``acc``: the reward function's ``acc`` (a dict return); a function that returns a number, or a dict
  without ``acc``, gives its score, as verl's DAPO reward manager records ``acc`` for a number;
- ``score``: the reward function's own score, before function_weight, reward model and overlong penalty;
- ``seq_reward``: the final score (verl's summed token-level scores: function, reward model, overlong
  penalty);
- ``seq_final_reward``: the same, as no KL penalty is in the reward when groups are chosen (verl's
  token-level rewards; the load-time check refuses it with use_kl_in_reward).

Every rank holds every score, so with several worker processes every rank keeps the same groups
and takes the same prompts; the sampler's position moves by every prompt batch taken, so a resumed
run continues with the prompts the uninterrupted run would have taken. A decoupled explorer runs
the same rounds for each batch it writes (`posttrain.trainer.decoupled`) and records the prompt
batches drawn through it (`Experience.drawn`), which its resume skips.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from posttrain.algorithms.dynamic_sampling import informative_groups, rows_of_groups
from posttrain.config.sections.algorithm import FilterGroupsConfig
from posttrain.errors import DataError
from posttrain.records import RolloutBatch


@dataclass
class Round:
    """One round's scored responses (after the query filters)."""

    batch: RolloutBatch
    scores: torch.Tensor  # (B,) final scores
    texts: list[str]
    metrics: dict[str, float]  # reward/..., query_filter/..., tool/... of this round
    values: torch.Tensor  # (B,) the filter metric of each response
    # groups that ride on a prompt's group (reward.self_judge's judge rows): rider uid -> the prompt's uid
    rides: dict[str, str] = field(default_factory=dict)

    def take(self, rows: list[int]) -> Round:
        index = torch.tensor(rows, dtype=torch.long)  # (B',) long even when empty
        return Round(self.batch[index], self.scores[index], [self.texts[i] for i in rows], self.metrics, self.values[index], self.rides)


def metric_values(metric: str, scores: torch.Tensor, function_scores: torch.Tensor, extra: dict[str, list[float]]) -> torch.Tensor:
    """The filter metric (B,) of each response (module docstring).

    >>> fn = torch.tensor([0.5, 1.0])
    >>> metric_values("acc", fn - 1, fn, {"acc": [float("nan"), 1.0]}).tolist()
    [0.5, 1.0]
    >>> metric_values("seq_reward", fn - 1, fn, {}).tolist()
    [-0.5, 0.0]
    """
    if metric == "acc":
        acc = torch.tensor(extra["acc"], dtype=torch.float32) if "acc" in extra else function_scores  # (B,)
        return torch.where(torch.isnan(acc), function_scores, acc)  # a sample without acc: its score
    if metric == "score":
        return function_scores
    return scores  # seq_reward, seq_final_reward


def gather_groups(explore_round: Callable[[int], Round], cfg: FilterGroupsConfig, need: int) -> tuple[Round, dict[str, float]]:
    """Rounds of `explore_round(r)` (r = 1, 2, ...) until `need` informative groups are kept;
    returns them as one round (metrics merged over every round) and the filter_groups/* metrics."""
    kept: list[Round] = []
    per_round: list[tuple[dict[str, float], int]] = []
    groups = informative = taken = rounds = filtered = 0
    while taken < need:
        if cfg.max_num_gen_batches > 0 and rounds >= cfg.max_num_gen_batches:
            raise DataError(
                f"algorithm.filter_groups: a step kept {taken} of data.train_batch_size={need} prompt groups after "
                f"{rounds} generation rounds (max_num_gen_batches={cfg.max_num_gen_batches}); the other groups' responses all "
                f"had the same {cfg.metric}: the prompts are too hard or too easy for this model. Raise max_num_gen_batches "
                "(0: no limit), lower data.train_batch_size, or use other data"
            )
        rounds += 1
        rnd = explore_round(rounds)
        every = informative_groups(rnd.batch.group_index, rnd.values, cfg.std_threshold)
        uids = [u for u in every if u not in rnd.rides]  # the prompts' groups; riders follow them below
        groups += len({g for g in rnd.batch.group_index if g not in rnd.rides})
        informative += len(uids)
        filtered += len(rnd.batch) - len(rows_of_groups(rnd.batch.group_index, every))  # responses of the groups the rule drops
        chosen = uids[: need - taken]  # the first groups in the order generated; the rest are discarded
        taken += len(chosen)
        kept.append(rnd.take(rows_of_groups(rnd.batch.group_index, chosen + _riders(rnd, every, chosen, len(chosen) < len(uids)))))
        per_round.append((rnd.metrics, len(rnd.batch)))
    out = Round(RolloutBatch.cat([r.batch for r in kept]), torch.cat([r.scores for r in kept]),
                [t for r in kept for t in r.texts], merge_round_metrics(per_round), torch.cat([r.values for r in kept]))
    metrics = {"filter_groups/num_gen_batches": float(rounds), "filter_groups/groups": float(groups),
               "filter_groups/kept_groups": float(informative), "filter_groups/trained_groups": float(taken),
               "filter_groups/filtered_count": float(filtered)}
    return out, metrics


def _riders(rnd: Round, informative: list[str], chosen: list[str], cut: bool) -> list[str]:
    """The informative riders whose prompt the step took up: every prompt of the round, or with the
    round `cut` short those up to the last chosen group (the ones after it are discarded, riders too)."""
    prompts = list(dict.fromkeys(g for g in rnd.batch.group_index if g not in rnd.rides))  # in the order generated
    taken = set(prompts[: prompts.index(chosen[-1]) + 1] if cut else prompts)  # a cut round chose one group at least
    return [u for u in informative if u in rnd.rides and rnd.rides[u] in taken]


# Metrics that count (samples, failures, groups, seconds): summed over rounds; the others are means.
_COUNTS = ("failures", "count", "groups", "dropped", "time_s")


def merge_round_metrics(per_round: list[tuple[dict[str, float], int]]) -> dict[str, float]:
    """One step's reward metrics from its rounds': counts summed, means weighted by each round's rows.

    >>> merge_round_metrics([({"reward/acc": 1.0, "reward/failures": 1.0}, 2), ({"reward/acc": 0.0, "reward/failures": 0.0}, 6)])
    {'reward/acc': 0.25, 'reward/failures': 1.0}
    """
    if len(per_round) == 1:
        return dict(per_round[0][0])
    keys = list(dict.fromkeys(k for m, _ in per_round for k in m))
    out = {}
    for key in keys:
        pairs = [(m[key], rows) for m, rows in per_round if key in m]
        if key.endswith(_COUNTS):
            out[key] = float(sum(v for v, _ in pairs))
        else:
            total = sum(rows for _, rows in pairs)
            out[key] = sum(v * rows for v, rows in pairs) / total if total else pairs[-1][0]
    return out

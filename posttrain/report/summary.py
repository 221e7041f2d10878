"""The end-of-run summary: held-out accuracy before and after RL, read from the run directory.

For any run with an RL stage that validates: "before RL" is that stage's first validation (taken
before its first step when trainer.val_before_train is on) and "after RL" its last. The decoding is
named by the stage's rollout.val_kwargs: greedy validation prints ``accuracy before RL: 27.5%``,
sampled validation ``sampled accuracy before RL (temperature 1, 4 per prompt): 9.0%``. An
evaluation-only stage (kind rl with trainer.val_only) before or after the RL stage adds its own line,
which is how the quickstart shows sampled accuracy next to greedy accuracy: RL can raise greedy
accuracy far more than sampled accuracy (shared notes "tiny-rl-recipe": 86 % vs 23 % on sort), so a
demo should show both.

Accuracy is the mean over data sources of ``val/<source>/acc/mean@n`` (every built-in task reports
exact-match `acc`); a run whose scorer reports no `acc` gets ``validation score`` lines from
``val/score/mean`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from posttrain.report.rundir import StageRun


@dataclass(frozen=True)
class Reading:
    """One validation number of the summary."""

    decoding: str  # "" for greedy, else how it samples: "temperature 1, 4 per prompt"
    when: str  # "before RL", "after RL", or "at the first validation of RL (step 40)"
    value: float
    is_accuracy: bool  # exact-match accuracy (printed as %) or a mean score

    def line(self) -> str:
        what = "accuracy" if self.is_accuracy else "validation score"
        how = f" ({self.decoding})" if self.decoding else ""
        value = f"{100 * self.value:.1f}%" if self.is_accuracy else f"{self.value:.3f}"
        return f"{'sampled ' if self.decoding else ''}{what} {self.when}{how}: {value}"


def accuracy_of(row: dict) -> tuple[float, bool] | None:
    """(value, is_accuracy) of one validation row: mean exact-match accuracy, else mean score.

    >>> accuracy_of({"val/posttrain/sort/acc/mean@1": 0.5, "val/score/mean": 0.7})
    (0.5, True)
    >>> accuracy_of({"val/score/mean": 0.7})
    (0.7, False)
    """
    accs = [v for k, v in row.items() if k.startswith("val/") and "/acc/mean@" in k and v == v]
    if accs:
        return sum(accs) / len(accs), True
    if "val/score/mean" in row and row["val/score/mean"] == row["val/score/mean"]:
        return float(row["val/score/mean"]), False
    return None


def decoding_of(stage: StageRun) -> str:
    """'' for greedy validation, else how it samples."""
    vk = stage.setting("rollout.val_kwargs", {}) or {}
    if not vk.get("do_sample", False):
        return ""
    return f"temperature {vk.get('temperature', 1.0):g}, {vk.get('n', 1)} per prompt"


def readings(stages: list[StageRun]) -> list[Reading]:
    """The summary's numbers, greedy before sampled, each before RL then after RL."""
    rl = [i for i, s in enumerate(stages) if s.kind == "rl" and not s.evaluation_only and _rl_validations(s)]
    if not rl:
        return []
    out: list[Reading] = []
    for i in rl:
        stage = stages[i]
        suffix = f" (stage {stage.name})" if len(rl) > 1 else ""
        rows = _rl_validations(stage)
        first, last = rows[0], rows[-1]
        trained_first = "timing/step_s" in first  # a validation logged with a training step
        when_first = f"at the first validation of RL (step {first['step']})" if trained_first else "before RL"
        if len(rows) > 1 or not trained_first:
            out.append(_reading(stage, first, when_first + suffix))
        if len(rows) > 1 or trained_first:
            out.append(_reading(stage, last, "after RL" + suffix))
    for i, stage in enumerate(stages):
        if stage.kind == "rl" and stage.evaluation_only and _rl_validations(stage):
            when = "before RL" if i < rl[0] else "after RL" if i > rl[-1] else f"after stage {stages[i - 1].name}"
            out.append(_reading(stage, _rl_validations(stage)[0], when))
    order = {"before": 0, "at": 1, "after": 2}
    return sorted(out, key=lambda r: (r.decoding != "", r.decoding, order.get(r.when.split()[0], 1)))


def summary_lines(stages: list[StageRun]) -> list[str]:
    """The printed lines, one per number (empty when the run has no validating RL or DPO stage)."""
    return [r.line() for r in readings(stages)] + dpo_lines(stages)


def dpo_lines(stages: list[StageRun]) -> list[str]:
    """Held-out preference accuracy and reward margin of each validating DPO stage, at its first
    and last validation. Before any update the policy equals the reference, so every margin is 0
    and accuracy (margin > 0, strictly) starts at 0 %.

    A DPO stage logs `val/dpo/accuracy` and `val/dpo/margin` (posttrain.trainer.dpo).
    """
    dpo = [s for s in stages if s.kind == "dpo"]
    out: list[str] = []
    for stage in dpo:
        rows = [r for r in stage.validations if "val/dpo/accuracy" in r]
        if len(rows) < 2:
            continue
        suffix = f" (stage {stage.name})" if len(dpo) > 1 else ""
        for when, row in (("before DPO", rows[0]), ("after DPO", rows[-1])):
            out.append(
                f"preference accuracy {when}{suffix}: {100 * row['val/dpo/accuracy']:.1f}% "
                f"(mean reward margin {row.get('val/dpo/margin', float('nan')):.3f})"
            )
    return out


def _rl_validations(stage: StageRun) -> list[dict]:
    return [r for r in stage.validations if accuracy_of(r) is not None]


def _reading(stage: StageRun, row: dict, when: str) -> Reading:
    value, is_accuracy = accuracy_of(row)  # type: ignore[misc]  # rows were filtered on this
    return Reading(decoding_of(stage), when, value, is_accuracy)

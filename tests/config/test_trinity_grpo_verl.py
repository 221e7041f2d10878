"""Trinity-RFT's grpo_verl type (GRPO with advantages computed in the trainer) is GRPO; its clipb/clipv
token filters are refused with the reason; rollout_args.logprobs of any size keeps only the sampled
token's log-prob in Trinity-RFT, which posttrain always records."""

from __future__ import annotations

from posttrain.config.dialects import translate


def run(algorithm: dict, rollout_args: dict | None = None):
    raw = {"algorithm": algorithm, "buffer": {"explorer_input": {"taskset": {"path": "d.jsonl", "rollout_args": rollout_args or {}}}}}
    native, report = translate(raw, "trinity")
    return native, {e.key: (e.status, e.reason) for e in report.entries}


def test_grpo_verl_is_grpo():
    verl, _ = run({"algorithm_type": "grpo_verl"})
    grpo, _ = run({"algorithm_type": "grpo"})
    assert verl["algorithm"] == grpo["algorithm"] and verl["algorithm"]["adv_estimator"] == "grpo"
    assert verl["actor"] == grpo["actor"]  # the same policy loss and k2 KL loss defaults
    native, _ = run({"algorithm_type": "grpo", "advantage_fn": "grpo_verl"})
    assert native["algorithm"]["adv_estimator"] == "grpo"


def test_clipb_and_clipv_are_refused_naming_the_paper():
    for fn in ("clipb", "clipv"):
        _, entries = run({"algorithm_type": "grpo_verl", "advantage_fn": fn, "advantage_fn_args": {"mu": 2.5}})
        status, reason = entries["algorithm.advantage_fn"]
        assert status == "refused" and "2602.03392" in reason and "loss mask" in reason


def test_rollout_logprobs_of_any_size_is_the_sampled_tokens():
    for value in (0, 20):
        _, entries = run({"algorithm_type": "grpo"}, {"logprobs": value})
        assert entries["buffer.explorer_input.taskset.rollout_args.logprobs"][0] == "dropped"
    _, entries = run({"algorithm_type": "grpo"}, {"logprobs": "all"})
    assert entries["buffer.explorer_input.taskset.rollout_args.logprobs"][0] == "refused"

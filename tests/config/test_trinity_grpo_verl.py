"""Trinity-RFT's grpo_verl type (GRPO with advantages computed in the trainer) is GRPO; its clipb/clipv
advantage functions are GRPO with a token filter, with Trinity's defaults; rollout_args.logprobs of any size keeps only the sampled
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


def test_clipb_and_clipv_are_grpo_with_a_token_filter():
    native, entries = run({"algorithm_type": "grpo_verl", "advantage_fn": "clipb", "advantage_fn_args": {"mu": 3.0, "epsilon": 1e-5}})
    alg = native["algorithm"]
    assert alg["adv_estimator"] == "grpo" and alg["adv_estimator_args"] == {"epsilon": 1e-5}  # GRPO's own option
    assert alg["token_filter"] == {"type": "clip_b", "mu": 3.0}
    assert entries["algorithm.advantage_fn_args.mu"][0] == "translated"
    native, _ = run({"algorithm_type": "grpo_verl", "advantage_fn": "clipv", "advantage_fn_args": {"mu": 8.5}})
    assert native["algorithm"]["token_filter"] == {"type": "clip_v", "mu": 8.5, "max_frac": 1e-4}


def test_clip_filter_defaults_follow_trinity():
    # no advantage_fn_args: Trinity's default_args; args without mu: the constructor's default (2.0 for clipv)
    native, _ = run({"algorithm_type": "grpo_verl", "advantage_fn": "clipv"})
    assert native["algorithm"]["token_filter"] == {"type": "clip_v", "mu": 8.5, "max_frac": 1e-4}
    native, _ = run({"algorithm_type": "grpo_verl", "advantage_fn": "clipv", "advantage_fn_args": {"max_frac": 0.01}})
    assert native["algorithm"]["token_filter"] == {"type": "clip_v", "mu": 2.0, "max_frac": 0.01}
    native, _ = run({"algorithm_type": "grpo_verl", "advantage_fn": "clipb"})
    assert native["algorithm"]["token_filter"] == {"type": "clip_b", "mu": 2.5}


def test_rollout_logprobs_of_any_size_is_the_sampled_tokens():
    for value in (0, 20):
        _, entries = run({"algorithm_type": "grpo"}, {"logprobs": value})
        assert entries["buffer.explorer_input.taskset.rollout_args.logprobs"][0] == "dropped"
    _, entries = run({"algorithm_type": "grpo"}, {"logprobs": "all"})
    assert entries["buffer.explorer_input.taskset.rollout_args.logprobs"][0] == "refused"

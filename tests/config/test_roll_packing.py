"""ROLL's sequence packing: padding-free forwards and, for load_balance, micro-batches by token budget."""

import pytest

from posttrain.config.dialects import translate

MEGATRON = {"strategy_args": {"strategy_name": "megatron_train", "strategy_config": {"context_parallel_size": 1}}}
BALANCE = {"algorithm": "load_balance", "max_packed_sequence_length_train": 8192, "max_packed_sequence_length_forward": 4096,
           "min_num_micro_batches_train": 2, "min_num_micro_batches_forward": 1}


def _roll(**roles):
    return translate(roles, "roll")


def test_load_balance_is_padding_free_token_budget_micro_batches_for_each_role():
    native, report = _roll(
        actor_train={**MEGATRON, "use_sequence_packing": True, "sequence_packing_args": BALANCE},
        reference={"strategy_args": {"strategy_name": "megatron_infer"}, "use_sequence_packing": True, "sequence_packing_args": BALANCE},
        critic={**MEGATRON, "use_sequence_packing": True, "sequence_packing_args": BALANCE},
    )
    assert not report.refused
    assert native["model"]["use_remove_padding"] is True
    assert (native["actor"]["use_dynamic_bsz"], native["actor"]["ppo_max_token_len_per_gpu"]) == (True, 8192)
    assert (native["rollout"]["log_prob_use_dynamic_bsz"], native["rollout"]["log_prob_max_token_len_per_gpu"]) == (True, 4096)
    assert (native["ref"]["log_prob_use_dynamic_bsz"], native["ref"]["log_prob_max_token_len_per_gpu"]) == (True, 4096)
    want = {"use_remove_padding": True, "use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 8192, "forward_max_token_len_per_gpu": 4096}
    assert {k: native["critic"][k] for k in want} == want
    assert "exact for every grouping" in report.entry("actor_train.sequence_packing_args.min_num_micro_batches_train").reason


def test_a_context_parallel_budget_is_one_device_s_share():
    cp = {"strategy_args": {"strategy_name": "megatron_train", "strategy_config": {"context_parallel_size": 2}}}
    native, _ = _roll(actor_train={**cp, "use_sequence_packing": True, "sequence_packing_args": BALANCE})
    assert native["actor"]["ppo_max_token_len_per_gpu"] == 4096 and native["rollout"]["log_prob_max_token_len_per_gpu"] == 2048


@pytest.mark.parametrize(("role", "reason", "refused"), [
    ({**MEGATRON, "use_sequence_packing": True, "sequence_packing_args": {"algorithm": "none", "max_packed_sequence_length_train": 10}},
     "algorithm none", False),
    ({"strategy_args": {"strategy_name": "fsdp2_train"}, "use_sequence_packing": True, "sequence_packing_args": BALANCE},
     "only under its megatron strategies", False),
    ({**MEGATRON, "use_sequence_packing": False, "sequence_packing_args": BALANCE}, "sequence packing off", False),
    ({**MEGATRON, "use_sequence_packing": True, "sequence_packing_args": {"algorithm": "load_balance"}}, "needs a token budget", True),
    ({**MEGATRON, "use_sequence_packing": True, "sequence_packing_args": {"algorithm": "greedy"}}, "expected none or load_balance", True),
])
def test_other_settings_are_dropped_or_refused_as_roll_reads_them(role, reason, refused):
    native, report = _roll(actor_train=role)
    entries = report.refused if refused else [e for e in report.entries if e.status == "dropped"]
    assert any(reason in e.reason for e in entries), [e.reason for e in report.entries]
    assert "actor" not in native or "use_dynamic_bsz" not in native["actor"]

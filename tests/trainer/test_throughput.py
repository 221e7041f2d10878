"""Throughput metrics of every RL step (posttrain.trainer.throughput): model FLOPs counted by hand,
tokens/s and MFU by their definitions, MFU within (0, 1], and peak memory per role."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from posttrain.models.flops import MatmulParams
from posttrain.records import RolloutBatch
from posttrain.trainer.memory import MemoryProbe
from posttrain.trainer.throughput import StepObserver
from rl_helpers import tiny_rl_files, tiny_rl_trainer


def test_matmul_params_and_flops_of_a_small_decoder_by_hand():
    config = SimpleNamespace(hidden_size=4, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                             head_dim=2, intermediate_size=8, vocab_size=10)
    p = MatmulParams.of(config)
    # per layer: q 4x4, o 4x4, k 4x2, v 4x2 = 48; MLP 3 x 4 x 8 = 96; two layers
    assert (p.body, p.head, p.attention) == (2 * (48 + 96), 40, 2 * 2 * 2)
    assert MatmulParams.of(config, head_outputs=1).head == 4  # a value head
    # sequences of 3 and 5 tokens: QK^T and AV, position i attends to i + 1 keys
    assert p.attention_flops(torch.tensor([3, 5])) == 2 * 8 * (3 * 4 + 5 * 6)
    assert p.sequence_flops(torch.tensor([3, 5]), predicted=3) == 2 * (288 * 8 + 40 * 3) + 2 * 8 * 42


def _batch(prompt_lengths: list[int], response_lengths: list[int]) -> RolloutBatch:
    """A batch whose masks hold these lengths (ids and log-probs are zeros: FLOPs count tokens only)."""
    rows, p, t = len(prompt_lengths), max(prompt_lengths), max(response_lengths)
    prompt_mask = torch.tensor([[0.0] * (p - n) + [1.0] * n for n in prompt_lengths])  # (B, P) left-padded
    response_mask = torch.tensor([[1.0] * n + [0.0] * (t - n) for n in response_lengths])  # (B, T)
    zeros = torch.zeros(rows, t)
    return RolloutBatch(
        prompt_ids=torch.zeros(rows, p, dtype=torch.long), prompt_mask=prompt_mask,
        response_ids=torch.zeros(rows, t, dtype=torch.long), response_mask=response_mask, rollout_logprobs=zeros,
        weights_version=torch.zeros(rows, dtype=torch.long), group_index=["g"] * rows, data_source=["d"] * rows,
        ground_truth=[""] * rows, extra_info=[{}] * rows, raw_prompt=[""] * rows,
    )


def test_tokens_and_flops_of_each_phase_by_hand():
    observer = object.__new__(StepObserver)  # only what `_work` reads
    observer.policy, observer.critic = MatmulParams(body=10, head=2, attention=1), MatmulParams(body=5, head=1, attention=1)
    observer.epochs = {"update_actor": 2, "update_critic": 3}
    observer.actor = SimpleNamespace(recomputed_last=False)
    batch = _batch([2, 3], [1, 2])  # rows of 3 and 5 tokens, 3 of them predicted
    policy = 2 * (10 * 8 + 2 * 3) + 2 * 1 * (3 * 4 + 5 * 6)  # 172 + 84
    critic = 2 * (5 * 8 + 1 * 3) + 84
    seconds = dict.fromkeys(["gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "sync"], 1.0)
    tokens, flops = observer._work(seconds, batch, batch)
    assert tokens == {"gen": 3, "reward": 3, "ref": 8, "values": 8, "update_actor": 16, "update_critic": 24}
    assert flops == {"gen": policy, "ref": policy, "values": critic, "update_actor": 3 * policy * 2, "update_critic": 3 * critic * 3}
    observer.actor.recomputed_last = True  # the old log-probs were recomputed: one more forward
    assert observer._work(seconds, batch, batch)[1]["old_log_prob"] == policy
    del seconds["ref"], seconds["values"], seconds["update_critic"]  # phases that did not run count nothing
    assert set(observer._work(seconds, batch, batch)[1]) == {"gen", "old_log_prob", "update_actor"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_rl_files(tmp_path_factory.mktemp("throughput"))


def _logged(files, *overrides: str, run: str) -> list[dict]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tiny_rl_trainer(files, "trainer.total_training_steps=2", "trainer.logger=[jsonl]", *overrides, run=run).fit()
    finally:
        torch.set_num_threads(threads)
    rows = [json.loads(line) for line in (Path(files[0]) / run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "timing/step_s" in r]  # the training steps (not the step-0 validation row)


def test_mfu_is_within_0_and_1_and_tokens_per_second_follow_their_definition(files):
    rows = _logged(files, "algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=4", "actor.ppo_epochs=2", "actor.use_kl_loss=true",
                   run="gae")
    for m in rows:
        mfu = {k: v for k, v in m.items() if k.startswith("perf/mfu")}
        assert {"perf/mfu", "perf/mfu_by_phase/gen", "perf/mfu_by_phase/ref", "perf/mfu_by_phase/values", "perf/mfu_by_phase/update_critic", "perf/mfu_by_phase/update_actor"} <= set(mfu)
        assert all(0 < v <= 1 for v in mfu.values()), mfu
        assert m["perf/peak_tflops"] > 0
        rows_b = 8  # 4 prompts x 2 responses
        tokens = rows_b * (m["prompt_length/mean"] + m["response_length/mean"])
        assert m["perf/tokens_per_s_by_phase/update_actor"] * m["timing/update_actor_s"] == pytest.approx(2 * tokens)  # 2 epochs
        assert m["perf/tokens_per_s_by_phase/values"] * m["timing/values_s"] == pytest.approx(tokens)
        assert m["perf/tokens_per_s_by_phase/gen"] * m["timing/gen_s"] == pytest.approx(rows_b * m["response_length/mean"])
        roles = {k.rpartition("/")[2] for k in m if k.startswith("perf/peak_memory_gb_by_role/")}
        assert roles == {"rollout", "reward", "actor", "ref", "critic", "trainer"}
        assert all(0.05 < m[f"perf/peak_memory_gb_by_role/{r}"] <= m["perf/peak_memory_gb"] for r in roles)
        # no metric is also a folder of others (mlflow's file store keeps each metric as a file)
        assert not [k for k in m if any(other.startswith(k + "/") for other in m)]


def test_reused_old_log_probs_count_no_forward(files):
    """auto reuse: step 1 checks the rollout's log-probs against a recomputation, step 2 reuses them."""
    first, second = _logged(files, run="reuse")
    assert "perf/mfu_by_phase/old_log_prob" in first and "perf/tokens_per_s_by_phase/old_log_prob" in first
    assert "perf/mfu_by_phase/old_log_prob" not in second and "perf/tokens_per_s_by_phase/old_log_prob" not in second
    never = _logged(files, "actor.reuse_rollout_logprobs=never", run="never")
    assert all("perf/mfu_by_phase/old_log_prob" in m for m in never)


def test_the_memory_probe_sees_a_phase_peak_that_is_gone_by_its_end():
    probe = MemoryProbe(torch.device("cpu"))
    assert probe.exact  # Linux: the high-water mark can be reset
    probe.begin()
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
    del block
    peak = probe.end()
    assert peak - probe.snapshot()["rss_bytes"] >= 48 * 2**20
    probe.begin()
    assert probe.end() < peak - 48 * 2**20  # a new phase starts from the current resident set

"""Decoding shards of a batch on several threads (`decode_workers`): rows come back in order with
the same greedy tokens and exact log-probs, runs are reproducible, and torch's thread count is
restored afterwards."""

from __future__ import annotations

import threading

import pytest
import torch

from posttrain.models.logprobs import batch_logprobs
from posttrain.rollout import HFEngine, SamplingParams
from posttrain.rollout.hf_engine import auto_decode_workers
from test_hf_engine import PAD, PROMPTS, prompt_batch


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("share", [False, True])
def test_greedy_rows_equal_one_worker_in_order(tiny_lm, lean, share):
    # 3 prompts x 3 = 9 rows over 2 workers: shards of 5 and 4 rows cut the middle group in two.
    params = SamplingParams(do_sample=False, n=3, max_new_tokens=10)
    outs = {}
    for workers in (1, 2):
        engine = HFEngine(
            tiny_lm, eos_token_ids=[7], pad_token_id=PAD, copy_weights=False, decode_workers=workers,
            lean_decode=lean, share_prompt_prefill=share,
        )
        assert engine.workers_for(9) == workers
        outs[workers] = engine.generate(prompt_batch(), params, expected_version=0)
    one, two = outs[1], outs[2]
    assert two.group_index == ["u0"] * 3 + ["u1"] * 3 + ["u2"] * 3 == one.group_index
    assert two.ground_truth == one.ground_truth
    assert torch.equal(two.prompt_ids, one.prompt_ids)
    width = max(one.response_ids.shape[1], two.response_ids.shape[1])
    assert torch.equal(two.response_mask.sum(1), one.response_mask.sum(1))
    assert one.response_ids[:, :width].tolist() == two.response_ids[:, :width].tolist()
    torch.testing.assert_close(two.rollout_logprobs, one.rollout_logprobs, atol=1e-5, rtol=0)


def test_sampled_shards_are_exact_reproducible_and_restore_threads(tiny_lm, two_threads):
    params = SamplingParams(temperature=1.0, n=8, max_new_tokens=12)
    seen_threads = []

    def run(seed: int, workers: int = 2):
        engine = HFEngine(tiny_lm, eos_token_ids=[3], pad_token_id=PAD, seed=seed, decode_workers=workers, lean_decode=False)
        engine.model.get_decoder().register_forward_pre_hook(  # the engine's own copy of the model
            lambda m, a: seen_threads.append((threading.current_thread().name, torch.get_num_threads()))
        )
        return engine.generate(prompt_batch(), params, expected_version=0), engine

    out, engine = run(4)
    assert torch.get_num_threads() == 2  # restored after the workers ran with one thread each
    names = {name for name, _ in seen_threads}
    assert len(names) == 2 and all(name.startswith("posttrain-decode") for name in names)
    assert {n for _, n in seen_threads} == {1}
    # Log-probs of every shard are the actor's; the rows of a prompt stay adjacent.
    torch.testing.assert_close(batch_logprobs(tiny_lm, out).logprobs, out.rollout_logprobs, atol=1e-5, rtol=0)
    assert out.group_index == [f"u{i}" for i in range(3) for _ in range(8)]
    # Keyed noise: the same rows sample the same tokens on 1 thread as on 2 shards, and again.
    one, _ = run(4, workers=1)
    assert torch.equal(one.response_ids, out.response_ids)
    torch.testing.assert_close(one.rollout_logprobs, out.rollout_logprobs, atol=1e-5, rtol=0)
    assert torch.equal(engine.generate(prompt_batch(), params, expected_version=0).response_ids, out.response_ids)


def test_auto_workers_follow_threads_and_rows(two_threads, tiny_lm):
    cpu = torch.device("cpu")
    assert auto_decode_workers(cpu, 64) == 2
    assert auto_decode_workers(cpu, 16) == 2
    assert auto_decode_workers(cpu, 15) == 1  # fewer than 8 rows a thread
    assert auto_decode_workers(torch.device("cuda"), 64) == 1
    torch.set_num_threads(1)
    assert auto_decode_workers(cpu, 64) == 1
    engine = HFEngine(tiny_lm, pad_token_id=PAD, decode_workers=4)
    assert engine.workers_for(64) == 4 and engine.workers_for(3) == 3
    with pytest.raises(ValueError, match="decode_workers must be >= 1"):
        HFEngine(tiny_lm, pad_token_id=PAD, decode_workers=0)


@pytest.mark.parametrize("value", ["null", "3"])
def test_config_key_reaches_the_engine(tmp_path, value):
    from posttrain.config import derive, load_config
    from posttrain.models.loading import tokenizer_from_config
    from posttrain.models.tiny import make_tiny_model
    from posttrain.trainer.rl_build import build_roles

    model_dir = make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=2)
    cfg = load_config(None, [f"model.path={model_dir}", f"rollout.engine_kwargs.hf.decode_workers={value}"])
    roles = build_roles(cfg, derive(cfg, 64), tokenizer_from_config(cfg.model))
    assert roles.engine.decode_workers == (None if value == "null" else 3)


def test_config_refuses_zero_workers():
    from posttrain.config import load_config
    from posttrain.errors import ConfigError

    with pytest.raises(ConfigError, match="rollout.engine_kwargs.hf.decode_workers"):
        load_config(None, ["rollout.engine_kwargs.hf.decode_workers=0"])

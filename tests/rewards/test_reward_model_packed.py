"""reward.reward_model.use_remove_padding: packed texts score as the padded batch does."""

import logging

import pytest
import torch
from transformers import Qwen2ForSequenceClassification

from posttrain.models.tiny import build_tiny_tokenizer, make_tiny_config, make_tiny_model
from posttrain.rewards import RewardModelScorer


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    """A tiny random Qwen2 sequence classifier with the character tokenizer."""
    path = make_tiny_model(tmp_path_factory.mktemp("rm"), layers=2, hidden=32, heads=4, max_position=128)
    config = make_tiny_config(layers=2, hidden=32, heads=4, kv_heads=2, vocab_size=len(build_tiny_tokenizer()), max_position=128)
    config.num_labels = 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForSequenceClassification(config)
    with torch.no_grad():
        model.score.weight.mul_(100.0)  # spread the scores so the comparison is not trivially close
    model.save_pretrained(path)
    return str(path)


def test_packed_texts_score_as_the_padded_batch(rm_dir):
    padded = RewardModelScorer(rm_dir, micro_batch_size=4)
    pad = padded.tokenizer.pad_token
    # lengths 31, 2, 23 and a text ending in the pad token, which HF's pooling skips (it scores "d")
    texts = ["<|im_start|>user\n1+2<|im_end|>\n3", "ab", "a longer response text!", "cd" + pad]
    packed = RewardModelScorer(rm_dir, micro_batch_size=4, remove_padding=True)
    rows = []
    packed.model.base_model.register_forward_pre_hook(lambda m, a, kw: rows.append(kw["input_ids"].shape), with_kwargs=True)
    want, got = padded.score_texts(texts), packed.score_texts(texts)
    assert packed.remove_padding and len(rows) == 1 and rows[0][0] < len(texts)  # fewer rows than texts: packed
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)
    assert want.std() > 0.1  # the texts really score differently
    truncated = RewardModelScorer(rm_dir, micro_batch_size=4, max_length=8)
    torch.testing.assert_close(RewardModelScorer(rm_dir, micro_batch_size=4, max_length=8, remove_padding=True).score_texts(texts),
                               truncated.score_texts(texts), atol=1e-4, rtol=1e-5)


def test_a_model_without_a_score_head_scores_padded_and_says_why(rm_dir, caplog):
    scorer = RewardModelScorer(rm_dir)
    scorer.model.score = torch.nn.Identity()  # another head than transformers' sequence classifiers have
    with caplog.at_level(logging.WARNING, logger="posttrain.rewards.reward_model"):
        assert not scorer._packs()
    assert "use_remove_padding: Qwen2ForSequenceClassification has no `score` head; scoring padded batches" in caplog.text


def test_the_key_reaches_the_reward_stage_s_scorer(rm_dir):
    from posttrain.config import load_config
    from posttrain.models.loading import load_tokenizer
    from posttrain.trainer.rewarding import RewardStage

    def scorer(*overrides):
        cfg = load_config(None, ["reward.reward_model.enable=true", f"reward.reward_model.path={rm_dir}", *overrides])
        return RewardStage(cfg, load_tokenizer(rm_dir)).reward_model

    assert scorer("reward.reward_model.use_remove_padding=true").remove_padding
    assert not scorer().remove_padding  # verl's default: padded batches

"""The reward stage's reward-model input: the conversation in the reward model's own chat template
when the prompts keep their raw messages (data.return_raw_chat), else prompt text + response."""

from __future__ import annotations

import torch

from knob_harness import make_reward_model
from posttrain.config import load_config
from posttrain.models.tiny import make_tiny_model
from posttrain.records import RolloutBatch
from posttrain.rewards import RewardModelScorer
from posttrain.trainer.rewarding import RewardStage

CHAT = [{"role": "user", "content": ":321="}]


def _batch(tokenizer, raw_chat) -> RolloutBatch:
    prompt = tokenizer.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    p_ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])  # (1, P)
    r_ids = torch.tensor([tokenizer("123", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]])  # (1, T)
    return RolloutBatch(
        prompt_ids=p_ids, prompt_mask=torch.ones(p_ids.shape), response_ids=r_ids, response_mask=torch.ones(r_ids.shape),
        rollout_logprobs=torch.zeros(r_ids.shape), weights_version=torch.zeros(1, dtype=torch.long), group_index=["u"],
        data_source=["posttrain/sort"], ground_truth=["123"], extra_info=[{}], raw_prompt=[None], raw_chat=raw_chat,
    )


def test_the_reward_model_reads_the_conversation_in_its_own_template_when_raw_chat_is_kept(tmp_path):
    policy = make_tiny_model(tmp_path / "policy", layers=1, hidden=32, heads=4)
    make_reward_model(tmp_path / "rm")
    cfg = load_config(None, [f"model.path={policy}", "reward.reward_model.enable=true", f"reward.reward_model.path={tmp_path / 'rm'}"])
    stage = RewardStage(cfg, RewardModelScorer(str(tmp_path / "rm")).tokenizer)
    scorer = stage.reward_model
    plain, chat = _batch(stage.tokenizer, None), _batch(stage.tokenizer, [CHAT])
    texts = stage.decode(plain)
    assert texts == ["123<|im_end|>"]
    prompt = stage.tokenizer.decode(plain.prompt_ids[0].tolist(), skip_special_tokens=False)
    torch.testing.assert_close(stage._reward_model_scores(plain, texts), scorer.score_texts([prompt + "123<|im_end|>"]))
    by_template = scorer.score_conversations([CHAT], ["123"])  # the template closes the assistant turn itself
    torch.testing.assert_close(stage._reward_model_scores(chat, texts), by_template)
    assert not torch.allclose(by_template, scorer.score_texts([prompt + "123<|im_end|>"]))
    stage.close()


def test_a_reward_function_reads_the_raw_chat_from_extra_info_when_it_is_kept(tmp_path):
    policy = make_tiny_model(tmp_path / "policy", layers=1, hidden=32, heads=4)
    (tmp_path / "reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    chat = (extra_info or {}).get('raw_chat')\n"
        "    return 1.0 if chat and chat[-1]['content'] == ':321=' else 0.0\n"
    )
    cfg = load_config(None, [f"model.path={policy}", f"reward.custom_reward_function.path={tmp_path / 'reward.py'}"])
    from posttrain.models.loading import load_tokenizer

    stage = RewardStage(cfg, load_tokenizer(str(policy)))
    for raw_chat, expected in ((None, 0.0), ([CHAT], 1.0)):
        batch = _batch(stage.tokenizer, raw_chat)
        scores, _, _ = stage.score(batch, stage.decode(batch))
        assert scores.tolist() == [expected]
    assert batch.extra_info == [{}]  # the batch's own extra_info is left as it was
    stage.close()

"""The reward stage's reward-model input: the conversation re-rendered in the reward model's own chat
template with reward.reward_model.input_tokenizer, else the policy's prompt text + response; and the
raw chat a reward function reads (data.return_raw_chat)."""

from __future__ import annotations

import pytest
import torch

from knob_harness import make_reward_model
from posttrain.config import load_config
from posttrain.errors import ConfigError, ModelError
from posttrain.models.tiny import make_tiny_model
from posttrain.records import RolloutBatch
from posttrain.rewards import RewardModelScorer
from posttrain.trainer.rewarding import RewardStage, input_tokenizer

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


# The reward model's own chat template, unlike the policy's ChatML: "role: content" lines.
RM_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"


def _stage(tmp_path, *overrides):
    """A reward stage with a reward model whose chat template is RM_TEMPLATE; the texts it is fed
    are recorded in stage.fed."""
    policy = tmp_path / "policy"
    if not policy.exists():
        make_tiny_model(policy, layers=1, hidden=32, heads=4)
        make_reward_model(tmp_path / "rm")
        (tmp_path / "rm" / "chat_template.jinja").write_text(RM_TEMPLATE)
    cfg = load_config(None, [f"model.path={policy}", "reward.reward_model.enable=true", f"reward.reward_model.path={tmp_path / 'rm'}", *overrides])
    stage = RewardStage(cfg, RewardModelScorer(str(policy)).tokenizer)
    stage.fed = []
    score_texts = stage.reward_model.score_texts
    stage.reward_model.score_texts = lambda texts: (stage.fed.extend(texts), score_texts(texts))[1]
    return stage


def test_input_tokenizer_re_renders_the_conversation_in_the_reward_model_s_own_template(tmp_path):
    """verl's template switch: with input_tokenizer the reward model reads the raw chat plus the
    decoded response (eos dropped) in its own template; without, the policy's ChatML rendering."""
    plain = _stage(tmp_path, "data.return_raw_chat=true")
    batch = _batch(plain.tokenizer, [CHAT])
    texts = plain.decode(batch)
    assert texts == ["123<|im_end|>"]
    policy_scores = plain._reward_model_scores(batch, texts)
    assert plain.fed == ["<|im_start|>user\n:321=<|im_end|>\n<|im_start|>assistant\n123<|im_end|>"]
    switched = _stage(tmp_path, "data.return_raw_chat=true", f"reward.reward_model.input_tokenizer={tmp_path / 'policy'}")
    rm_scores = switched._reward_model_scores(batch, texts)
    assert switched.fed == ["user: :321=\nassistant: 123\n"]  # the reward model's rendering, by hand
    torch.testing.assert_close(rm_scores, switched.reward_model.score_texts(["user: :321=\nassistant: 123\n"]))
    assert not torch.allclose(rm_scores, policy_scores)
    for stage in (plain, switched):
        stage.close()


def test_input_tokenizer_needs_the_raw_chat_and_an_existing_directory(tmp_path):
    make_reward_model(tmp_path / "rm")
    keys = ["reward.reward_model.enable=true", f"reward.reward_model.path={tmp_path / 'rm'}"]
    with pytest.raises(ConfigError, match="input_tokenizer re-renders .* set data.return_raw_chat: true"):
        load_config(None, [*keys, f"reward.reward_model.input_tokenizer={tmp_path / 'rm'}"])
    cfg = load_config(None, [*keys, "data.return_raw_chat=true", f"reward.reward_model.input_tokenizer={tmp_path / 'nothing'}"])
    with pytest.raises(ModelError, match="^reward.reward_model.input_tokenizer: tokenizer path .*nothing"):
        input_tokenizer(cfg)


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


def test_function_weight_zero_with_a_reward_model_does_not_call_the_function(tmp_path):
    """verl's rule (a reward model's score is the reward; the function is not called): a data source
    no scorer knows trains with function_weight 0, and the scores are the reward model's."""
    stage = _stage(tmp_path, "reward.function_weight=0")
    batch = _batch(stage.tokenizer, None)
    batch.data_source = ["Dahoas/full-hh-rlhf"]  # no built-in scorer: calling the function would raise
    texts = stage.decode(batch)
    scores, metrics, _ = stage.score(batch, texts)
    torch.testing.assert_close(scores, stage.reward_model.score_texts(stage.fed[:1]))
    assert metrics["reward/rm_score"] == pytest.approx(float(scores[0]))
    stage.close()
    weighted = _stage(tmp_path, "reward.function_weight=0.5")  # any other weight calls the function
    with pytest.raises(Exception, match="no built-in scorer for data_source 'Dahoas/full-hh-rlhf'"):
        weighted.score(batch, texts)
    weighted.close()

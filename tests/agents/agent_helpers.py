"""A scripted policy behind posttrain's agent endpoint, for the built-in agent functions' tests."""

from __future__ import annotations

import asyncio
import json

import torch

from posttrain.config.load import load_config
from posttrain.models.tokenizer import build_tiny_tokenizer
from posttrain.records import RolloutBatch
from posttrain.rollout.agent_endpoint import AgentEndpoint, PolicySampling
from posttrain.rollout.base import SamplingParams
from posttrain.trainer.agent_fn import agent_parsing


def call(name, arguments):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


class ScriptedPolicy:
    """Answers the i-th engine call with texts[i] (the last one once they run out), keeping each prompt."""

    device = torch.device("cpu")
    weights_version = 0

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.prompts, self.params = tokenizer, list(texts), [], []
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def generate(self, prompts, params, *, expected_version, seed=None):
        self.prompts.append(self.tokenizer.decode(prompts.input_ids[0]))
        self.params.append(params)
        text = self.texts[min(len(self.prompts), len(self.texts)) - 1]
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.eos]
        B, T = len(prompts) * params.n, len(ids)
        return RolloutBatch(
            prompt_ids=prompts.input_ids.repeat(params.n, 1), prompt_mask=prompts.attention_mask.repeat(params.n, 1),
            response_ids=torch.tensor([ids] * B), response_mask=torch.ones(B, T), rollout_logprobs=torch.full((B, T), -0.5),
            weights_version=torch.zeros(B, dtype=torch.long), group_index=["u"] * B, data_source=[""] * B,
            ground_truth=[None] * B, extra_info=[{}] * B, raw_prompt=[""] * B,
        )


def scripted_episode(agent, texts, row, log_requests=False, **kwargs):
    """(the function's result, the recorded calls, the policy) of one episode against a scripted policy."""
    tokenizer = build_tiny_tokenizer()
    policy = ScriptedPolicy(tokenizer, texts)
    endpoint = AgentEndpoint(tokenizer, "policy", parsing=agent_parsing(load_config(None, [])), log_requests=log_requests)
    endpoint.set_policy(PolicySampling(lambda p, sp: policy.generate(p, sp, expected_version=0), 0, SamplingParams(max_new_tokens=400), 4000))
    record = endpoint.open("e")
    try:
        result = asyncio.run(agent(endpoint.base_url("e"), row, **kwargs))
    finally:
        endpoint.close("e")
        endpoint.shutdown()
    assert record.refused == []  # tool_choice "required" was asked as "auto": the endpoint refused nothing
    return result, record.calls, policy

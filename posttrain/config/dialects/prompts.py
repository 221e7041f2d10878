"""System prompts that foreign workflows add on their own, shipped here by name so a translated config
says what its prompts hold.

``R1_SYSTEM_PROMPT`` is the training template of DeepSeek-R1-Zero (DeepSeek-AI 2025, "DeepSeek-R1:
Incentivizing Reasoning Capability in LLMs via Reinforcement Learning", arXiv:2501.12948, Table 1):
the instruction to reason inside ``<think>`` tags and answer inside ``<answer>`` tags. The paper writes
it as one paragraph followed by ``User: prompt. Assistant:``; here it is the system message of a chat
prompt (the user turn and the assistant header come from the chat template), with the two tag
examples on lines of their own and a closing newline, which is how Trinity-RFT's ``math_workflow``
lays it out: the same characters give the same tokens.
"""

from __future__ import annotations

R1_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> "
    "</answer> tags, respectively, i.e.,\n"
    "<think> reasoning process here </think>\n"
    "<answer> answer here </answer>.\n"
)

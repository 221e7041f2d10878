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

# Trinity-RFT's math_boxed_workflow: its system prompt when the taskset gives none, and the one it
# uses with workflow_args.with_think (an R1-style reasoning block before a boxed answer).
BOXED_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
BOXED_THINK_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves MATH problems. You should first thinks about the reasoning "
    "process in mind and then provides the user with the answer. You should present your reasoning process "
    "using the format: <think>\n ...your reasoning process here... </think>\n first. You should always "
    "include your final answer in \\boxed{} as closed-form results."
)
# math_boxed_workflow's prompt for a base model (workflow_args.use_base): plain text, no chat
# template, ``System:`` + the system prompt + ``\nUser:\n`` + the question + ``\nAssistant:\n``
# (without a system prompt it starts at ``User:``). Written as a chat template (data.chat_template)
# so posttrain's prompt path renders it; the tokenizer's BOS text comes first when it has one, as the
# inference engine's tokenisation of a text prompt adds it.
# The newlines are Jinja expressions: chat templates render with trim_blocks (a newline right after
# a tag is dropped) and without keep_trailing_newline.
BASE_MODEL_TEMPLATE = (
    "{% if bos_token %}{{ bos_token }}{% endif %}"
    "{% if messages[0]['role'] == 'system' and messages[0]['content'] %}System:{{ messages[0]['content'] + '\\n' }}{% endif %}"
    "{{ 'User:\\n' }}{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"
    "{{ '\\nAssistant:\\n' }}"
)

# Trinity-RFT's on_policy_distill_math_workflow (Qwen2.5-Math's evaluation prompt): this system
# message, and this instruction after every question (data.user_suffix).
QWEN_MATH_SYSTEM_PROMPT = "You are a helpful assistant."
QWEN_MATH_USER_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."

"""An agent function for `rollout.agent.function` (examples/agent_function.yaml; docs/agentic.md, "Agent functions").

posttrain calls `run(base_url, row)` once per episode: `base_url` is an OpenAI-compatible endpoint served
by the policy being trained (every call made to it becomes a training row), `row` the task row with all
its columns. The agent drafts an answer, is shown its draft and asked for the final one, and is rewarded
by how many of the sorted digits the final answer has in place. The standard library stands in for an
OpenAI client; with the `openai` package the same calls read:

    client = openai.OpenAI(base_url=base_url, api_key="unused")
    draft = client.chat.completions.create(model="policy", messages=messages, max_tokens=8).choices[0].message.content
"""

from __future__ import annotations

import json
import urllib.request


def chat(base_url: str, messages: list[dict], max_tokens: int) -> str:
    body = json.dumps({"model": "policy", "messages": messages, "max_tokens": max_tokens}).encode()
    request = urllib.request.Request(f"{base_url}/chat/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())["choices"][0]["message"]["content"] or ""


def run(base_url: str, row: dict) -> dict:
    question = row["prompt"][-1]["content"]  # e.g. ":55369=" (sort the digits)
    messages = [{"role": "user", "content": question}]
    draft = chat(base_url, messages, max_tokens=8)
    messages += [{"role": "assistant", "content": draft}, {"role": "user", "content": question}]  # "again, final answer"
    final = chat(base_url, messages, max_tokens=8).strip()
    truth = row["reward_model"]["ground_truth"]
    in_place = sum(a == b for a, b in zip(final, truth)) / len(truth)
    return {"reward": in_place - 0.1 * (len(final) != len(truth)), "exact": float(final == truth), "draft_exact": float(draft.strip() == truth)}

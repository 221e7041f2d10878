"""Agent-function episodes per second with the endpoint's calls batched or served one at a time.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/agent_function_throughput.py --threads 2

A random tiny Qwen2 (hidden 128, 2 layers, 4 heads) under posttrain's HFEngine; an agent function
(plain, in a thread per episode, as a user's would be) makes `--calls` chat completions per
episode over HTTP (each `--max-tokens` tokens, EOS ignored: equal work), its second call holding
the first answer. `--episodes` episodes run at `rollout.agent.max_concurrency` 1, 4 and 16, first
with the endpoint serving one call per engine call (`max_batch=1`, how it served them before
batching), then batched (the default gathering window). Prints episodes/s and calls/s of each
(the best of `--repeats` runs) and the mean rows per engine call.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from posttrain.models.tiny import make_tiny_model  # noqa: E402
from posttrain.models.tokenizer import build_tiny_tokenizer  # noqa: E402
from posttrain.rollout import HFEngine  # noqa: E402
from posttrain.rollout.agent_endpoint import AgentEndpoint, PolicySampling  # noqa: E402
from posttrain.rollout.agent_fn import AgentLimits, AgentTask, run_agent_episodes  # noqa: E402
from posttrain.rollout.base import SamplingParams  # noqa: E402

CALLS, MAX_TOKENS = 2, 16


def post(base_url: str, body: dict) -> dict:
    request = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def agent(base_url: str, row: dict) -> float:
    messages = [{"role": "user", "content": row["question"]}]
    for _ in range(CALLS):
        answer = post(base_url, {"model": "policy", "messages": messages, "max_tokens": MAX_TOKENS})
        messages += [{"role": "assistant", "content": answer["choices"][0]["message"]["content"]}, {"role": "user", "content": "go on"}]
    return 1.0


def run(engine: HFEngine, tokenizer, episodes: int, concurrency: int, max_batch: int | None) -> tuple[float, float]:
    """(seconds, rows per engine call) of `episodes` episodes."""
    rows = []

    def generate(prompts, params):
        rows.append(len(prompts) * params.n)
        return engine.generate(prompts, params, expected_version=0)

    endpoint = AgentEndpoint(tokenizer, "policy", max_batch=max_batch)
    endpoint.set_policy(PolicySampling(generate, 0, SamplingParams(temperature=1.0, max_new_tokens=MAX_TOKENS, ignore_eos=True), 1024))
    tasks = [AgentTask(f"g{i}", 0, {"question": f"what is {i} plus {i + 1}?"}, i) for i in range(episodes)]
    try:
        start = time.perf_counter()
        run_agent_episodes(agent, "bench:agent", tasks, endpoint, AgentLimits(max_concurrency=concurrency), "e")
        return time.perf_counter() - start, sum(rows) / len(rows)
    finally:
        endpoint.shutdown()


def main() -> None:
    global CALLS, MAX_TOKENS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--calls", type=int, default=CALLS)
    ap.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    args = ap.parse_args()
    CALLS, MAX_TOKENS = args.calls, args.max_tokens
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    tokenizer = build_tiny_tokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        model = AutoModelForCausalLM.from_pretrained(make_tiny_model(Path(tmp), layers=2, hidden=128, heads=4)).eval()
    engine = HFEngine(model, pad_token_id=tokenizer.pad_token_id, eos_token_ids=[], tokenizer=tokenizer)
    run(engine, tokenizer, 4, 4, None)  # warm-up
    print(f"{args.episodes} episodes x {CALLS} calls x {MAX_TOKENS} tokens, torch threads {args.threads}")
    print(f"{'concurrency':>11} {'mode':>13} {'episodes/s':>10} {'calls/s':>8} {'rows/call':>9}")
    for concurrency in args.concurrency:
        for mode, cap in (("one at a time", 1), ("batched", None)):
            best, rows = min(run(engine, tokenizer, args.episodes, concurrency, cap) for _ in range(args.repeats))
            print(f"{concurrency:>11} {mode:>13} {args.episodes / best:>10.2f} {args.episodes * CALLS / best:>8.2f} {rows:>9.1f}", flush=True)


if __name__ == "__main__":
    main()

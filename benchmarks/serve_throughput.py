"""Requests per second of `posttrain serve`'s endpoint, one request per engine call or batched.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/serve_throughput.py --threads 2

A random tiny Qwen2 (hidden 128, 2 layers, 4 heads) under posttrain's HFEngine behind
posttrain.rollout.server's ChatService and HTTP server. `--concurrency` clients (threads, each a
plain HTTP client posting one chat completion after another) send `--requests` requests in all,
each `--max-tokens` tokens (no EOS: equal work), unseeded at temperature 1. Each concurrency runs
first with the service answering one request per engine call (no batch window, how `posttrain
serve` served before batching), then batched (the serve commands' window). Prints requests/s (the
best of `--repeats` runs) and the mean rows per engine call.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from posttrain.models.tiny import make_tiny_model  # noqa: E402
from posttrain.models.tokenizer import build_tiny_tokenizer  # noqa: E402
from posttrain.rollout import HFEngine  # noqa: E402
from posttrain.rollout.server import BATCH_WINDOW_S, ChatService, make_server  # noqa: E402


class Counting:
    """The engine, with the rows of each generate call counted."""

    def __init__(self, engine: HFEngine):
        self.engine, self.rows, self.eos_token_ids = engine, [], engine.eos_token_ids

    @property
    def weights_version(self) -> int:
        return self.engine.weights_version

    def generate(self, prompts, params, *, expected_version):
        self.rows.append(len(prompts) * params.n)
        return self.engine.generate(prompts, params, expected_version=expected_version)


def post(port: int, body: dict) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def run(engine: HFEngine, tokenizer, requests: int, concurrency: int, window: float | None, max_tokens: int) -> tuple[float, float]:
    """(seconds, rows per engine call) of `requests` requests from `concurrency` clients."""
    counting = Counting(engine)
    server = make_server(ChatService(counting, tokenizer, "policy", batch_window=window), "127.0.0.1", 0)
    server.socket.listen(1024)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    queue = iter(range(requests))
    lock = threading.Lock()

    def client() -> None:
        while True:
            with lock:
                i = next(queue, None)
            if i is None:
                return
            post(port, {"model": "policy", "messages": [{"role": "user", "content": f"what is {i} plus {i + 1}?"}], "max_tokens": max_tokens})

    try:
        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            for f in [pool.submit(client) for _ in range(concurrency)]:
                f.result()
        return time.perf_counter() - start, sum(counting.rows) / len(counting.rows)
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    tokenizer = build_tiny_tokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        model = AutoModelForCausalLM.from_pretrained(make_tiny_model(Path(tmp), layers=2, hidden=128, heads=4)).eval()
    if torch.cuda.is_available():
        model = model.to("cuda")
    engine = HFEngine(model, pad_token_id=tokenizer.pad_token_id, eos_token_ids=[], tokenizer=tokenizer)
    run(engine, tokenizer, 8, 4, BATCH_WINDOW_S, args.max_tokens)  # warm-up
    print(f"{args.requests} requests x {args.max_tokens} tokens, torch threads {args.threads}, "
          f"{'cuda' if torch.cuda.is_available() else 'cpu'}")
    print(f"{'concurrency':>11} {'mode':>13} {'requests/s':>10} {'rows/call':>9}")
    for concurrency in args.concurrency:
        for mode, window in (("one at a time", None), ("batched", BATCH_WINDOW_S)):
            best, rows = min(run(engine, tokenizer, args.requests, concurrency, window, args.max_tokens) for _ in range(args.repeats))
            print(f"{concurrency:>11} {mode:>13} {args.requests / best:>10.2f} {rows:>9.1f}", flush=True)


if __name__ == "__main__":
    main()

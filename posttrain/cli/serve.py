"""`posttrain serve MODEL [--port N]`: an OpenAI-compatible chat endpoint over a model or checkpoint."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve a model or checkpoint as an OpenAI-compatible chat endpoint",
        description=(
            "Serve MODEL (a Hugging Face model directory, a global_step_N checkpoint, a checkpoints/ directory "
            "or a run directory) with posttrain's hf engine on GET /v1/models and POST /v1/chat/completions "
            "(tools with Hermes-style tool calls, reasoning_content with --reasoning-parser, n, temperature, top_p, max_tokens, stop, seed, logprobs; "
            "docs/engines.md). Concurrent requests with the same sampling settings are answered by one batched engine call, "
            "each answer the one it would get alone. Listens on 127.0.0.1 unless --host says otherwise: there is no authentication."
        ),
    )
    p.add_argument("model", metavar="MODEL_DIR_OR_CHECKPOINT", help="model directory, checkpoint or run directory")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--name", default=None, help="the model id clients send and /v1/models lists (default: the directory name)")
    p.add_argument("--tool-call-parser", choices=["hermes", "none"], default="hermes",
                   help="how tool calls are read from the text of a request with tools (default hermes; none leaves them in the text)")
    p.add_argument("--no-auto-tool-choice", dest="auto_tool_choice", action="store_false",
                   help='refuse requests with tools and tool_choice "auto" (as vLLM without --enable-auto-tool-choice)')
    p.add_argument("--reasoning-parser", choices=["deepseek_r1", "qwen3"], default=None,
                   help="split <think>...</think> into the message's reasoning_content (default: none)")
    p.set_defaults(func=_run)


def parsing_from(args: argparse.Namespace):
    """The ChatParsing the flags ask for.

    >>> parser = argparse.ArgumentParser(); register(parser.add_subparsers())
    >>> parsing_from(parser.parse_args(["serve", "m", "--tool-call-parser", "none", "--reasoning-parser", "qwen3"]))
    ChatParsing(tool_call_parser=None, enable_auto_tool_choice=True, reasoning_parser='qwen3', setting='--tool-call-parser hermes (and no --no-auto-tool-choice)')
    """
    from posttrain.rollout.chat_parsing import ChatParsing

    return ChatParsing(None if args.tool_call_parser == "none" else args.tool_call_parser, args.auto_tool_choice,
                       args.reasoning_parser, setting="--tool-call-parser hermes (and no --no-auto-tool-choice)")


def _run(args: argparse.Namespace) -> int:
    import torch

    from posttrain.checkpoint import resolve_model_dir
    from posttrain.models.loading import load_causal_lm, load_tokenizer
    from posttrain.rollout.hf_engine import HFEngine
    from posttrain.rollout.server import BATCH_WINDOW_S, ChatService, make_server

    path = resolve_model_dir(args.model)
    tokenizer = load_tokenizer(str(path))
    model = load_causal_lm(str(path), dtype="fp32").eval().requires_grad_(False)
    if torch.cuda.is_available():
        model = model.to("cuda")
    engine = HFEngine(model, pad_token_id=tokenizer.pad_token_id, copy_weights=False, tokenizer=tokenizer)
    # concurrent requests share engine calls (posttrain.rollout.server's batch window, 2 ms)
    service = ChatService(engine, tokenizer, args.name or path.name, parsing=parsing_from(args), batch_window=BATCH_WINDOW_S)
    server = make_server(service, args.host, args.port)
    host, port = server.server_address[:2]
    print(f"serving {path} as {args.name or path.name} on http://{host}:{port}/v1 (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0

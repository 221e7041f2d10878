"""Batched sampling: posttrain's HFEngine against Hugging Face `model.generate` (what TRL uses).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/rollout_throughput.py --threads 1 --batch 64 --new-tokens 64

Same random tiny Qwen2 as grpo_vs_trl.py (hidden 256, 4 layers, 4 heads, MLP 1024), the same
arithmetic prompts (8 prompts x 8 samples = batch 64), fp32, temperature 1, and EOS ignored in both
so that every row generates exactly `--new-tokens` tokens (equal work). Prints generated tokens/s of
each (median of `--repeats` runs after a warm-up, alternating A B A B), the ratio, and the decode
ceiling: the matmul FLOPs of the generated tokens at the measured fp32 matmul rate. The engine
runs its lean decoder (posttrain/models/lean_decoder.py) on this Qwen2; `--hf-path` also times
the engine with `lean_decode=False` (the HF decoder body over a StaticCache). The engine decodes
with its default number of decode threads (`rollout.engine_kwargs.hf.decode_workers`: one per
torch thread on CPU); `--one-worker` also times it decoding the whole batch on one thread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

from flops import MatmulParams, matmul_gflops  # noqa: E402
from grpo_vs_trl import prepare  # noqa: E402


def prompts_batch(tokenizer, data: Path, prompts: int, n: int):
    import pyarrow.parquet as pq

    from posttrain.records import PromptBatch

    rows = pq.read_table(data).to_pylist()[:prompts]
    texts = [tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
    enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    return PromptBatch(enc["input_ids"], enc["attention_mask"].float(), uid=[str(i) for i in range(prompts)]).repeat_interleave(n)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64, help="rows (prompts x 8 samples)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/posttrain-bench")
    ap.add_argument("--hf-path", action="store_true", help="also time the engine without its lean decoder")
    ap.add_argument("--bf16", action="store_true", help="the model in bf16 for both (ceiling: a bf16 matmul)")
    ap.add_argument("--one-worker", action="store_true", help="also time the engine with decode_workers=1")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (the first GPU; the decode ceiling is then not computed)")
    ap.add_argument("--shape", default=None, help="a real architecture's shape (posttrain.models.tiny.SHAPES), random weights")
    args = ap.parse_args(argv)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posttrain.rollout import HFEngine, SamplingParams

    model_dir, data = prepare(Path(args.workdir), args.vocab)
    if args.shape:
        from posttrain.models.tiny import SHAPES, make_tiny_model

        model_dir = Path(args.workdir) / f"model-{args.shape}"
        if not (model_dir / "config.json").exists():
            make_tiny_model(model_dir, seed=0, **SHAPES[args.shape])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval().to(args.device)
    batch = prompts_batch(tokenizer, data, args.batch // 8, 8).to(args.device)
    engine = HFEngine(model, eos_token_ids=[], pad_token_id=tokenizer.pad_token_id, copy_weights=False)
    hf_path = HFEngine(
        model, eos_token_ids=[], pad_token_id=tokenizer.pad_token_id, copy_weights=False, lean_decode=False
    )
    one_worker = HFEngine(model, eos_token_ids=[], pad_token_id=tokenizer.pad_token_id, copy_weights=False, decode_workers=1)
    params = SamplingParams(temperature=1.0, n=1, max_new_tokens=args.new_tokens, ignore_eos=True)

    def ours() -> int:
        return engine.generate(batch, params, expected_version=0).num_response_tokens()

    def ours_one_worker() -> int:
        return one_worker.generate(batch, params, expected_version=0).num_response_tokens()

    def ours_hf_path() -> int:
        return hf_path.generate(batch, params, expected_version=0).num_response_tokens()

    def hf() -> int:
        with torch.inference_mode():
            out = model.generate(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask.long(), do_sample=True, temperature=1.0,
                top_k=0, top_p=1.0, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )
        return (out.shape[1] - batch.input_ids.shape[1]) * out.shape[0]

    contenders = [("posttrain", ours), ("hf_generate", hf)]
    contenders += [("pt_1_worker", ours_one_worker)] if args.one_worker else []
    contenders += [("pt_hf_path", ours_hf_path)] if args.hf_path else []
    rates: dict[str, list[float]] = {name: [] for name, _ in contenders}
    print(f"engine uses its lean decoder: {engine.uses_lean_decoder()}; decode threads: {engine.workers_for(len(batch))}")
    for repeat in range(args.repeats + 1):
        for name, fn in contenders:
            t0 = time.perf_counter()
            tokens = fn()
            if args.device != "cpu":
                torch.cuda.synchronize()
            if repeat:  # the first round warms up both
                rates[name].append(tokens / (time.perf_counter() - t0))
    prompt_tokens = int(batch.attention_mask.sum())
    if args.device == "cpu":
        ceiling = matmul_gflops(args.threads, dtype=dtype)
        decode_ceiling = ceiling * 1e9 / MatmulParams.of(model.config).forward_flops(1, 1)
        where = f"threads {args.threads}, {dtype}; matmul ceiling {ceiling:.1f} GFLOP/s = {decode_ceiling:.0f} tok/s decode ceiling"
    else:
        decode_ceiling, where = None, f"{torch.cuda.get_device_name(0)}, {dtype}"
    print(f"batch {args.batch}, {args.new_tokens} new tokens per row, prompts {prompt_tokens / len(batch):.1f} tokens, {where}")
    for name, values in rates.items():
        med = statistics.median(values)
        share = f"{100 * med / decode_ceiling:.0f}% of the decode ceiling; " if decode_ceiling else ""
        print(f"{name:>12}: {med:8.0f} generated tok/s ({share}prefill included)  runs: {', '.join(f'{v:.0f}' for v in values)}")
    ratio = statistics.median(a / b for a, b in zip(rates["posttrain"], rates["hf_generate"]))
    print(f"posttrain / HF generate (generated tok/s): {ratio:.2f}")


if __name__ == "__main__":
    main()

"""ROLL's WorkerConfig fields that no ROLL worker reads where a file sets them: dropped at any value.

Table only (no section of posttrain's config): each entry names what ROLL's source shows about the
key (roll/configs/worker_config.py, roll/configs/base_config.py, its pipelines and strategies),
which is why posttrain leaves it out; the dialect loader reports it as dropped with that reason.
"""

from __future__ import annotations

# ROLL's pipelines build no worker from `validation` (RLVR, DPO, SFT and distillation read its data_args, and RLVR its
# generating_args, for the validation the rollout engine or the trained model runs): the rest of that WorkerConfig is read
# by nothing. The training roles generate nothing, so their generating_args are read by nothing either (ROLL's rollouts
# sample with actor_infer's, its validation with validation's, its judges with the reward workers'), and only
# actor_train's and validation's data_args name data (a reward worker's are its judge's, under rewards.*).
_NO_VALIDATION_WORKER = "ROLL builds no worker from validation: its pipelines read validation.data_args (and RLVR its generating_args) only"
_ROLL_WORKER_FIELDS = (
    "name", "worker_cls", "pg_variant", "model_args", "training_args", "strategy_args", "world_size", "device_mapping",
    "num_gpus_per_worker", "model_update_frequency", "infer_batch_size", "backend_timeout", "system_envs",
    "topr_positive_weight", "topr_negative_weight", "max_concurrency", "use_dynamic_batching_in_train",
    "max_tokens_per_microbatch_in_train", "sequence_length_round_in_train", "use_dynamic_batching_in_infer",
    "max_tokens_per_microbatch_in_infer", "sequence_length_round_in_infer", "offload_nccl", "use_sequence_packing",
    "sequence_packing_args", "logits_in_fp32", "router_replay", "apply_loss_scale", "mtp_training_mode", "opd_kl_coef",
    "tag_included",
)  # ROLL's WorkerConfig (roll/configs/worker_config.py) less data_args and generating_args
#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason (true is accepted: roll.py).
UNSUPPORTED: dict[str, str] = {
    **{f"roll:{role}.apply_loss_scale": ("false leaves each micro-batch's loss divided by the micro-batches x data-parallel ranks "
                                         "(the backend's gradient mean), a gradient that many times smaller, which changes what "
                                         "max_grad_norm clips and AdamW's epsilon; posttrain's gradient is the mini-batch loss's, "
                                         "ROLL's with true (its default)")
       for role in ("actor_train", "critic")},
}
NO_EFFECT: dict[str, str] = {
    **{f"roll:{role}.logits_in_fp32": (
        "read only by ROLL's Megatron strategy, where it upcasts the logits before the (unfused) entropy; posttrain computes "
        "log-probs and entropy from fp32 logits always, so true is what it does and false asks for the same quantity with "
        "bf16 rounding") for role in ("actor_train", "critic", "reference")},
    **{f"roll:{role}.model_args.device_map": (
        "Hugging Face's from_pretrained placement of the weights while loading (roll/models/model_providers.py): a training "
        "role loads on its process's own device whatever it says, and the reference's one visible device takes every layer: "
        "where the weights sit, not the numbers") for role in ("actor_train", "critic", "reference")},
    **{f"roll:{role}.model_args.num_labels": ("the output size of ROLL's reward and value models (token or sequence classification); "
                                              f"its {role} is a causal language model, whose provider does not read it")
       for role in ("actor_train", "reference")},
    **{f"roll:{role}.model_args.adapter_name_or_path": "declared in ROLL's ModelArguments and read by none of its model providers or strategies"
       for role in ("actor_train", "critic", "reference")},
    **{f"roll:{role}.model_args.gradient_checkpointing_use_reentrant": (
        "which torch.utils.checkpoint variant recomputes the activations (ROLL's model provider passes it to Hugging Face's "
        "gradient_checkpointing_enable): the same gradients, another memory and recompute schedule")
       for role in ("actor_train", "actor_infer", "critic", "reference")},
    **{f"roll:{role}.training_args.seed": "ROLL overwrites every role's training_args.seed with the pipeline's seed (posttrain: trainer.seed)"
       for role in ("actor_train", "critic", "reference")},
    **{f"roll:{role}.training_args.data_seed": "declared in ROLL's training arguments and read by none of its strategies or samplers (the pipeline's seed seeds them)"
       for role in ("actor_train", "critic", "reference")},
    **{f"roll:validation.{k}": _NO_VALIDATION_WORKER for k in _ROLL_WORKER_FIELDS},
    **{f"roll:{role}.generating_args": (f"ROLL's {role} generates nothing, so no worker reads its generating_args (rollouts sample "
                                        "with actor_infer's, validation with validation's)")
       for role in ("actor_train", "reference", "critic")},
    **{f"roll:{role}.{k}": "ROLL reads it of actor_train only (its agentic policy-gradient worker's loss options)"
       for role in ("actor_infer", "reference", "critic") for k in ("pg_variant", "topr_positive_weight", "topr_negative_weight")},
    **{f"roll:{role}.model_update_frequency": "ROLL reads actor_train's only (how often the weights go to the engine)"
       for role in ("actor_infer", "reference", "critic")},
    **{f"roll:{role}.{k}": "ROLL reads it of the reference (a teacher) and of the reward workers only"
       for role in ("actor_train", "actor_infer", "critic") for k in ("opd_kl_coef", "tag_included")},
    **{f"roll:{role}.apply_loss_scale": f"scales the loss of a training step, and ROLL's {role} never trains (its forward returns no scaled loss)"
       for role in ("actor_infer", "reference")},
    **{f"roll:{role}.name": "the name of the role's Ray actors (ROLL's logs and Ray's dashboard): not the numbers"
       for role in ("actor_train", "actor_infer", "reference", "critic")},
    **{f"roll:{role}.max_concurrency": ("how many calls one Ray actor of the role serves at once: scheduling, not the numbers "
                                        "(posttrain's roles are methods of its own worker processes)")
       for role in ("actor_train", "actor_infer", "reference", "critic")},
    **{f"roll:{role}.backend_timeout": ("minutes ROLL's process group waits for a peer before failing: how long a hung run waits, "
                                        "not the numbers (posttrain's wait is cluster.rpc_timeout_s)")
       for role in ("actor_train", "actor_infer", "reference", "critic")},
    **{f"roll:{role}.training_args.max_steps": "ROLL sets every role's from the pipeline's max_steps (set_max_steps), overwriting the file's value"
       for role in ("actor_train", "critic", "reference")},
    **{f"roll:{role}.training_args.output_dir": "ROLL sets it to the top-level output_dir, overwriting the file's value"
       for role in ("actor_train", "critic")},
    "roll:reference.training_args.output_dir": "where a role saves its checkpoints, and ROLL's reference saves none",
    **{f"roll:{role}.training_args.save_hf_model": ("whether ROLL's Megatron strategy also saves a Hugging Face copy of a checkpoint: "
                                                    "which files, not the numbers (posttrain's checkpoints are Hugging Face folders)")
       for role in ("actor_train", "critic", "reference")},
    **{f"roll:{role}.training_args.dataloader_num_workers": "processes loading a data set in ROLL's SFT and distillation pipelines: not the numbers"
       for role in ("actor_train", "critic", "reference")},
    **{f"roll:{role}.num_gpus_per_worker": "ROLL forces it to 1 for a training strategy (one device per worker process), as posttrain's workers are"
       for role in ("actor_train", "critic")},
    # actor_infer's strategies that posttrain takes (vllm, sglang, hf_infer: rollout.name) only generate: no training
    # arguments, no forward micro-batches, no Megatron model
    "roll:actor_infer.training_args.*": ("ROLL's vllm, sglang and hf_infer engines read no training arguments (only its Megatron "
                                         "strategies, which posttrain does not take for actor_infer)"),
    **{f"roll:actor_infer.{k}": ("a forward or training micro-batch option, and ROLL's actor_infer only generates (its old and "
                                 "reference log-probs come from actor_train and reference)")
       for k in ("use_dynamic_batching_in_train", "max_tokens_per_microbatch_in_train", "sequence_length_round_in_train",
                 "use_dynamic_batching_in_infer", "max_tokens_per_microbatch_in_infer", "sequence_length_round_in_infer",
                 "use_sequence_packing", "sequence_packing_args.*")},
    **{f"roll:actor_infer.{k}": "an option of ROLL's Megatron models, which posttrain does not take for actor_infer (vllm, sglang, hf_infer)"
       for k in ("mtp_training_mode", "logits_in_fp32")},
    # generating_args fields the engines ROLL runs for rollouts and validation do not read as the file sets them
    **{f"roll:{role}.generating_args.max_length": (f"ROLL's RLVR config sets {role}'s max_new_tokens to {prefix}sequence_length - "
                                                   f"{prefix}prompt_length, and its generating args drop max_length whenever max_new_tokens "
                                                   "is positive")
       for role, prefix in (("actor_infer", ""), ("validation", "val_"))},
    **{f"roll:{role}.generating_args.length_penalty": ("read by ROLL's beam search only (num_beams > 1), which posttrain does not offer "
                                                       "(num_beams 1 is its only value)")
       for role in ("actor_infer", "validation")},
    **{f"roll:{role}.generating_args.logprobs": ("how many alternatives' log-probs vLLM returns per token; ROLL's pipelines read the "
                                                 "sampled token's, which posttrain's engines always record")
       for role in ("actor_infer", "validation")},
    # one entry per key (a pattern), so the keys the section tables name with a reason of their own keep it
    **{f"roll:{role}.data_args.*": (f"ROLL reads the data of actor_train.data_args (validation's of validation.data_args); no "
                                    f"pipeline reads {role}.data_args")
       for role in ("actor_infer", "reference", "critic")},
}

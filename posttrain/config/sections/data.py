"""`data`: where prompts come from and how they become token ids.

One section serves every algorithm: RL reads prompts (`prompt_key` or `messages_key`), SFT adds a
response (`response_key`, or a whole conversation under `messages_key`), DPO adds `chosen_key` and
`rejected_key`. The code that honours these fields is `posttrain.data`.

`UNSUPPORTED` lists reference keys that have no field here, each with the reason; the mapping
generator and the dialect loaders read it so that such a key is refused with that reason.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section
from posttrain.errors import ConfigError

_TS = "trinity:buffer.explorer_input.taskset.format"
# The named templates of posttrain.data.templates (ROLL's names), listed here for the validator.
CHAT_TEMPLATE_NAMES = ("native", "qwen2_5", "qwen3", "chatml", "empty", "base", "longCOT_qwen2.5", "longcot_V3")


@section
class CustomClsConfig:
    """A user dataset class, loaded from a Python file and built with (files, tokenizer, data config)."""

    path: str | None = param(None, doc="Python file defining the dataset class; null uses posttrain's datasets.", refs=["verl:.path"])
    name: str | None = param(None, doc="Name of the dataset class in that file.", refs=["verl:.name"])


# data.val_file_settings.<entry>.chat_template: the tokenizer's own chat template, whatever data.chat_template is.
TOKENIZER_TEMPLATE = "tokenizer"


@section
class ValFileConfig:
    """One validation entry's own prompt formatting and scoring, where a benchmark is prompted or
    scored otherwise than the training data (Trinity-RFT's per-evaluation-taskset workflow and
    reward arguments). Unset fields follow the stage's settings."""

    chat_template: str | None = param(None, doc=f"Chat template of this entry's RL validation prompts: a Jinja template inline or a path to a .jinja file, or '{TOKENIZER_TEMPLATE}' for the tokenizer's own (e.g. a chat model's benchmark while the training prompts are a base model's plain text); null: data.chat_template, as the training prompts.", refs=["trinity:buffer.explorer_input.eval_tasksets[].workflow_args.use_base"])
    overlong_penalty: bool | None = param(None, doc="Whether reward.overlong_buffer's penalty (its len, penalty_factor, max_resp_len) is added to this entry's validation scores: false leaves it out, true adds it even when the training scores have none (reward.overlong_buffer.enable false; len must then be set); null: as the training scores (reward.overlong_buffer.enable).", refs=["trinity:buffer.explorer_input.eval_tasksets[].reward_fn_args.enable_overlong_penalty"])


_SEL = "trinity:buffer.explorer_input.taskset.data_selector"


@section
class TaskSelectorConfig:
    """A task selector choosing each step's training rows (posttrain.data.selectors): Trinity-RFT's
    selectors, with its arguments (BOTS: difficulty_based)."""

    type: str | None = param(None, doc="Which selector picks each step's rows: sequential (file order, wrapping), shuffle (a permutation per epoch), random (rows without replacement per batch), offline_easy2hard (sorted by feature_keys, highest first), difficulty_based (BOTS: a Beta posterior of each row's pass rate, updated from each step's mean rewards, rows near target_reward picked); all seeded by data.seed and continuing across epochs without dropping a short tail (docs/data.md). Null: posttrain's sampler (data.shuffle).", choices=[None, "sequential", "shuffle", "random", "offline_easy2hard", "difficulty_based"], refs=[f"{_SEL}.selector_type"])
    feature_keys: list[str] = param(factory=list, doc="Columns of per-row numbers: offline_easy2hard sorts by them (the first, then the next to break ties); difficulty_based takes exactly two, the pass rates of a weaker and a stronger reference model, to interpolate unseen rows' pass rates.", refs=[f"{_SEL}.feature_keys"])
    m: int = param(16, doc="difficulty_based: pseudo-trials one step's mean reward counts for (BOTS's m, the rollouts per task).", ge=1, refs=[f"{_SEL}.kwargs.m"])
    lamb: float = param(0.2, doc="difficulty_based: how much of the old posterior each update forgets (BOTS's lambda): alpha <- (1-lamb) alpha + lamb + evidence.", ge=0.0, le=1.0, refs=[f"{_SEL}.kwargs.lamb"])
    rho: float = param(0.2, doc="difficulty_based: weight of the interpolated (implicit) evidence against the observed one (BOTS's rho).", ge=0.0, le=1.0, refs=[f"{_SEL}.kwargs.rho"])
    adaptive_rho: bool = param(False, doc="difficulty_based: halve rho whenever the interpolation's mean absolute error on the step's rows is >= 0.25.", refs=[f"{_SEL}.kwargs.adaptive_rho"])
    target_reward: float = param(1.0, doc="difficulty_based: the pass rate the selector aims at; rows whose estimate is closest to it are picked (BOTS: 0.5).", refs=[f"{_SEL}.kwargs.target_reward"])
    tau: float = param(1.0, doc="difficulty_based: temperature of the pick; 0 takes the batch closest to target_reward, > 0 samples rows without replacement with probabilities softmax(-|target - p| / tau).", ge=0.0, refs=[f"{_SEL}.kwargs.tau"])
    do_sample: bool = param(False, doc="difficulty_based: score each row with a draw from its Beta posterior (Thompson sampling) instead of the posterior mean.", refs=[f"{_SEL}.kwargs.do_sample"])


@section
class DataConfig:
    """Training/validation data files, prompt formatting, lengths and batch size."""

    # ---- files -------------------------------------------------------------------------------
    train_files: list[str] = param(factory=list, doc="Training data: files (parquet, jsonl, json, csv), dataset folders (save_to_disk output, split files) or Hugging Face dataset names read from the local cache, a folder or name written PATH[:SUBSET][@SPLIT] (split train by default; docs/data.md).", refs=["verl:data.train_files", "roll:actor_train.data_args.file_name", "trinity:buffer.explorer_input.taskset.path", "trinity:buffer.explorer_input.taskset.subset_name", "trinity:buffer.explorer_input.taskset.split"])
    val_files: list[str] = param(factory=list, doc="Validation data, written as data.train_files (split test by default); empty means no validation.", refs=["verl:data.val_files", "roll:validation.data_args.file_name"])
    val_file_keys: dict[str, dict[str, str]] = param(factory=dict, doc="Column names of single validation entries that differ from the training data's: {data.val_files entry, as written: {prompt_key: COLUMN, response_key: COLUMN}}; that entry's rows are read with these columns instead of data.prompt_key / data.response_key (e.g. a benchmark whose question is in 'problem'). Empty: every entry uses data.prompt_key and data.response_key.", refs=["trinity:buffer.explorer_input.eval_tasksets[].format.prompt_key", "trinity:buffer.explorer_input.eval_tasksets[].format.response_key"])
    val_file_settings: dict[str, ValFileConfig] = param(factory=dict, doc="Prompt formatting and scoring of single validation entries that differ from the training data's: {data.val_files entry, as written: {chat_template, overlong_penalty}} (RL stages). Empty: every entry is prompted and scored as the training data.")
    dataset_dir: str | None = param(None, doc="Folder that relative train/val file paths are read from; null means the working directory.", refs=["roll:actor_train.data_args.dataset_dir"])
    custom_cls: CustomClsConfig = param(factory=CustomClsConfig, doc="A user dataset class instead of posttrain's.", refs=["verl:data.custom_cls"])

    # ---- columns -----------------------------------------------------------------------------
    prompt_key: str = param("prompt", doc="Column holding the prompt: a string or a chat message list.", refs=["verl:data.prompt_key", "roll:actor_train.data_args.prompt", "roll:prompt_key", f"{_TS}.prompt_key"])
    prompt_format: str = param("column", doc="How a row's prompt is read: column (data.messages_key, else data.prompt_key) or tool_n1 (Tool-N1 tool-calling rows: the system message raw_system plus Tool-N1's tool instructions listing the row's tools, then the turns of its conversations column; posttrain.data.tool_n1) or video_r1 (Video-R1 rows: the problem column in Video-R1's reasoning template with its problem_type's answer instruction, after a <video> or <image> marker by modality_type; posttrain.data.video_r1).", choices=["column", "tool_n1", "video_r1"], refs=["trinity:buffer.explorer_input.default_workflow_type"])
    query_key: str | None = param(None, doc="Column whose text is added to a string prompt after a newline, when the row's cell is non-empty (ROLL's SFT input field: the user turn is prompt + \"\\n\" + query); null reads no such column.", refs=["roll:query_key"])
    prompt_dict_keys: list[str] = param(factory=list, doc="Keys followed inside a dict-valued prompt column to reach the prompt (SFT).", refs=["verl:data.prompt_dict_keys"])
    messages_key: str | None = param(None, doc="Column holding a chat message list, used instead of prompt_key (SFT: the whole conversation).", refs=["verl:data.multiturn.messages_key", "roll:actor_train.data_args.messages"])
    response_key: str = param("response", doc="Column holding the SFT response; for RL rows without reward_model, the ground truth.", refs=["verl:data.response_key", "roll:response_key", f"{_TS}.response_key"])
    response_dict_keys: list[str] = param(factory=list, doc="Keys followed inside a dict-valued response column to reach the response (SFT).", refs=["verl:data.response_dict_keys"])
    chosen_key: str = param("chosen", doc="Column holding the preferred response of a DPO pair (string or message list).", refs=["roll:chosen_key"])
    rejected_key: str = param("rejected", doc="Column holding the dispreferred response of a DPO pair (string or message list).", refs=["roll:rejected_key"])
    reward_fn_key: str = param("data_source", doc="Column naming each row's data source (its tag), which selects its reward function or reward workers.", refs=["verl:data.reward_fn_key", "roll:actor_train.data_args.tag"])
    system_prompt: str | None = param(None, doc="System message put before prompts that have none.", refs=[f"{_TS}.system_prompt"])
    system_prompt_key: str | None = param(None, doc="Column holding a per-row system message; wins over system_prompt.", refs=[f"{_TS}.system_prompt_key", "roll:system_key"])
    sft_trim_final_newline: bool = param(False, doc="SFT: cut a newline the chat template writes after the conversation's last message, so the sequence ends at the end-of-turn token and that newline is neither input nor trained (ROLL's SFT pipeline does this).")
    sft_loss_turns: str = param("all", doc="SFT rows under messages_key: the loss covers every assistant message (all) or only the conversation's final message (last, Trinity-RFT's default for SFT files: format.enable_concatenated_multi_turn false).", choices=["all", "last"])

    # ---- chat template -----------------------------------------------------------------------
    chat_template: str | None = param(None, doc="Jinja chat template, inline or a path to a .jinja file; null uses the tokenizer's.", refs=["verl:data.chat_template", "verl:actor_rollout_ref.model.custom_chat_template"])
    chat_template_name: str = param("native", doc="A named prompt template (ROLL's names, docs/data.md): native/qwen2_5 use the chat template as it is, qwen3 adds enable_thinking=True, chatml/empty/base write their own text, longCOT_qwen2.5 adds a long-thought system prompt and a boxed-answer instruction, longcot_V3 opens <think> after the assistant header.", choices=CHAT_TEMPLATE_NAMES, refs=["roll:actor_train.data_args.template", "roll:global_template"])
    apply_chat_template_kwargs: dict[str, Any] = param(factory=dict, doc="Extra variables passed to the chat template (e.g. enable_thinking).", refs=["verl:data.apply_chat_template_kwargs"])
    enable_thinking: bool | None = param(None, doc="Pass enable_thinking to the chat template (Qwen3-style reasoning switch); null passes nothing, so the template's own default holds.", refs=["trinity:model.enable_thinking", "trinity:explorer.rollout_model.enable_thinking", f"{_TS}.enable_thinking"])
    tag_to_template: dict[str, str] = param(factory=dict, doc="A named template (data.chat_template_name's names) per row tag (the data.reward_fn_key column, ROLL's tag): rows of a listed tag are rendered with it, the others with data.chat_template_name.", refs=["roll:tag_to_template"])
    tools_key: str | None = param(None, doc="Column holding each row's tool schemas (a list of objects, or its JSON text), passed to the chat template as `tools`, so the prompt lists the tools the row may call; a row without the column or with null offers none (as verl), a file set without it is refused. Null: no column read.", refs=["verl:data.multiturn.tools_key"])
    user_suffix: str | None = param(None, doc="Text appended to the content of every user message when prompts (and SFT/DPO conversations) are rendered, e.g. an instruction after each question (the Trinity dialect sets it for on_policy_distill_math_workflow); null appends nothing.")
    reply_prefix: str | None = param(None, doc="Text the assistant's reply starts with: written into every RL prompt after the assistant header (the chat template continues an assistant message holding it), so responses continue it.", refs=[f"{_TS}.reply_prefix"])

    # ---- lengths -----------------------------------------------------------------------------
    max_prompt_length: int = param(512, doc="Longest prompt in tokens after the chat template.", ge=1, refs=["verl:data.max_prompt_length", "roll:prompt_length", "trinity:model.max_prompt_tokens"])
    max_response_length: int = param(512, doc="Longest generated response in tokens.", ge=1, refs=["verl:data.max_response_length", "roll:response_length", "trinity:model.max_response_tokens"])
    max_length: int = param(1024, doc="Longest SFT/DPO sequence (prompt + response) in tokens.", ge=1, refs=["verl:data.max_length"])
    truncation: str = param("error", doc="What an over-long prompt/sequence does: error (the dataset build fails naming the row), left (keep the end), right (keep the start) or middle (keep both ends, half each); cut rows are counted once when the dataset is built.", choices=["error", "left", "right", "middle"], refs=["verl:data.truncation"])
    filter_overlong_prompts: bool = param(False, doc="Drop prompts longer than max_prompt_length when the dataset is built.", refs=["verl:data.filter_overlong_prompts"])
    filter_overlong_prompts_workers: int = param(1, doc="Processes that tokenise the rows when a dataset is built, to hold each length against its limit (max_prompt_length for RL prompts, max_length for SFT/DPO).", ge=1, refs=["verl:data.filter_overlong_prompts_workers", "roll:actor_train.data_args.preprocessing_num_workers"])

    # ---- batching and order ------------------------------------------------------------------
    gen_batch_size: int | None = param(None, doc="Prompts per generation round of dynamic sampling (algorithm.filter_groups): the data sampler's batch, so an epoch is rows // gen_batch_size steps; null: data.train_batch_size. Another value than train_batch_size needs filter_groups.enable.", ge=1, refs=["verl:data.gen_batch_size"])
    train_batch_size: int = param(8, doc="Prompts sampled per training step (each gets rollout.n responses).", ge=1, refs=["verl:data.train_batch_size", "roll:rollout_batch_size", "trinity:buffer.batch_size"])
    val_batch_size: int | None = param(None, doc="Prompts (SFT/DPO: examples) per validation batch; null validates the whole set as one batch (SFT/DPO: in training micro-batches).", ge=1, refs=["verl:data.val_batch_size", "roll:val_batch_size"])
    shuffle: bool = param(True, doc="Shuffle the training data each epoch (seeded by seed and the epoch).", refs=["verl:data.shuffle"])
    validation_shuffle: bool = param(False, doc="Shuffle the validation data.", refs=["verl:data.validation_shuffle"])
    seed: int = param(1, doc="Seed of the data shuffle (and of data.selector's draws); with the epoch it fixes the order exactly.", ge=0, refs=["verl:data.seed", f"{_SEL}.seed"])

    # ---- optional outputs --------------------------------------------------------------------
    return_raw_chat: bool = param(False, doc="Keep each RL prompt's chat messages (system prompt added) before the template: reward.reward_model.input_tokenizer then re-renders the conversation in the reward model's own chat template, reward functions get them as extra_info['raw_chat'], and trainer.rollout_data_dir dumps write them as raw_chat.", refs=["verl:data.return_raw_chat"])
    return_full_prompt: bool = param(False, doc="Keep each RL prompt's text after the chat template (untruncated): a reward model then reads it instead of the decoded prompt ids.", refs=["verl:data.return_full_prompt"])
    extra_info_keys: list[str] = param(factory=list, doc="Columns copied into each RL row's extra_info under their own names, for reward functions and judges that read them (a rubric_judge's rubric); a row without the column gets no entry, and one whose extra_info already has the key is refused.")

    # ---- not implemented yet -----------------------------------------------------------------
    image_key: str = param("images", doc="Column holding each RL or distillation row's images (a list of {bytes|path} structs, paths or images), placed at the prompt's <image> markers, one per image: trained with a vision-language policy (Qwen2-VL, Qwen2.5-VL), on the hf rollout engine in RL, read by both the student's and the teacher's forwards in distillation; refused with a text-only policy and in SFT/DPO stages (naming file and row) rather than trained without them.", refs=["verl:data.image_key", f"{_TS}.image_key"])
    image_min_pixels: int | None = param(None, doc="Fewest pixels an image is resized to before the vision tower (height x width, rounded to whole merged patches); null: the model's image processor's own min_pixels.", ge=1, refs=["roll:actor_train.data_args.image_min_pixels"])
    image_max_pixels: int | None = param(None, doc="Most pixels an image is resized to before the vision tower (fewer pixels, fewer image tokens); null: the model's image processor's own max_pixels.", ge=1, refs=["roll:actor_train.data_args.image_max_pixels"])
    video_key: str = param("videos", doc="Column holding each RL row's videos (a list of file paths, or {path} structs), placed at the prompt's <video> markers, one per video (unmarked ones go before the first user message's text): frames sampled and sized by data.video_* (posttrain.data.videos) and read by a vision-language policy (Qwen2-VL, Qwen2.5-VL) on the hf rollout engine; refused with a text-only policy and in SFT, DPO, distillation and expert rows (naming file and row) rather than trained without them.", refs=["verl:data.video_key"])
    video_folder: str | None = param(None, doc="Folder a relative video path is read from (joined to it); null: the data file's folder (data.dataset_dir for named files).", refs=["roll:actor_train.data_args.video_folder"])
    video_fps: float = param(2.0, doc="Frames sampled per second of video (duration x video_fps frames, within video_min_frames / video_max_frames and the file's own count, rounded down to a multiple of 2), spread evenly over the file.", gt=0, refs=["roll:actor_train.data_args.video_fps"])
    video_min_frames: int = param(4, doc="Fewest frames sampled from a video (rounded up to a multiple of 2; never more than the file has).", ge=1)
    video_max_frames: int | None = param(None, doc="Most frames sampled from a video (rounded down to a multiple of 2); null: 768 or the file's count, the fewer.", ge=2, refs=["roll:actor_train.data_args.video_max_frames"])
    video_min_pixels: int | None = param(None, doc="Fewest pixels (height x width) each sampled frame is resized to, in whole merged patches; null: 128 merged tokens' worth (128 x 28 x 28 for 14-pixel patches).", ge=1, refs=["roll:actor_train.data_args.video_min_pixels"])
    video_max_pixels: int | None = param(None, doc="Most pixels each sampled frame is resized to; null: 768 merged tokens' worth, also capped by video_total_pixels.", ge=1, refs=["roll:actor_train.data_args.video_max_pixels"])
    video_total_pixels: int | None = param(None, doc="Pixel budget of a whole video: each frame gets at most video_total_pixels / frames x 2 (never below 1.05 x video_min_pixels); null: 128000 x 0.9 merged tokens' worth.", ge=1, refs=["roll:actor_train.data_args.video_total_pixels"])
    use_shm: bool = param(False, doc="verl copies the data files to /dev/shm before reading; posttrain reads the local files directly (the OS page cache serves repeated reads), so true reads the same bytes the same way: accepted, no effect.", refs=["verl:data.use_shm"])
    dataloader_num_workers: int = param(0, doc="Processes that read each training batch (template and tokenise its prompts, sequences or pairs), started once by the first batch; 0 reads in the trainer process. The examples are the same either way, and the batch the sampler chose is read, never one ahead, so resume stays exact.", ge=0, refs=["verl:data.dataloader_num_workers"])
    sampler: dict[str, Any] = param(factory=dict, doc="A user sampler class choosing the RL training rows: {class_path: a Python file, class_name}; built as cls(data_source=dataset, data_config=data), iterated for dataset positions (one pass an epoch, data.train_batch_size a step); an update(batch) method gets each step's positions and scores (a curriculum); state_dict/load_state_dict make resume exact. Empty: posttrain's shuffled order.", refs=["verl:data.sampler"])
    selector: TaskSelectorConfig = param(factory=TaskSelectorConfig, doc="A task selector choosing the RL training rows (Trinity-RFT's data_selector; BOTS's online difficulty-based one): posttrain.data.selectors; its type null keeps posttrain's sampler.")
    domain_interleave_probs: dict[str, float] = param(factory=dict, doc="RL training batches drawn by domain: each prompt's domain (a reward worker's name, standing for its tag_included, or a tag) is drawn with these probabilities (normalised); empty draws rows uniformly.", refs=["roll:actor_train.data_args.domain_interleave_probs"])
    interleave_probs: str | None = param(None, doc="RL training rows drawn by file: one probability per data.train_files entry, comma separated (\"0.7,0.3\"; normalised); each prompt picks an entry, then the next row of that entry's own shuffled order, which repeats when used up (Hugging Face interleave_datasets with all_exhausted). Null draws rows uniformly.", refs=[])


_DATAGEN = ("verl's DynamicGenDataset appends generated rows to the training set after every step; posttrain's training set "
            "is fixed when the stage starts (every row checked and measured once, the sampler's order a function of the "
            "seed over a fixed size, which is what makes resume exact): generate the rows before the run, and reorder or "
            "reweight them during it with a data.sampler class (its update() sees each step's scores)")
# ROLL reads one prompt template per run (roll/pipeline/rlvr/rlvr_pipeline.py; the SFT, DPO and distill
# pipelines alike): global_template, else the training role's data_args.template, for the training and
# the validation prompts; its agentic pipeline renders with the tokenizer's chat template. Another
# role's data_args.template is read nowhere (an LLM judge's is its own: reward.workers.<name>).
TEMPLATE_UNREAD = ("read nowhere in ROLL: its pipelines render training and validation prompts with global_template or "
                   "actor_train.data_args.template (posttrain: data.chat_template_name), its agentic pipeline with the "
                   "tokenizer's chat template")
# Reference keys with no field in `data`, and why (read by the mapping generator and dialect loaders).
UNSUPPORTED: dict[str, str] = {
    "verl:data.datagen.path": _DATAGEN,
    "verl:data.train_max_samples": "a cap on the training rows verl reads; posttrain reads every row of data.train_files: cut the file, or -1 (verl's default) reads all",
    "verl:data.val_max_samples": "a cap on the validation rows verl reads; posttrain reads every row of data.val_files: cut the file, or -1 (verl's default) reads all",
    "verl:data.audio_key": "audio inputs: posttrain's vision path carries images and videos (data.image_key, data.video_key); it has no audio encoder input",
    "verl:data.function_tool_path": ("a Python file whose functions verl turns into tools; posttrain's tools are classes named in "
                                     "rollout.multi_turn.tool_config_path (docs/agentic.md)"),
    "verl:data.datagen.name": _DATAGEN,
    # Keys met in the published examples (tests/config/corpus, benchmarks/foreign_corpus.py).
    "roll:validation.data_args.image_max_pixels": "ROLL resizes validation images with their own bound; posttrain resizes every image with data.image_max_pixels (actor_train.data_args.image_max_pixels), so validation images are sized as training ones",
    "roll:actor_train.data_args.custom_data_kwargs_func": "ROLL calls it only in its vision-language pipeline, in place of the function that builds image and video inputs with the model's processor (its Video-R1 reader, video_r1_get_data_kwargs, translates: data.prompt_format video_r1); posttrain builds a row's image and video inputs with the model directory's image processor (data.image_key, data.video_key and data.video_*), and a text row gains columns through a data.custom_cls dataset class",
    "roll:validation.data_args.dataset_dir": "validation files are read relative to data.dataset_dir (ROLL: actor_train.data_args.dataset_dir), the training files' folder",
    "roll:validation.data_args.preprocessing_num_workers": "the validation set is tokenised with data.filter_overlong_prompts_workers processes, the training set's",
    "roll:actor_train.data_args.audio_folder": "audio inputs: posttrain's vision path carries images and videos (data.image_key, data.video_key); it has no audio encoder input",
}


def parse_interleave_probs(text: str, entries: int) -> list[float]:
    """One probability per listed entry from ROLL's comma-separated text.

    >>> parse_interleave_probs("0.7, 0.3", 2)
    [0.7, 0.3]
    """
    try:
        probs = [float(part) for part in str(text).split(",")]
    except ValueError:
        raise ConfigError(f"data.interleave_probs: {text!r} is not a comma-separated list of numbers (e.g. \"0.7,0.3\")") from None
    if len(probs) != entries:
        raise ConfigError(f"data.interleave_probs: {len(probs)} probabilities for {entries} entries of data.train_files; "
                          "give one per entry, in the same order, or leave it out to draw rows uniformly")
    if any(not p >= 0 for p in probs) or sum(probs) <= 0:
        raise ConfigError(f"data.interleave_probs: probabilities must be >= 0 with at least one > 0, got {text!r}")
    return probs


# Reference keys any value of which changes nothing in posttrain (the loaders drop them with the reason).
NO_EFFECT: dict[str, str] = {
    "verl:data.return_multi_modal_inputs": "verl's RLHFDataset stores the flag and reads it nowhere (verl/utils/dataset/rl_dataset.py), so it changes nothing there; posttrain processes each row's images in its dataset and carries them to the engine and the actor (records.VisionInputs)",
    "roll:actor_train.data_args.interleave_probs": (
        "ROLL reads no interleave_probs: its DataArguments dataclass has no such field and its config loader "
        "(dacite, not strict) drops unknown keys, so the key changes nothing there; posttrain's own "
        "data.interleave_probs draws rows by file"),
    "roll:validation.data_args.template": TEMPLATE_UNREAD,
    "roll:dataset_filter.*": ("declared by ROLL's RLVR config (DatasetFilterConfig: source, difficulty bounds, num_samples) and read "
                              "by none of its pipelines, so it filters nothing there"),
}


def sampler_set(data: Any) -> bool:
    """Whether data.sampler names a class: verl's tree carries {class_path: null, class_name: null}."""
    return any(v is not None for v in dict(getattr(data, "sampler", None) or {}).values())


def check_row_templates(cfg: Any) -> list[str]:
    """data.tag_to_template names known templates; it and data.tools_key shape posttrain's own
    templating of each row, which a data.custom_cls dataset and the tool loop do not use."""
    data = getattr(cfg, "data", None)
    if data is None or not (data.tag_to_template or data.tools_key is not None):
        return []
    problems = [f"data.tag_to_template.{tag}: {name!r} is not a named template; valid: {', '.join(CHAT_TEMPLATE_NAMES)}"
                for tag, name in data.tag_to_template.items() if name not in CHAT_TEMPLATE_NAMES]
    keys = " and ".join(k for k, on in (("data.tag_to_template", bool(data.tag_to_template)), ("data.tools_key", data.tools_key is not None)) if on)
    if data.custom_cls.path is not None:
        problems.append(f"{keys}: a data.custom_cls dataset templates its own rows; set it in the class, or drop data.custom_cls")
    multi_turn = getattr(getattr(getattr(cfg, "rollout", None), "multi_turn", None), "enable", False)
    if multi_turn:
        problems.append(f"{keys}: rollout.multi_turn offers the tools of tool_config_path to every prompt and renders later turns "
                        "with one template; per-row tools or templates would offer tools the tool loop cannot run or switch templates mid-conversation")
    return problems


def check_row_choosers(cfg: Any) -> list[str]:
    """data.sampler, data.interleave_probs and data.domain_interleave_probs each decide which row every
    RL prompt draws: at most one, and for RL batches only."""
    data = getattr(cfg, "data", None)
    if data is None:
        return []
    chosen = [k for k, on in (("data.sampler", sampler_set(data)), ("data.selector", data.selector.type is not None),
                              ("data.interleave_probs", data.interleave_probs is not None),
                              ("data.domain_interleave_probs", bool(data.domain_interleave_probs))) if on]
    if len(chosen) > 1:
        return [f"{' and '.join(chosen)} each choose the row every prompt draws; keep one of them"]
    unread = _selector_args_unread(data.selector)
    if unread:
        return unread
    kind = getattr(getattr(cfg, "algorithm", None), "kind", "rl")
    if chosen and chosen[0] != "data.domain_interleave_probs" and kind != "rl":
        return [f"{chosen[0]}: it chooses RL prompt batches; algorithm.kind={kind} samples its rows uniformly, so leave it unset"]
    if data.interleave_probs is not None and data.train_files:
        try:
            parse_interleave_probs(data.interleave_probs, len(data.train_files))
        except ConfigError as e:
            return list(e.problems)
    return []


def _selector_args_unread(sel: TaskSelectorConfig) -> list[str]:
    """data.selector arguments that its type does not read (they would change nothing)."""
    default = TaskSelectorConfig()
    bots = [k for k in ("m", "lamb", "rho", "adaptive_rho", "target_reward", "tau", "do_sample") if getattr(sel, k) != getattr(default, k)]
    if sel.type != "difficulty_based" and bots:
        return [f"data.selector.{', '.join(bots)}: read by the difficulty_based selector only (data.selector.type is {sel.type}); drop them or set the type"]
    if sel.type is None and sel.feature_keys:
        return ["data.selector.feature_keys: no selector is set (data.selector.type null); set the type that reads them, or drop them"]
    return []


def check_domain_probs(cfg: Any) -> list[str]:
    """data.domain_interleave_probs: non-negative, not all zero, and for RL batches only."""
    data = getattr(cfg, "data", None)
    probs = dict(getattr(data, "domain_interleave_probs", None) or {})
    if not probs:
        return []
    bad = {k: v for k, v in probs.items() if not v >= 0}
    if bad:
        return [f"data.domain_interleave_probs: probabilities must be >= 0, got {bad}"]
    if sum(probs.values()) <= 0:
        return ["data.domain_interleave_probs: at least one probability must be > 0"]
    kind = getattr(getattr(cfg, "algorithm", None), "kind", "rl")
    if kind != "rl":
        return [f"data.domain_interleave_probs: domain mixing draws RL prompt batches; algorithm.kind={kind} samples its rows uniformly, so leave it empty"]
    return []


def check_query_key(cfg: Any) -> list[str]:
    """data.query_key joins a query to the prompt_key text; a messages_key conversation has no such prompt."""
    data = getattr(cfg, "data", None)
    if data is None or data.query_key is None or data.messages_key is None:
        return []
    return [f"data.query_key: it is added to the data.prompt_key text, and data.messages_key ({data.messages_key!r}) replaces that prompt; drop one of them"]


def check_val_file_keys(cfg: Any) -> list[str]:
    """data.val_file_keys names data.val_files entries: each must be one (else its columns would be
    read nowhere), with only prompt_key / response_key inside."""
    data = getattr(cfg, "data", None)
    if data is None or not data.val_file_keys:
        return []
    problems = [f"data.val_file_keys: {entry!r} is not an entry of data.val_files {list(data.val_files)}; write the entry as data.val_files lists it"
                for entry in data.val_file_keys if entry not in data.val_files]
    problems += [f"data.val_file_keys.{entry}: {sorted(set(keys) - {'prompt_key', 'response_key'})} are not column settings; use prompt_key, response_key"
                 for entry, keys in data.val_file_keys.items() if set(keys) - {"prompt_key", "response_key"}]
    return problems


def check_val_file_settings(cfg: Any) -> list[str]:
    """data.val_file_settings names data.val_files entries, shapes posttrain's own RL validation
    prompts and scores (not a data.custom_cls dataset's, an agent's, or an SFT/DPO stage's), and a
    penalty it turns on has a ramp to apply."""
    data = getattr(cfg, "data", None)
    if data is None or not data.val_file_settings:
        return []
    key = "data.val_file_settings"
    problems = [f"{key}: {entry!r} is not an entry of data.val_files {list(data.val_files)}; write the entry as data.val_files lists it"
                for entry in data.val_file_settings if entry not in data.val_files]
    kind = getattr(getattr(cfg, "algorithm", None), "kind", "rl")
    rollout = getattr(cfg, "rollout", None)
    agent = getattr(getattr(rollout, "agent", None), "function", None) is not None
    if kind != "rl":
        problems.append(f"{key}: it shapes RL validation prompts and scores; algorithm.kind={kind} validates its own sequences, so leave it empty")
    elif data.custom_cls.path is not None or agent:
        who = "a data.custom_cls dataset templates its own rows" if not agent else "rollout.agent's function writes its own prompts and reward"
        problems.append(f"{key}: {who}; drop {key}")
    templated = [e for e, s in data.val_file_settings.items() if s.chat_template is not None]
    if templated and data.tag_to_template:
        problems.append(f"{key}.{templated[0]}.chat_template: data.tag_to_template picks each row's template by its tag; keep one of them")
    elif templated and data.chat_template_name not in ("native", "qwen2_5", "qwen3"):
        problems.append(f"{key}.{templated[0]}.chat_template: data.chat_template_name {data.chat_template_name} writes its own "
                        "template, which would replace it; use native, or leave the entry's chat_template out")
    buf = getattr(getattr(cfg, "reward", None), "overlong_buffer", None)
    on = [e for e, s in data.val_file_settings.items() if s.overlong_penalty]
    budget = getattr(rollout, "response_length", None) or data.max_response_length
    end = (buf.max_resp_len or budget) if buf is not None else None
    if on and buf is not None and not buf.enable and not 1 <= buf.len <= end:
        problems.append(f"{key}.{on[0]}.overlong_penalty: the penalty ramps over the last reward.overlong_buffer.len tokens "
                        f"before {end}, and len is {buf.len}; set reward.overlong_buffer.len (1 to {end}) and penalty_factor")
    return problems

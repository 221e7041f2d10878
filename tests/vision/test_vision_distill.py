"""Distillation rows with images (ROLL's vision-language distillation): the student's and the teacher's
forwards both read the row's images, so the distillation sums are those of the models' own forwards
with the images; a run with image rows trains; what the image rows need of the teacher is checked."""

import io
import json

import pandas as pd
import pytest
import torch
import yaml
from PIL import Image
from safetensors.torch import load_file
from transformers import Qwen2Config, Qwen2ForCausalLM

from posttrain.config.dialects import translate
from posttrain.config.load import load_config
from posttrain.config.sections.distill import DistillConfig
from posttrain.data import build_sft_dataset, collate_sft
from posttrain.errors import ConfigError, DataError
from posttrain.models.loading import load_causal_lm, load_tokenizer
from posttrain.models.tiny import make_tiny_model
from posttrain.models.tiny_vl import make_tiny_vl_model
from posttrain.trainer.distill import distill_sums, run_distill
from posttrain.trainer.images import image_inputs
from posttrain.trainer.preflight import stage_inputs
from posttrain.trainer.stage import StageContext

# (question, answer, colour, side): two image sizes, so rows differ in length and image tokens
ROWS = [("What colour?", "red", (230, 20, 20), 16), ("Which colour is it?", "blue", (20, 20, 230), 32),
        ("Colour?", "green", (20, 200, 20), 16), ("Name the colour.", "red", (200, 30, 30), 32)]


def _png(rgb, side):
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), rgb).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_vl_dir):
    """ROLL's column names (problem, solution, image: one Hugging Face image struct per row), a second
    tiny Qwen2-VL as the teacher (same tokenizer, other weights) and a text-only model."""
    root = tmp_path_factory.mktemp("vl_distill")
    data = root / "geo.parquet"
    pd.DataFrame([{"problem": q, "solution": a, "image": {"bytes": _png(rgb, side), "path": None}}
                  for q, a, rgb, side in ROWS]).to_parquet(data)
    teacher = make_tiny_vl_model(root / "teacher", seed=1)
    text_model = make_tiny_model(root / "text", layers=1, hidden=32, seed=0)
    return root, tiny_vl_dir, teacher, text_model, data


def _text_teacher(root, vl_dir):
    """A text-only Qwen2 model with the vision-language model's tokenizer (the same vocabulary)."""
    tok = load_tokenizer(vl_dir)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    model.save_pretrained(root / "text_teacher")
    tok.save_pretrained(root / "text_teacher")
    return root / "text_teacher"


def _cfg(student, teacher, data, *extra):
    return load_config(None, [
        f"model.path={student}", f"data.train_files=[{data}]", "algorithm.kind=distill", f"algorithm.distill.teacher_path={teacher}",
        "data.prompt_key=problem", "data.response_key=solution", "data.image_key=image", "data.train_batch_size=4",
        "actor.ppo_micro_batch_size_per_gpu=2", "actor.optim.lr=1e-2", "trainer.total_training_steps=2", "trainer.logger=[jsonl]",
        "data.max_length=128", *extra])


def _examples(cfg, tok):
    dataset = build_sft_dataset(cfg.data, cfg.data.train_files, tok, images=image_inputs(cfg, tok))
    return [dataset[k] for k in range(len(dataset))]


def _own_sums(student, teacher, examples, on_prompt):
    """(sum NLL, sum forward KL over the whole vocabulary, positions) from each model's own Hugging
    Face forward on each row alone, unpadded, with its images (its own M-RoPE and image merge)."""
    nll = div = 0.0
    count = 0
    for e in examples:
        ids = torch.tensor([e.input_ids])  # (1, S)
        extra = {} if e.vision is None else {
            "pixel_values": e.vision.pixel_values, "image_grid_thw": e.vision.image_grid_thw,
            "mm_token_type_ids": (ids == student.config.image_token_id).int()}
        with torch.no_grad():
            s = torch.log_softmax(student(input_ids=ids, **extra).logits[0, :-1].double(), -1)  # (S-1, V)
            t = torch.log_softmax(teacher(input_ids=ids, **extra).logits[0, :-1].double(), -1)  # (S-1, V)
        trained = torch.ones(len(e.input_ids) - 1, dtype=torch.bool) if on_prompt else torch.tensor(e.loss_mask[1:]) > 0
        targets = ids[0, 1:][trained]
        nll += float(-s[trained].gather(-1, targets[:, None]).sum())
        div += float((t[trained].exp() * (t[trained] - s[trained])).sum())  # sum_j p_j (log p_j - log q_j)
        count += int(trained.sum())
    return nll, div, count


@pytest.mark.parametrize("on_prompt", [False, True])
def test_image_rows_distil_through_both_models_forwards_with_their_images(workdir, on_prompt):
    root, student_dir, teacher_dir, _, data = workdir
    tok = load_tokenizer(student_dir)
    student, teacher = load_causal_lm(student_dir), load_causal_lm(teacher_dir)
    cfg = _cfg(student_dir, teacher_dir, data)
    examples = _examples(cfg, tok)
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    # 16x16 -> 4 merged patches, 32x32 -> 16, all before the trained reply
    assert [e.input_ids.count(pad) for e in examples] == [4, 16, 4, 16]
    assert all(pad not in e.input_ids[e.loss_mask.index(1):] for e in examples)
    dcfg = DistillConfig(topk=0, on_prompt=on_prompt)
    with torch.no_grad():  # right-padded batch, rows of different lengths: posttrain's path
        nll, div, n = distill_sums(student, teacher, collate_sft(examples, tok.pad_token_id), dcfg,
                                   vision=[e.vision for e in examples])
    own = _own_sums(student, teacher, examples, on_prompt)
    assert int(n) == own[2]
    assert float(nll) == pytest.approx(own[0], rel=1e-4) and float(div) == pytest.approx(own[1], rel=1e-4)
    # the same rows read without their images (a column the file lacks): same tokens trained, other numbers
    text = _examples(_cfg(student_dir, teacher_dir, data, "data.image_key=no_such_column"), tok)
    assert all(e.vision is None and pad not in e.input_ids for e in text)
    with torch.no_grad():
        t_nll, t_div, t_n = distill_sums(student, teacher, collate_sft(text, tok.pad_token_id), dcfg, vision=[None] * len(text))
    assert abs(float(t_div) / int(t_n) - float(div) / int(n)) > 1e-4
    assert abs(float(t_nll) / int(t_n) - float(nll) / int(n)) > 1e-4


def test_a_batch_of_image_and_text_rows_gives_each_row_its_own_sums(workdir):
    """A text row beside image rows (its vision None) is the text model's forward; each row's sums
    are those of the row alone."""
    _, student_dir, teacher_dir, _, data = workdir
    tok = load_tokenizer(student_dir)
    student, teacher = load_causal_lm(student_dir), load_causal_lm(teacher_dir)
    images = _examples(_cfg(student_dir, teacher_dir, data), tok)
    texts = _examples(_cfg(student_dir, teacher_dir, data, "data.image_key=no_such_column"), tok)
    mixed = [images[0], texts[1], images[1]]
    with torch.no_grad():
        nll, div, n = distill_sums(student, teacher, collate_sft(mixed, tok.pad_token_id), DistillConfig(topk=0),
                                   vision=[e.vision for e in mixed])
    own = _own_sums(student, teacher, mixed, on_prompt=False)
    assert int(n) == own[2] and float(nll) == pytest.approx(own[0], rel=1e-4) and float(div) == pytest.approx(own[1], rel=1e-4)


def test_a_two_step_distillation_run_on_image_rows(workdir):
    """Two steps of the stage on the four image rows: step 1's logged loss is the models' own
    forwards with the images (token means, weight 0.5), and the student's vision tower is trained."""
    root, student_dir, teacher_dir, _, data = workdir
    cfg = _cfg(student_dir, teacher_dir, data, "algorithm.distill.topk=0")
    tok = load_tokenizer(student_dir)
    nll, div, n = _own_sums(load_causal_lm(student_dir), load_causal_lm(teacher_dir), _examples(cfg, tok), on_prompt=False)
    run_dir = root / "run"
    result = run_distill(StageContext("distill", cfg, run_dir, str(student_dir)))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "distill/loss" in r]
    assert [r["step"] for r in steps] == [1, 2] and result.steps == 2
    assert steps[0]["distill/nll"] == pytest.approx(nll / n, rel=1e-4)
    assert steps[0]["distill/divergence"] == pytest.approx(div / n, rel=1e-4)
    assert steps[0]["distill/loss"] == pytest.approx(0.5 * (nll + div) / n, rel=1e-4)
    before, after = load_file(student_dir / "model.safetensors"), load_file(result.final_model / "model.safetensors")
    tower = [k for k in before if "visual" in k]
    assert tower and any(not torch.equal(before[k], after[k]) for k in tower)
    assert (result.final_model / "preprocessor_config.json").is_file()


def test_what_image_rows_need_of_the_models_is_refused(workdir):
    root, student_dir, teacher_dir, text_model, data = workdir
    text_teacher = _text_teacher(root, student_dir)
    with pytest.raises(ConfigError, match=r"data.image_key \(image\) rows: the teacher .*, qwen2\) is a text-only model"):
        stage_inputs(_cfg(student_dir, text_teacher, data))
    other = make_tiny_vl_model(root / "other_patch", seed=1)
    config_path = other / "config.json"
    config = json.loads(config_path.read_text())
    config["vision_config"]["spatial_merge_size"] = 1
    config_path.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"other patches .*spatial_merge_size 1 vs 2"):
        stage_inputs(_cfg(student_dir, other, data))
    with pytest.raises(DataError, match=r"geo.parquet.*row 0.*a text-only model"):
        stage_inputs(_cfg(text_model, text_model, data))
    stage_inputs(_cfg(student_dir, teacher_dir, data))  # the pair of tiny Qwen2-VL models is accepted
    # text rows need nothing of the teacher: a text-only teacher of the same vocabulary is not asked for a tower
    stage_inputs(_cfg(student_dir, text_teacher, data, "data.image_key=no_such_column"))


def test_roll_s_vision_language_distillation_file_renders_its_rows_as_roll_does(workdir, tmp_path):
    """The data settings a ROLL qwen2-vl distillation file translates to, on ROLL's columns: the image
    span before the problem, the pipeline's question suffix, the solution then EOS (no newline), every
    token trained, and the image resized within the pipeline's pixel bounds."""
    root, student_dir, teacher_dir, _, data = workdir
    raw = {"student_pretrain": str(student_dir), "teacher_pretrain": str(teacher_dir), "sequence_length": 1024,
           "distill_on_prompt": False, "student": {"data_args": {"template": "qwen2-vl", "file_name": str(data)},
                                                    "training_args": {"per_device_train_batch_size": 2}}, "teacher": {}}
    native, report = translate(raw, "roll")
    assert not report.refused, [e.line() for e in report.refused]
    native["trainer"] = {"total_training_steps": 1, "logger": []}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(native))
    cfg = load_config(tmp_path / "run.yaml", [])
    assert cfg.algorithm.distill.on_prompt and cfg.data.image_key == "image" and cfg.data.max_length == 1024
    tok = load_tokenizer(student_dir)
    # "Which colour is it?" with a 32 x 32 image, raised to ROLL's 56 x 56 pixel minimum (as its smart_resize
    # does with a factor of 8): 14 x 14 patches of 4 pixels, 49 merged (16 without the bound)
    example = _examples(cfg, tok)[1]
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    assert example.input_ids.count(pad) == 49 and example.vision.image_grid_thw.tolist() == [[1, 14, 14]]
    reply = [t for t, m in zip(example.input_ids, example.loss_mask) if m]
    assert tok.decode(reply) == "blue<|im_end|>"  # the response; algorithm.distill.on_prompt trains the prompt too
    text = tok.decode(example.input_ids).replace("<|image_pad|>" * 49, "<|image_pad|>")
    user = "<|vision_start|><|image_pad|><|vision_end|>Which colour is it?  Output final answer (number) in <answer> </answer> tags."
    roll = tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True) + "blue" + "<|im_end|>"
    assert text == roll
    inputs = stage_inputs(cfg)  # the translated stage's own checks pass on the tiny pair
    assert len(inputs.train_set) == len(ROWS)

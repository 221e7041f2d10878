"""Reading a verl launch line out of a shell script (posttrain.config.dialects.launch_script)."""

from posttrain.config.dialects.launch_script import extract, launch_words

SCRIPT = r"""#!/bin/bash
set -x
# data prepared as verl's docs say: $HOME/data/gsm8k
gsm8k_train_path=$HOME/data/gsm8k/train.parquet
math_train_path=$HOME/data/math/train.parquet
train_files="['$gsm8k_train_path', '$math_train_path']"
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2-7B-Instruct}
max_prompt_length=$((1024 * 2))
max_response_length=1024
export VLLM_USE_V1=1
extra=(trainer.total_epochs=2 "trainer.project_name=my project")
if [ "$x" = 1 ]; then
    echo skipped
fi

PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$train_files" \
    data.max_prompt_length=${max_prompt_length} \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$(((max_prompt_length + max_response_length) * 2)) \
    actor_rollout_ref.model.path=$MODEL_PATH \
    trainer.logger='["console","wandb"]' \
    trainer.default_local_dir=$(pwd)/ckpt \
    "${extra[@]}" \
    trainer.total_training_steps=$STEPS $@ 2>&1 | tee log.txt
python3 -m verl.trainer.main_ppo trainer.nnodes=2
"""


def test_words_are_the_expanded_launch_line():
    found = extract(SCRIPT, {"HOME": "/home/me", "PWD": "/work"})
    assert found.words == [
        "algorithm.adv_estimator=grpo",
        "data.train_files=['/home/me/data/gsm8k/train.parquet', '/home/me/data/math/train.parquet']",
        "data.max_prompt_length=2048",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=6144",
        "actor_rollout_ref.model.path=Qwen/Qwen2-7B-Instruct",
        'trainer.logger=["console","wandb"]',
        "trainer.default_local_dir=/work/ckpt",
        "trainer.total_epochs=2",
        "trainer.project_name=my project",
        "trainer.total_training_steps=",
    ]
    # an unset variable is named, as bash would have expanded it to nothing
    assert found.unresolved == ["$x is not set (expanded to nothing)",
                                'if [ "$x" = 1 ]: a condition posttrain does not evaluate (every branch read, the last assignment wins)',
                                "$STEPS is not set (expanded to nothing)"]
    assert found.variables["VLLM_USE_V1"] == "1"


def test_defaults_and_trims_and_substitutions():
    text = r"""
A=${A:-first}
A=${A:-second}
B=${UNSET-dflt}
P=/models/Qwen/Qwen3-8B
name=$(basename $P)
dir=$(dirname "$P")
short=${P##*/}
stem=${P%/*}
swapped=${P//Qwen/QW}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python -m verl.trainer.main_ppo a=$A b=$B c=$name d=$dir e=$short f=$stem g=$swapped h=$here i=${1:-vllm} j=$(nvidia-smi -L | wc -l)
"""
    found = extract(text, {}, script="/src/run.sh")
    assert found.words == ["a=first", "b=dflt", "c=Qwen3-8B", "d=/models/Qwen", "e=Qwen3-8B", "f=/models/Qwen",
                           "g=/models/QW/QW3-8B", "h=/src", "i=vllm", "j="]
    assert found.unresolved == ["$(nvidia-smi -L | wc -l) is a command posttrain does not run (expanded to nothing)"]


def test_no_launch_line():
    assert launch_words("python3 -m verl.trainer.main_generation data.x=1\n") is None
    # verl's SFT trainer is a launch line of its own tree (posttrain.config.dialects.verl_sft)
    assert launch_words("torchrun -m verl.trainer.fsdp_sft_trainer data.x=1\n") == ["--config-name", "sft_trainer", "data.x=1"]
    # `-m` must precede the module: a path mentioning it is not the command
    assert launch_words("echo verl.trainer.main_ppo\n") is None


BRANCHES = r"""
backend=megatron # fsdp, fsdp2, megatron
adv=grpo
mode=${MODE:-sync}
if [[ $backend == "megatron" ]]; then
    CONFIG_NAME=ppo_megatron_trainer
    if [[ $adv == "gae" ]]; then
        CRITIC="critic.megatron.x=1"
    else
        CRITIC=""
    fi
elif [[ $backend == fsdp* ]]; then
    CONFIG_NAME=fsdp_glob
else # fsdp, fsdp2
    CONFIG_NAME=ppo_trainer
    CRITIC="critic.fsdp=1"
fi
if [ "$mode" = "async" ]; then EXTRA=async; else EXTRA=sync; fi
if [ "$mode" != sync ]; then
    python3 -m verl.trainer.main_ppo wrong=branch
fi
if [[ -n "$SLURM_JOB_ID" ]]; then
    WHERE=slurm
else
    WHERE=local
fi
if [ "$UNSET_VAR" = 1 ]; then
    SEEN=unset
fi
python3 -m verl.trainer.main_ppo --config-name=$CONFIG_NAME $CRITIC extra=$EXTRA where=$WHERE seen=${SEEN:-no}
"""


def test_if_branches_on_set_variables_are_taken_as_bash_would():
    found = extract(BRANCHES, {})
    assert found.words == ["--config-name=ppo_megatron_trainer", "extra=sync", "where=local", "seen=unset"]
    # conditions it does not evaluate read every branch (the last assignment wins) and are named
    assert found.unresolved == [
        'if [[ -n "$SLURM_JOB_ID" ]]: a condition posttrain does not evaluate (every branch read, the last assignment wins)',
        "$UNSET_VAR is not set (expanded to nothing)",
        'if [ "$UNSET_VAR" = 1 ]: a condition posttrain does not evaluate (every branch read, the last assignment wins)',
    ]
    assert extract(BRANCHES.replace("backend=megatron", "backend=fsdp2"), {}).words[0] == "--config-name=fsdp_glob"
    assert extract(BRANCHES.replace("backend=megatron", "backend=other"), {}).words[:2] == ["--config-name=ppo_trainer", "critic.fsdp=1"]
    async_run = extract(BRANCHES, {"MODE": "async"})
    assert async_run.words == ["wrong=branch"]  # the first launch line bash would run
    # a condition of two tests (&&, ||) is not evaluated, though its first test is one this reads
    compound = 'b=x\nif [[ $b == "y" ]] || [[ $b == "x" ]]; then A=1; else A=2; fi\npython -m verl.trainer.main_ppo a=$A\n'
    found = extract(compound, {})
    assert found.words == ["a=2"] and found.unresolved == [
        'if [[ $b == "y" ]] ... [[ $b == "x" ]]: a condition posttrain does not evaluate (every branch read, the last assignment wins)']


def test_integer_comparisons_are_judged_as_bash_would():
    script = ('SP=${SP_SIZE:-1}\nif [ "${SP}" -gt 1 ]; then CP=on; fi\nif [[ $SP -eq 1 ]]; then ONE=yes; else ONE=no; fi\n'
              'if [ "$SP" -le 0 ]; then LOW=yes; fi\nif [ "$NAME" -ge 2 ]; then ODD=1; fi\n'
              'python -m verl.trainer.main_ppo cp=${CP:-off} one=$ONE low=${LOW:-no} odd=${ODD:-0}\n')
    found = extract(script, {"NAME": "abc"})
    assert found.words == ["cp=off", "one=yes", "low=no", "odd=1"]  # a non-integer operand: every branch read
    assert found.unresolved == ['if [ "$NAME" -ge 2 ]: a condition posttrain does not evaluate (every branch read, the last assignment wins)']
    assert extract(script, {"SP_SIZE": "4"}).words == ["cp=on", "one=no", "low=no", "odd=1"]


def test_an_escaped_space_before_a_comment_ends_the_command_as_in_bash():
    # verl's run_deepseek7b_llm_pfppo.sh: `\ ` is a word holding one space, and the `#` after it is a
    # comment that ends the command, so the lines below it are not part of the launch (bash runs them
    # as a command of their own)
    script = "python3 -m verl.trainer.main_ppo \\\n    a=1 \\  # a note\n    b=2 \\\n    c=3\n"
    assert launch_words(script) == ["a=1", " "]


def test_the_blank_word_is_refused_saying_verl_fails_on_it_too():
    import pytest

    from posttrain.config import load_config
    from posttrain.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        load_config(None, ["algorithm.adv_estimator=gae", " "], dialect="verl")
    (line,) = [str(p) for p in err.value.problems]
    assert line.startswith("command line override ' ': a blank word, not an override, which Hydra refuses too: verl fails")
    assert "put the comment on a line of its own" in line and "\n" not in line


CASES = r"""
LOSS_MODE=${LOSS_MODE:-dppo_tv}
case $LOSS_MODE in
    dppo_tv)  CLIP=0.15 ;;
    dppo_kl | kl)  CLIP=0.05 ;;
    "literal*") CLIP=lit ;;
    *) echo "Unknown LOSS_MODE: $LOSS_MODE"; exit 1 ;;
esac
DEVICE=${DEVICE:-$(python3 -c 'import posttrain_no_such_module' 2>/dev/null && echo npu || echo gpu)}
HAVE_TORCH=$(python3 -c 'import torch' 2>/dev/null && echo yes || echo no)
case "${DEVICE}" in
    gpu)
        TP=2
        case $LOSS_MODE in dppo_*) INNER=dppo ;; *) INNER=other ;; esac
        ;;
    npu)
        TP=4
        ;;
esac
case "$(hostname)" in
    a*) HOST=a ;;
    b*) HOST=b ;;
esac
if [ "$(hostname)" = x ]; then WHERE=x; else WHERE=y; fi
python3 -m verl.trainer.main_ppo clip=$CLIP tp=$TP device=$DEVICE torch=$HAVE_TORCH inner=$INNER host=$HOST where=$WHERE
"""


def test_case_takes_the_first_matching_clause_and_import_probes_ask_this_machine():
    found = extract(CASES, {})
    # the module is not installed here: the probe prints its second word, as bash would here
    assert found.words == ["clip=0.15", "tp=2", "device=gpu", "torch=yes", "inner=dppo", "host=b", "where=y"]
    assert extract(CASES, {"LOSS_MODE": "kl"}).words[:1] == ["clip=0.05"]  # `a | b)`: either pattern
    assert extract(CASES, {"LOSS_MODE": "literal*"}).words[:1] == ["clip=lit"]  # a quoted pattern is literal
    assert extract(CASES, {"LOSS_MODE": "literalX"}).words[:1] == ["clip="]  # `*)` echoes and exits: no CLIP
    npu = extract(CASES, {"DEVICE": "npu"})
    assert npu.words[1:3] == ["tp=4", "device=npu"] and "inner=" in npu.words  # the inner case of the gpu clause did not run
    # a word that stands on a command posttrain does not run: every clause is read (the last assignment
    # wins), and so is every branch of an `if` on it
    assert found.unresolved == [
        "$(hostname) is a command posttrain does not run (expanded to nothing)",
        'case "$(hostname)" in: a case word posttrain does not know (every clause read, the last assignment wins)',
        'if [ "$(hostname)" = x ]: a condition posttrain does not evaluate (every branch read, the last assignment wins)',
    ]
    guessed = "H=$(hostname)\nif [ \"$H\" = x ]; then W=x; else W=y; fi\npython -m verl.trainer.main_ppo w=$W\n"
    assert extract(guessed, {}).unresolved[-1].startswith('if [ "$H" = x ]: a condition posttrain does not evaluate')

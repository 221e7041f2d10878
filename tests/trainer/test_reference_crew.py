"""The reference on devices of its own (posttrain.trainer.reference_crew): the wire between the
trainer's client and the crew carries the forward's inputs and the log-probs unchanged, the crew's
failures reach the trainer as one message, and the config places, refuses and plans the layouts.
The runs through the real command are in test_reference_crew_runs.py."""

from __future__ import annotations

import threading

import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM
from worker_helpers import make_batch

from posttrain.cluster.world import World
from posttrain.config.access import reference_crew_devices, training_devices, world_size
from posttrain.config.checks import check_device_mapping
from posttrain.config.dialects import translate
from posttrain.config.load import load_config
from posttrain.config.plan import _placement_rows
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from posttrain.trainer.reference_crew import CrewEnd, ReferenceCrewClient, ReferenceCrewError, forward_rows, serve
from posttrain.workers import ReferencePolicy


class Recording:
    """A reference that records what reached it and answers with a pure function of the rows."""

    def __init__(self, fail_on: int | None = None):
        self.seen, self.fail_on = [], fail_on

    def compute_logprobs(self, batch):
        self.seen.append(batch)
        if len(self.seen) == self.fail_on:
            raise RuntimeError("out of memory on the reference's device")
        return batch.response_ids.float() * -0.125 * batch.response_mask  # (B, T)


def crew_thread(tmp_path, reference, timeout_s: float = 20.0):
    """The crew's rank 0 (a crew of one) in a thread of this process: joins the trainer, serves until it
    stops. `reference`: the reference, or a dict of the models it serves by request name."""
    models = reference if isinstance(reference, dict) else {"": reference}
    result = {}

    def run():
        end = CrewEnd(tmp_path, timeout_s)
        end.connect()
        try:
            result["served"] = serve(models, World(), end)
        except Exception as err:  # noqa: BLE001 - the test reads it
            result["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_the_crew_receives_the_forward_inputs_and_the_trainer_its_answer_bit_for_bit(tmp_path):
    client = ReferenceCrewClient(tmp_path, World(), timeout_s=20)
    reference = Recording()
    thread, result = crew_thread(tmp_path, reference)
    batches = [make_batch(50, seed=s) for s in (0, 1)]
    for batch in batches:
        got = client.compute_logprobs(batch)
        assert got.dtype == torch.float32 and torch.equal(got, batch.response_ids.float() * -0.125 * batch.response_mask)
    client.close()  # the crew leaves on the trainer's stop
    thread.join(timeout=10)
    assert result == {"served": 2}
    for sent, seen in zip(batches, reference.seen):
        for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "weights_version"):
            assert torch.equal(getattr(sent, name), getattr(seen, name)), name
        assert seen.group_index == sent.group_index and seen.data_source == [""] * len(sent)  # texts stay behind


class Scaled(Recording):
    """Another model: the same rows, another answer."""

    def compute_logprobs(self, batch):
        return super().compute_logprobs(batch) * 3


def test_each_request_is_answered_by_the_model_it_names(tmp_path):
    """The reference and ref.teachers in one crew: a teacher's role asks through the same client."""
    from posttrain.trainer.reference_crew import CrewModel

    client = ReferenceCrewClient(tmp_path, World(), timeout_s=20)
    reference, math = Recording(), Scaled()
    thread, result = crew_thread(tmp_path, {"": reference, "math": math})
    batch = make_batch(50, seed=2)
    plain = batch.response_ids.float() * -0.125 * batch.response_mask
    assert torch.equal(CrewModel(client, "math").compute_logprobs(batch), plain * 3)
    assert torch.equal(client.compute_logprobs(batch), plain)
    assert (len(reference.seen), len(math.seen)) == (1, 1)
    with pytest.raises(ReferenceCrewError, match=r"KeyError: .*the crew serves \['', 'math'\], not 'code'"):
        CrewModel(client, "code").compute_logprobs(batch)
    thread.join(timeout=10)
    assert "not 'code'" in str(result["error"])


def test_a_tiny_model_s_log_probs_through_the_crew_equal_the_colocated_reference(tmp_path):
    model = AutoModelForCausalLM.from_pretrained(make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, seed=0))
    colocated = ReferencePolicy(model, temperature=0.7, micro_batch_size=3)
    batch = make_batch(model.config.vocab_size, seed=3)
    expected = colocated.compute_logprobs(batch)  # (B, T)
    client = ReferenceCrewClient(tmp_path / "run", World(), timeout_s=20)
    thread, _ = crew_thread(tmp_path / "run", ReferencePolicy(model, temperature=0.7, micro_batch_size=3))
    assert torch.equal(client.compute_logprobs(batch), expected)
    client.close()
    thread.join(timeout=10)


def test_a_crew_failure_reaches_the_trainer_as_one_message_and_a_silent_crew_times_out(tmp_path):
    client = ReferenceCrewClient(tmp_path, World(), timeout_s=20)
    thread, result = crew_thread(tmp_path, Recording(fail_on=2))
    client.compute_logprobs(make_batch(50))
    with pytest.raises(ReferenceCrewError, match="the reference crew failed on a request for log-probs: RuntimeError: out of memory"):
        client.compute_logprobs(make_batch(50))
    thread.join(timeout=10)
    assert "out of memory" in str(result["error"])
    nobody = ReferenceCrewClient(tmp_path / "other", World(), timeout_s=0.3)
    with pytest.raises(ReferenceCrewError, match=r"timed out waiting for the reference crew .* to come up: nothing within cluster.rpc_timeout_s=0.3 s"):
        nobody.compute_logprobs(make_batch(50))


def test_forward_rows_keeps_what_the_forward_reads_on_the_cpu():
    batch = make_batch(50)
    batch.ref_logprobs = torch.ones_like(batch.response_mask)
    rows = forward_rows(batch)
    assert rows.ref_logprobs is None and rows.raw_prompt == [""] * len(batch)
    assert torch.equal(rows.response_ids, batch.response_ids) and rows.response_ids.device.type == "cpu"


# ---------------------------------------------------------------- placement


def cfg(*overrides: str):
    return load_config(None, ["actor.use_kl_loss=true", *overrides])


def test_a_ref_list_apart_from_the_actor_s_is_a_crew_and_the_trainer_keeps_its_own_devices():
    crew = cfg("cluster.n_gpus_per_node=4", "cluster.device_mapping.actor=[0,1]", "cluster.device_mapping.ref=[2,3]")
    assert (reference_crew_devices(crew), world_size(crew), training_devices(crew)) == ([2, 3], 2, [0, 1])
    same = cfg("cluster.n_gpus_per_node=2", "cluster.device_mapping.actor=[0,1]", "cluster.device_mapping.ref=[0,1]")
    assert (reference_crew_devices(same), world_size(same)) == (None, 2)  # colocated: every trainer worker hosts it
    # the reference's sharding keys act in its crew of 2, the actor alone in its process
    assert cfg("cluster.n_gpus_per_node=3", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.ref=[1,2]",
               "ref.fsdp_config.fsdp_size=2", "ref.ulysses_sequence_parallel_size=2").ref.fsdp_config.fsdp_size == 2
    alone = cfg("cluster.n_gpus_per_node=2", "cluster.device_mapping.ref=[0,1]")  # no actor list: the ref list is the trainer's
    assert (reference_crew_devices(alone), world_size(alone)) == (None, 2)
    # some of the trainer's devices (ROLL's reference on the devices its engines leave free): a crew sharing them
    inside = cfg("cluster.n_gpus_per_node=4", "cluster.device_mapping.actor=[0,1,2,3]", "cluster.device_mapping.rollout=[0,1]",
                 "cluster.device_mapping.ref=[2,3]")
    assert (reference_crew_devices(inside), world_size(inside), training_devices(inside)) == ([2, 3], 4, [0, 1, 2, 3])
    rows = {label: how for label, _, how in _placement_rows(inside)}
    assert rows["reference devices"].startswith("a reference crew of 2 process(es) of its own on devices it shares with trainer workers")
    assert rows["training devices"] == "4 trainer process(es), each hosting the actor"


@pytest.mark.parametrize("overrides, message", [
    (["cluster.n_gpus_per_node=4", "cluster.device_mapping.actor=[0,1]", "cluster.device_mapping.ref=[1,2]"],
     "a list that names some of the actor's devices and others is neither"),
    (["cluster.n_gpus_per_node=4", "cluster.device_mapping.actor=[0,1,2,3]", "cluster.device_mapping.rollout=[0,1]", "cluster.device_mapping.ref=[1,2]"],
     "the reference's devices [1, 2] share devices with the rollout's [0, 1]: a reference crew needs devices apart from the engines'"),
    (["cluster.n_gpus_per_node=4", "cluster.device_mapping.actor=[0,1]", "cluster.device_mapping.critic=[2,3]", "cluster.device_mapping.ref=[2,3]"],
     "every trainer worker hosts the actor and the critic"),
    (["cluster.n_gpus_per_node=4", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.rollout=[1,2]", "cluster.device_mapping.ref=[2,3]"],
     "the reference's devices [2, 3] share devices with the rollout's [1, 2]"),
    (["cluster.n_gpus_per_node=3", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.ref=[1,3]"],
     "the reference's device 3 is past the 3 of cluster.nnodes × cluster.n_gpus_per_node"),
    (["cluster.n_gpus_per_node=3", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.ref=[1,1]"],
     "the reference's devices [1, 1] name a device twice"),
    (["cluster.n_gpus_per_node=4", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.ref=[1,2,3]", "ref.ulysses_sequence_parallel_size=2"],
     "ref.ulysses_sequence_parallel_size=2 does not divide the reference crew's 3 process(es)"),
    (["cluster.n_gpus_per_node=3", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.ref=[1,2]", "ref.fsdp_config.fsdp_size=3"],
     "ref.fsdp_config.fsdp_size=3 does not divide the 2 worker processes"),
])
def test_layouts_the_crew_cannot_run_are_refused_at_load(overrides, message):
    with pytest.raises(ConfigError) as err:
        cfg(*overrides)
    assert message in str(err.value)


def test_a_crew_with_stages_is_refused_and_one_with_teachers_serves_them():
    raw = OmegaConf.create({"cluster": {"n_gpus_per_node": 2, "device_mapping": {"actor": [0], "ref": [1]}}, "stages": [{"name": "a"}]})
    assert any("a config with stages runs the reference on the trainer workers" in p for p in check_device_mapping(raw))
    raw = OmegaConf.create({"cluster": {"n_gpus_per_node": 2, "device_mapping": {"actor": [0], "ref": [1]}},
                            "ref": {"teachers": {"math": {"model_path": "/m"}}}})
    assert check_device_mapping(raw) == []  # ROLL's teachers on devices of their own: the crew holds them


def test_the_plan_shows_which_devices_train_generate_and_hold_the_reference():
    rows = {label: (value, how) for label, value, how in _placement_rows(cfg(
        "cluster.n_gpus_per_node=8", "cluster.device_mapping.actor=[0,1,2,3]", "cluster.device_mapping.rollout=[4,5]",
        "cluster.device_mapping.ref=[6,7]"))}
    assert rows["training devices"] == ("0..3", "4 trainer process(es), each hosting the actor")
    assert rows["rollout devices"] == ("4..5", "split: an explorer of 2 engine process(es) beside the trainer")
    assert rows["reference devices"][0] == "6..7" and "a reference crew of 2 process(es)" in rows["reference devices"][1]
    colocated = {label: how for label, _, how in _placement_rows(cfg("cluster.n_gpus_per_node=2", "cluster.device_mapping.actor=[0,1]"))}
    assert colocated["training devices"] == "2 trainer process(es), each hosting the actor, reference"
    idle = {label: how for label, _, how in _placement_rows(load_config(None, [
        "cluster.n_gpus_per_node=2", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.ref=[1]"]))}
    assert idle["reference devices"].startswith("no reference is needed (no KL term)")


ROLL_FILE = """
num_gpus_per_node: 8
rollout_batch_size: 8
num_return_sequences_in_group: 2
use_kl_loss: true
actor_train:
  device_mapping: list(range(0,4))
  training_args: {per_device_train_batch_size: 1, gradient_accumulation_steps: 2}
actor_infer:
  device_mapping: list(range(4,6))
reference:
  device_mapping: list(range(6,8))
"""


def test_a_roll_file_with_the_reference_on_devices_of_its_own_plans_a_crew(tmp_path):
    (tmp_path / "rlvr.yaml").write_text(ROLL_FILE)
    loaded = load_config(str(tmp_path / "rlvr.yaml"), [], dialect="roll")
    assert (reference_crew_devices(loaded), world_size(loaded)) == ([6, 7], 4)
    rows = {label: (value, how) for label, value, how in _placement_rows(loaded)}
    assert rows["reference devices"][0] == "6..7" and rows["reference devices"][1].startswith("a reference crew of 2 process(es)")


def test_roll_s_reference_on_devices_of_its_own_translates_to_a_crew_and_inside_the_trainer_s_is_refused():
    roll = {"num_gpus_per_node": 8, "actor_train": {"device_mapping": "list(range(0,4))"},
            "actor_infer": {"device_mapping": "list(range(4,6))"}, "reference": {"device_mapping": "list(range(6,8))"}}
    native, report = translate(roll, "roll")
    assert native["cluster"]["device_mapping"] == {"actor": [0, 1, 2, 3], "rollout": [4, 5], "ref": [6, 7]}
    assert not [e for e in report.entries if e.status == "refused"]
    # ROLL's reference on the trainer's devices its engines leave free: a crew sharing them with trainer workers
    free = {**roll, "actor_train": {"device_mapping": "list(range(0,8))"}, "actor_infer": {"device_mapping": "list(range(0,4))"},
            "reference": {"device_mapping": "list(range(4,8))"}}
    native, report = translate(free, "roll")
    # the actor's list stays written out (every device of the node): the reference's is some of it
    assert native["cluster"]["device_mapping"] == {"actor": list(range(8)), "rollout": [0, 1, 2, 3], "ref": [4, 5, 6, 7]}
    assert not [e for e in report.entries if e.status == "refused"]
    loaded = load_config(None, ["actor.use_kl_loss=true", "cluster.n_gpus_per_node=8",
                                *(f"cluster.device_mapping.{k}={v}" for k, v in native["cluster"]["device_mapping"].items())])
    assert (reference_crew_devices(loaded), world_size(loaded)) == ([4, 5, 6, 7], 8)
    inside = {**roll, "actor_infer": {"device_mapping": "list(range(0,4))"}, "reference": {"device_mapping": "list(range(2,4))"}}
    _, report = translate(inside, "roll")
    refused = [e for e in report.entries if e.status == "refused" and e.key == "reference.device_mapping"]
    assert refused and "the reference on devices of its own shares devices with actor_infer" in refused[0].reason
    partly = {**roll, "reference": {"device_mapping": "list(range(3,5))"}}  # one of the trainer's devices and one engine's
    _, report = translate(partly, "roll")
    refused = [e for e in report.entries if e.status == "refused" and e.key == "reference.device_mapping"]
    assert refused and "not on some of them and others" in refused[0].reason


# ---------------------------------------------------------------- the launcher


class FakeProcess:
    """What the launcher's `watch` asks of a process: ends with `code` after `polls` polls, or on a signal."""

    def __init__(self, code: int | None, polls: int = 0):
        self.code, self.polls, self.returncode, self.signals, self.pid = code, polls, None, [], 0

    def poll(self):
        if self.returncode is None and self.code is not None:
            self.polls -= 1
            if self.polls < 0:
                self.returncode = self.code
        return self.returncode

    def send_signal(self, sig):
        self.signals.append(sig)
        self.returncode = -sig

    def wait(self, timeout=None):
        return self.returncode

    kill = wait


def test_the_crew_is_stopped_once_the_trainer_has_finished_and_a_failed_crew_fails_the_run(tmp_path, monkeypatch, capsys):
    import signal

    from posttrain.cluster import launch

    monkeypatch.setattr(launch, "GRACE_S", 0.3)
    logs = [tmp_path / "trainer.log", tmp_path / "reference.log"]
    trainer, crew = FakeProcess(0, polls=1), FakeProcess(None)  # a crew that never leaves on its own (it found no trainer)
    assert launch.watch([trainer, crew], logs, names=["the trainer process", "the crew"], helpers={1}) == 0
    assert crew.signals == [signal.SIGTERM]
    trainer, crew = FakeProcess(None), FakeProcess(1)  # the crew fails: the trainer is stopped, the crew named
    assert launch.watch([trainer, crew], logs, names=["the trainer process", "the crew"], helpers={1}) == 1
    assert trainer.signals == [signal.SIGKILL]
    assert "posttrain: error: the crew exited with status 1; the run stopped" in capsys.readouterr().err

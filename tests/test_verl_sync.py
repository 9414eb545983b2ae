"""trainer.v1.trainer_mode=groupwise takes verl's sync paths (groupwise.integrations.verl.trainer,
SYNC_MODE): every branch verl 0.9.1's base trainer takes on its mode name gives GroupwiseTrainer
what it gives verl's own PPOTrainerSync (built from verl's Hydra config, `trainer_mode=sync`),
and a verl whose trainers branch on the mode name anywhere else fails here with the site named."""

from __future__ import annotations

import ast
import inspect
import json
import os
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from transformers import AutoTokenizer
from verl.trainer.ppo.v1 import get_trainer_cls
from verl.trainer.ppo.v1 import trainer_base as verl_trainer_base
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl_support import verl_config

from groupwise.data.synthetic import generate_problems
from groupwise.integrations.verl.data import verl_rows, write_parquet
from groupwise.integrations.verl.trainer import STATE_FILE, GroupwiseTrainer
from groupwise.shipped_models import smollm2_tokenizer_dir

# Every place in verl 0.9.1's package that reads the trainer mode (the attribute, the config key,
# or a string naming it), by (file, Class.method): what SYNC_MODE was checked against. A verl that
# adds one fails test_verl_mode_reads_are_known.
KNOWN_SITES = {
    # get_trainer_cls(config.trainer.v1.trainer_mode): "groupwise", before the trainer is built
    ("trainer/main_ppo.py", "TaskRunnerV1.run"),
    # the mode handed to the replay buffer and kept (sync: ReplayBuffer, compared below)
    ("trainer/ppo/v1/replay_buffer.py", "ReplayBuffer.__init__"),
    # the config key, read after GroupwiseTrainer set it to "sync", and trainer.v1.sync settings
    ("trainer/ppo/v1/trainer_base.py", "PPOTrainer.__init__"),
    # the six branches on self.trainer_mode == "sync", each compared with PPOTrainerSync below
    ("trainer/ppo/v1/trainer_base.py", "PPOTrainer._build_replay_buffer"),
    ("trainer/ppo/v1/trainer_base.py", "PPOTrainer._init_dataloader"),
    ("trainer/ppo/v1/trainer_base.py", "PPOTrainer._load_checkpoint"),
    ("trainer/ppo/v1/trainer_base.py", "PPOTrainer._reissue_inflight_prompts"),
    ("trainer/ppo/v1/trainer_base.py", "PPOTrainer._save_checkpoint"),
    ("trainer/ppo/v1/trainer_base.py", "PPOTrainer._submit_batch_to_rollout"),
    # trainer.v1.<config key>.parameter_sync_step: trainer.v1.sync's, as verl's sync trainer's
    ("utils/skip/rollout_skip.py", "RolloutTqSkip.__init__"),
}
TRAIN_BATCH = 4


class RecordingQueue:
    """verl's TransferQueue calls of the trainer's branches, recorded instead of sent (the sync
    and async paths differ in which calls they make and with what)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def kv_batch_put(self, **kwargs) -> None:
        self.calls.append(("kv_batch_put", kwargs))

    def save_checkpoint(self, path: str, **kwargs) -> None:
        self.calls.append(("save_checkpoint", {"path": path}))
        os.makedirs(path)

    def load_checkpoint(self, path: str) -> None:
        self.calls.append(("load_checkpoint", {"path": path}))

    def kv_list(self, partition_id: str) -> dict:
        self.calls.append(("kv_list", {"partition_id": partition_id}))
        return {}


class Recorder:
    """The worker group or agent loop manager a branch calls: records, writes what verl's own
    would (an actor checkpoint folder)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def save_checkpoint(self, local_path: str, *args, **kwargs) -> None:
        self.calls.append("save_checkpoint")
        os.makedirs(local_path)

    def load_checkpoint(self, local_path: str, **kwargs) -> None:
        self.calls.append("load_checkpoint")

    def generate_sequences(self, batch) -> None:
        self.calls.append("generate_sequences")


@pytest.fixture(scope="module")
def data_files(tmp_path_factory) -> Path:
    problems = generate_problems("train", level="easy", size=2 * TRAIN_BATCH, seed=0)
    path = tmp_path_factory.mktemp("verl-data") / "train.parquet"
    return write_parquet(verl_rows(problems, "arith", "amir", "groupwise"), path)


def trainer(mode: str, tmp_path: Path, data: Path, *overrides: str):
    """verl's trainer of `mode` (sync: PPOTrainerSync; groupwise: GroupwiseTrainer) built from
    verl's config as main_ppo builds it (__init__ only: no worker starts)."""
    estimator = "grpo" if mode == "sync" else "groupwise_grpo"
    config = verl_config(
        f"trainer.v1.trainer_mode={mode}",
        f"algorithm.adv_estimator={estimator}",
        "actor_rollout_ref.rollout.n=2",
        "trainer.device=cpu",
        f"data.train_batch_size={TRAIN_BATCH}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        f"data.train_files={data}",
        f"data.val_files={data}",
        "data.dataloader_num_workers=0",
        f"trainer.default_local_dir={tmp_path / mode}",
        *overrides,
    )
    return get_trainer_cls(mode)(config)


def test_groupwise_is_found_by_its_name_and_is_verl_sync_trainer(tmp_path, data_files) -> None:
    groupwise = trainer("groupwise", tmp_path, data_files)
    assert type(groupwise) is GroupwiseTrainer and isinstance(groupwise, PPOTrainerSync)
    # every reader of the mode sees verl's sync mode: the attribute and the config key
    assert groupwise.config.trainer.v1.trainer_mode == "sync"
    assert groupwise.trainer_mode == "sync"


def test_the_replay_buffer_is_verl_sync_one(tmp_path, data_files) -> None:
    sync = trainer("sync", tmp_path, data_files)
    groupwise = trainer("groupwise", tmp_path, data_files)
    # ReplayBufferAsync is a subclass of ReplayBuffer: the class itself must be the sync one
    assert type(sync.replay_buffer) is ReplayBuffer
    assert type(groupwise.replay_buffer) is ReplayBuffer
    for name in ("trainer_mode", "train_batch_size", "gen_batch_size", "max_inflight_gen_batches"):
        assert getattr(groupwise.replay_buffer, name) == getattr(sync.replay_buffer, name), name
    assert groupwise.replay_buffer.gen_batch_size == TRAIN_BATCH
    assert groupwise.parameter_sync_step == sync.parameter_sync_step == 1


def test_the_dataloader_fetches_whole_batches_as_sync(tmp_path, data_files) -> None:
    """verl's refill rule: the async modes force data.gen_batch_size=1 (exact refill, one prompt
    per fetch); the sync mode fetches train_batch_size prompts at once."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir())
    batches = {}
    for mode in ("sync", "groupwise"):
        built = trainer(mode, tmp_path, data_files)
        built.tokenizer, built.processor = tokenizer, None
        built._init_dataloader()
        batches[mode] = (built.config.data.get("gen_batch_size"), built.train_dataloader.batch_size)
    assert batches["groupwise"] == batches["sync"] == (None, TRAIN_BATCH)


def submitted(mode: str, tmp_path: Path, data: Path, monkeypatch) -> tuple[list, list]:
    queue, manager = RecordingQueue(), Recorder()
    monkeypatch.setattr(verl_trainer_base, "tq", queue)
    built = trainer(mode, tmp_path, data)
    built.agent_loop_manager, built.global_steps = manager, 1
    batch = TensorDict({"input_ids": torch.ones(2, 3, dtype=torch.int64)}, batch_size=2)
    batch["uid"] = ["a", "b"]
    assert built._submit_batch_to_rollout(batch) == 2
    return queue.calls, manager.calls


def test_submitting_prompts_registers_tags_only_as_sync(tmp_path, data_files, monkeypatch) -> None:
    """The async modes also store every prompt's fields in TransferQueue (for their checkpoint
    recovery); the sync mode registers the prompts' tags only."""
    sync = submitted("sync", tmp_path, data_files, monkeypatch)
    groupwise = submitted("groupwise", tmp_path, data_files, monkeypatch)
    assert groupwise == sync
    [(call, kwargs)] = groupwise[0]
    assert call == "kv_batch_put" and "fields" not in kwargs
    assert groupwise[1] == ["generate_sequences"]


def saved(mode: str, tmp_path: Path, data: Path, monkeypatch, *overrides: str):
    """The checkpoint folder of step 3 (its files, sorted) and the TransferQueue calls."""
    queue = RecordingQueue()
    monkeypatch.setattr(verl_trainer_base, "tq", queue)
    built = trainer(mode, tmp_path, data, *overrides)
    built.actor_rollout_wg, built.global_steps = Recorder(), 3
    built.train_dataloader = type("Loader", (), {"state_dict": lambda self: {"step": 3}})()
    built._save_checkpoint()
    root = Path(built.config.trainer.default_local_dir)
    files = sorted(str(path.relative_to(root)) for path in root.rglob("*"))
    return files, queue.calls


def test_the_checkpoint_folder_holds_what_sync_writes(tmp_path, data_files, monkeypatch) -> None:
    sync_files, sync_calls = saved("sync", tmp_path, data_files, monkeypatch)
    files, calls = saved("groupwise", tmp_path, data_files, monkeypatch)
    assert files == sync_files
    assert files == [
        "global_step_3",
        "global_step_3/actor",
        "global_step_3/data.pt",
        "latest_checkpointed_iteration.txt",
    ]
    assert calls == sync_calls == []  # no TransferQueue state
    amir = ["+algorithm.groupwise.amir=true", "+algorithm.groupwise.margin=0.5"]
    files, _ = saved("groupwise", tmp_path / "amir", data_files, monkeypatch, *amir)
    assert files == sorted([*sync_files, f"global_step_3/{STATE_FILE}"])


def resumed(mode: str, tmp_path: Path, data: Path, monkeypatch) -> tuple[int, list, int]:
    """Resume from a step-2 folder that also holds an async mode's TransferQueue state: the global
    step, the TransferQueue calls of loading and re-issuing, and the prompts re-issued."""
    folder = tmp_path / f"resume-{mode}" / "global_step_2"
    (folder / "transfer_queue").mkdir(parents=True)
    (folder.parent / "latest_checkpointed_iteration.txt").write_text("2")
    queue = RecordingQueue()
    monkeypatch.setattr(verl_trainer_base, "tq", queue)
    built = trainer(mode, tmp_path, data, f"trainer.default_local_dir={folder.parent}")
    built.actor_rollout_wg = Recorder()
    built.train_dataloader = type("Loader", (), {"load_state_dict": lambda self, state: None})()
    built._load_checkpoint()
    return built.global_steps, queue.calls, built._reissue_inflight_prompts()


def test_resuming_restores_what_sync_restores(tmp_path, data_files, monkeypatch) -> None:
    sync = resumed("sync", tmp_path, data_files, monkeypatch)
    groupwise = resumed("groupwise", tmp_path, data_files, monkeypatch)
    assert groupwise == sync == (2, [], 0)


@pytest.mark.parametrize("resume_mode", ["auto", "resume_path"])
def test_lambda_comes_from_the_checkpoint_verl_resumes(
    resume_mode: str, tmp_path, data_files, monkeypatch
) -> None:
    """verl's auto mode resumes the latest step of trainer.default_local_dir and ignores
    trainer.resume_from_path; resume_path resumes that one. lambda follows the weights."""
    latest, other = tmp_path / "run" / "global_step_3", tmp_path / "other" / "global_step_2"
    for folder, value in ((latest, 0.05), (other, 0.02)):
        folder.mkdir(parents=True)
        (folder / STATE_FILE).write_text(json.dumps({"lambda_reg": {"value": value}}))
    (latest.parent / "latest_checkpointed_iteration.txt").write_text("3")
    monkeypatch.setattr(verl_trainer_base, "tq", RecordingQueue())
    amir = ["+algorithm.groupwise.amir=true", "+algorithm.groupwise.margin=0.5"]
    built = trainer(
        "groupwise",
        tmp_path,
        data_files,
        *amir,
        f"trainer.default_local_dir={latest.parent}",
        f"trainer.resume_mode={resume_mode}",
        f"trainer.resume_from_path={other}",
    )
    built.actor_rollout_wg = Recorder()
    built.train_dataloader = type("Loader", (), {"load_state_dict": lambda self, state: None})()
    built._load_checkpoint()
    expected = {"auto": (3, 0.05), "resume_path": (2, 0.02)}[resume_mode]
    assert (built.global_steps, built.algorithm.lambda_reg.value) == expected


def mode_reads(source: str, file: str) -> set[tuple[str, str]]:
    """(file, Class.method) of every read of the trainer mode in `source`: the attribute
    `trainer_mode` (self's or a config's, in a comparison, a lookup, a match or a call), a
    variable of that name, or a string naming it (a config path such as
    "trainer.v1.trainer_mode"; prose in docstrings aside)."""
    sites = set()

    def reads(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute | ast.Name):
            name = node.attr if isinstance(node, ast.Attribute) else node.id
            return name == "trainer_mode" and isinstance(node.ctx, ast.Load)
        return (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "trainer_mode" in node.value
            and " " not in node.value
        )

    def visit(node: ast.AST, scope: list[str]) -> None:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            scope = [*scope, node.name]
        if reads(node):
            sites.add((file, ".".join(scope) or "<module>"))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(ast.parse(source), [])
    return sites


def test_verl_mode_reads_are_known() -> None:
    """Every place in verl's package that reads the trainer mode: a new one (a verl upgrade) is
    named here, to be checked against SYNC_MODE and added to KNOWN_SITES."""
    package = Path(inspect.getfile(verl_trainer_base)).parents[3]
    sites = set()
    for path in sorted(package.rglob("*.py")):
        sites |= mode_reads(path.read_text(), path.relative_to(package).as_posix())
    unknown = sorted(sites - KNOWN_SITES)
    assert not unknown, f"verl reads trainer_mode at places not checked for SYNC_MODE: {unknown}"
    assert sites == KNOWN_SITES  # a site gone from verl is one to drop from the list


def test_the_scan_finds_each_kind_of_read() -> None:
    source = (
        "class PPOTrainer:\n"
        '    """trainer_mode (str): prose, not a read."""\n'
        "    def _compare(self):\n"
        "        if self.trainer_mode == 'sync':\n"
        "            return 1\n"
        "    def _dispatch(self):\n"
        "        return {'sync': 1}[self.trainer_mode]\n"
        "    def _match(self):\n"
        "        match self.trainer_mode:\n"
        "            case _:\n"
        "                return 1\n"
        "    def _key(self, config):\n"
        "        return config.trainer.v1.trainer_mode\n"
        "    def _select(self, config):\n"
        "        return select(config, 'trainer.v1.trainer_mode')\n"
        "    def _argument(self, trainer_mode):\n"
        "        self.mode = trainer_mode\n"
        "    def _store(self):\n"
        "        self.trainer_mode = 'x'\n"
    )
    methods = {"_compare", "_dispatch", "_match", "_key", "_select", "_argument"}
    assert mode_reads(source, "x.py") == {("x.py", f"PPOTrainer.{m}") for m in methods}

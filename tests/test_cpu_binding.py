"""groupwise.rollout.vllm_cpu: the core lists and environment a vLLM engine is started with
(no vLLM needed; tests/test_vllm_engine.py and tests/test_vllm_trl.py check the binding of
real engines)."""

from __future__ import annotations

import os

import pytest
import torch

from groupwise.rollout.vllm_cpu import (
    CpuBinding,
    available_cores,
    core_list,
    parse_core_list,
    process_cores,
    split_cores,
)


def test_core_lists_read_and_write_as_vllm_and_proc_do() -> None:
    assert core_list([5, 0, 1, 2, 2]) == "0-2,5"
    assert core_list([3]) == "3"
    assert parse_core_list("0-2,5") == [0, 1, 2, 5]
    assert parse_core_list(" 7\n") == [7]
    for cores in ([0], [0, 2, 4], [1, 2, 3, 8, 9]):
        assert parse_core_list(core_list(cores)) == cores
    with pytest.raises(ValueError, match="'0-a' is not a core list"):
        parse_core_list("0-a")
    with pytest.raises(ValueError, match="at least one core"):
        core_list([])


def test_split_cores_gives_disjoint_near_equal_runs() -> None:
    assert split_cores(2, [0, 1]) == [[0], [1]]
    assert split_cores(2, [0, 1, 2, 3, 4]) == [[0, 1, 2], [3, 4]]
    assert split_cores(3, range(7)) == [[0, 1, 2], [3, 4], [5, 6]]
    with pytest.raises(ValueError, match="1 cores \\(4\\) cannot go to 2 engines"):
        split_cores(2, [4])


def test_this_process_cores_are_its_affinity() -> None:
    assert process_cores(os.getpid()) == available_cores() == sorted(os.sched_getaffinity(0))


def test_binding_env_and_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    own = CpuBinding.given([2, 0, 1])
    assert own.env() == {"VLLM_CPU_OMP_THREADS_BIND": "0-2"}
    assert own.record() == {
        "cores": "0-2",
        "threads": 3,
        "worker": "own process",
        "VLLM_CPU_OMP_THREADS_BIND": "0-2",
    }
    here = CpuBinding.given([0, 1], in_process=True)
    assert here.env() == {"VLLM_CPU_OMP_THREADS_BIND": "0-1", "OMP_NUM_THREADS": "2"}
    assert "cores 0-1 (worker in process" in here.describe()
    # no cores given: the environment's core list, else every core of this process
    assert CpuBinding.given(None).cores == tuple(available_cores())
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "auto")
    assert CpuBinding.given(None).cores == tuple(available_cores())
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "3,5")
    assert CpuBinding.given(None).cores == (3, 5)


def test_applied_sets_the_environment_while_an_engine_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    cores = available_cores()
    threads = torch.get_num_threads()
    try:
        with CpuBinding.given(cores, in_process=True).applied():
            assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == core_list(cores)
            assert os.environ["OMP_NUM_THREADS"] == str(len(cores))
            assert torch.get_num_threads() == len(cores)
        assert "VLLM_CPU_OMP_THREADS_BIND" not in os.environ
        assert os.environ["OMP_NUM_THREADS"] == "7"
        assert sorted(os.sched_getaffinity(0)) == cores
    finally:
        torch.set_num_threads(threads)

"""The installed vLLM words and logs the notice groupwise.rollout.vllm_cpu.reload_weights drops
for a model with tied embeddings ("ParallelLMHead: Failed to load weights"), on the logger the
filter sits on, and reads the tie from where reload_weights looks (tests/test_log_filters.py
tests the filter itself). Read from vLLM's sources, without starting an engine."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from groupwise.rollout.vllm_cpu import RELOAD_LOGGER, TIED_HEAD_NOTICE, TiedHeadReloadFilter


def _vllm_source(relative: str) -> str:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin is not None
    return (Path(spec.origin).parent / relative).read_text(encoding="utf-8")


def test_vllm_logs_the_notice_on_the_filtered_logger() -> None:
    layerwise = _vllm_source("model_executor/model_loader/reload/layerwise.py")
    assert 'logger.warning("%s: Failed to load weights", layer.__class__.__name__)' in layerwise
    assert "logger = init_logger(__name__)" in layerwise  # init_logger: logging.getLogger(name)
    assert RELOAD_LOGGER == "vllm.model_executor.model_loader.reload.layerwise"
    # the LM head's class, tied to the embedding when the config says so
    llama = _vllm_source("model_executor/models/llama.py")
    assert "self.lm_head = ParallelLMHead(" in llama
    assert "if config.tie_word_embeddings:" in llama
    assert "hf_text_config: PreTrainedConfig" in _vllm_source("config/model.py")


def test_the_filter_drops_the_notice_as_vllm_formats_it() -> None:
    record = logging.LogRecord(
        RELOAD_LOGGER,
        logging.WARNING,
        "layerwise.py",
        266,
        "%s: Failed to load weights",
        ("ParallelLMHead",),
        None,
    )
    assert record.getMessage() == TIED_HEAD_NOTICE
    assert not TiedHeadReloadFilter().filter(record)
    record.args = ("RowParallelLinear",)
    assert TiedHeadReloadFilter().filter(record)

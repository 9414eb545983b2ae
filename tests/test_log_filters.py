"""The harmless library notices groupwise drops, each by its logger (or warning module) and its
message, while every other line of that logger still shows: vLLM's "ParallelLMHead: Failed to
load weights" on a weight sync of a model with tied embeddings (groupwise.rollout.vllm_cpu),
transformers' BPE clean-up notice and peft's failed hub lookup (groupwise.models). The notices'
texts are checked against the installed transformers and peft here, against vLLM in
tests/test_vllm_log_filters.py."""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import peft.utils.other
import pytest
import torch
import transformers.tokenization_utils_tokenizers as tokenization

from groupwise.models import (
    BPE_CLEAN_UP_NOTICE,
    PEFT_LOOKUP_NOTICE,
    PEFT_WARNING_MODULE,
    TOKENIZER_LOGGER,
    quiet_harmless_notices,
)
from groupwise.rollout.vllm_cpu import RELOAD_LOGGER, reload_weights


class _Records(logging.Handler):
    """Keeps the messages of the records that reach it (past the logger's filters)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def reaching() -> Iterator[Any]:
    """reaching(name) -> the messages that pass logger `name`'s own filters (a handler on it)."""
    attached: list[tuple[logging.Logger, _Records, int]] = []

    def attach(name: str) -> list[str]:
        logger, handler = logging.getLogger(name), _Records()
        attached.append((logger, handler, logger.level))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        return handler.messages

    yield attach
    for logger, handler, level in attached:
        logger.removeHandler(handler)
        logger.setLevel(level)


# ------------------------------------------------------------------------- vLLM weight sync


def _fake_llm(tied: bool, layers: list[str]) -> Any:
    """A vllm.LLM stand-in whose reload logs vLLM's notice for each layer in `layers`, as
    vllm/model_executor/model_loader/reload/layerwise.py does, and keeps what it was given."""
    logger = logging.getLogger(RELOAD_LOGGER)
    loaded: list[Any] = []

    def reload(weights_iterator: Any) -> None:
        loaded.extend(weights_iterator)
        for layer in layers:
            logger.warning("%s: Failed to load weights", layer)
        logger.warning("something else went wrong")

    runner = SimpleNamespace(reload_weights=reload)
    engine = SimpleNamespace(
        model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=runner)),
        model_config=SimpleNamespace(
            hf_text_config=SimpleNamespace(tie_word_embeddings=tied), dtype=torch.bfloat16
        ),
    )
    return SimpleNamespace(llm_engine=engine, reset_prefix_cache=lambda: None, loaded=loaded)


def test_a_sync_drops_the_tied_lm_head_notice_and_keeps_the_others(reaching: Any) -> None:
    messages = reaching(RELOAD_LOGGER)
    llm = _fake_llm(tied=True, layers=["ParallelLMHead", "QKVParallelLinear"])
    weight = torch.tensor([1.0, 1 / 3])
    reload_weights(llm, [("w", weight)])
    # in the engine's dtype: vLLM would otherwise cast it, with a warning per tensor
    [(name, loaded)] = llm.loaded
    assert name == "w" and loaded.dtype == torch.bfloat16
    assert loaded.tolist() == weight.to(torch.bfloat16).tolist()
    assert messages == ["QKVParallelLinear: Failed to load weights", "something else went wrong"]
    # only during the reload: the logger is as it was after it
    assert logging.getLogger(RELOAD_LOGGER).filters == []


def test_without_tied_embeddings_an_unloaded_lm_head_is_said(reaching: Any) -> None:
    messages = reaching(RELOAD_LOGGER)
    reload_weights(_fake_llm(tied=False, layers=["ParallelLMHead"]), [])
    assert messages == ["ParallelLMHead: Failed to load weights", "something else went wrong"]


# ------------------------------------------------------------------------- transformers


def test_the_bpe_clean_up_notice_is_dropped_and_the_tokenizer_logger_still_speaks(
    reaching: Any,
) -> None:
    # the notice as the installed transformers words it, on the logger it uses
    assert tokenization.logger.name == TOKENIZER_LOGGER
    assert f'"{BPE_CLEAN_UP_NOTICE}"' in inspect.getsource(tokenization)
    quiet_harmless_notices()
    quiet_harmless_notices()  # idempotent: one filter
    assert len(logging.getLogger(TOKENIZER_LOGGER).filters) == 1
    messages = reaching(TOKENIZER_LOGGER)
    tokenization.logger.warning(
        f"{BPE_CLEAN_UP_NOTICE} TokenizersBackend. The clean_up_tokenization post-processing"
        " step is designed for WordPiece tokenizers"
    )
    tokenization.logger.warning("Special tokens have been added in the vocabulary")
    assert messages == ["Special tokens have been added in the vocabulary"]


# ------------------------------------------------------------------------- peft


def test_peft_failed_hub_lookup_is_dropped_and_its_other_warnings_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unreachable(*args: Any, **kwargs: Any) -> bool:
        raise OSError("[Errno -2] Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(peft.utils.other, "file_exists", unreachable)
    assert peft.utils.other.__name__ == PEFT_WARNING_MODULE
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # peft's own lookup, as saving an adapter on the base "arith-base" makes it
        assert peft.utils.other.check_file_exists_on_hf_hub("arith-base", "config.json") is None
        (said,) = caught  # without the filter: peft's notice
        assert str(said.message).startswith(PEFT_LOOKUP_NOTICE)
        caught.clear()
        quiet_harmless_notices()
        assert peft.utils.other.check_file_exists_on_hf_hub("arith-base", "config.json") is None
        warnings.warn_explicit(
            "another peft warning", UserWarning, "other.py", 1, module=PEFT_WARNING_MODULE
        )
        warnings.warn_explicit(f"{PEFT_LOOKUP_NOTICE} x", UserWarning, "mine.py", 1, module="mine")
    assert [str(w.message) for w in caught] == ["another peft warning", f"{PEFT_LOOKUP_NOTICE} x"]

"""The judges, which turn chat messages into reply text: any OpenAI-compatible chat endpoint
(`OpenAIChatJudge`, through groupwise.http_client) or a local transformers model with greedy
decoding (`LocalModelJudge`); and `judge_solution`, which asks one until its answer is usable.

Unusable replies and transient transport errors are asked again a bounded number of times with
exponential backoff (the rules of groupwise.http_client); what still fails is a `JudgeOutcome`
with the reason, never an exception.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from groupwise.analysis.error_position.protocol import (
    JudgeAnswerError,
    Judgement,
    Message,
    parse_judgement,
)
from groupwise.analysis.error_position.taxonomy import ErrorType
from groupwise.http_client import JSONClient, ServerError, with_retries


class JudgeTransportError(ServerError):
    """The judge could not be asked (network, HTTP status, malformed response)."""

    def __init__(
        self, message: str, retryable: bool = True, retry_after: float | None = None
    ) -> None:
        super().__init__(message, retryable, retry_after)


class Judge(Protocol):
    """Turns chat messages into the judge's reply text; raises JudgeTransportError."""

    name: str
    deterministic: bool  # True: asking again gives the same reply, so garbage is not retried

    def complete(self, messages: list[Message]) -> str: ...


def _in_judge_words(err: ServerError, url: str) -> JudgeTransportError:
    """A failed request as the judge records it: the HTTP status and the server's message,
    urllib's own error of a failed connection, or the malformed response."""
    cause = err.__cause__
    if err.status is not None:
        message = f"HTTP {err.status} from {url}: {err.detail}"
    elif cause is not None:
        message = f"{type(cause).__name__} from {url}: {cause}"
    else:
        message = f"malformed response from {url}: {err.detail!r}"
    # An answer that is not JSON is an unusable reply: asked again, as garbage text is.
    return JudgeTransportError(message, err.retryable or err.status is None, err.retry_after)


class OpenAIChatJudge:
    """A judge behind an OpenAI-compatible /chat/completions endpoint.

    `temperature` None leaves the server's default (some reasoning models accept no other).
    What groupwise.http_client retries is retryable here, and so is a malformed response;
    other HTTP errors (e.g. 401 bad key, 404 wrong model) are not.
    """

    deterministic = False

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        temperature: float | None = None,
    ) -> None:
        self.client = JSONClient(base_url, api_key)
        self.url = self.client.base_url + "/chat/completions"
        self.model = model
        self.timeout = timeout
        self.temperature = temperature
        self.name = f"openai:{self.client.base_url}:{model}"

    def complete(self, messages: list[Message]) -> str:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        try:
            answer = self.client.request("/chat/completions", body, self.timeout)
        except ServerError as err:
            raise _in_judge_words(err, self.url) from err
        try:
            content = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as err:
            shown = json.dumps(answer)[:120]
            raise JudgeTransportError(f"malformed response from {self.url}: {shown!r}") from err
        if not isinstance(content, str):
            raise JudgeTransportError(f"response content is {type(content).__name__}, not text")
        return content


class LocalModelJudge:
    """A local transformers model as judge: chat template (if any) and greedy decoding."""

    deterministic = True

    def __init__(self, model: Any, tokenizer: Any, name: str, max_new_tokens: int = 64) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = f"local:{name}"
        self.max_new_tokens = max_new_tokens
        self._lock = threading.Lock()

    def complete(self, messages: list[Message]) -> str:
        import torch

        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        else:
            text = "\n\n".join(m["content"] for m in messages) + "\n\n"
        device = next(self.model.parameters()).device
        ids = self.tokenizer(text, return_tensors="pt", add_special_tokens=False).to(device)
        pad = self.tokenizer.pad_token_id
        with self._lock, torch.no_grad():
            out = self.model.generate(
                **ids,
                do_sample=False,
                max_new_tokens=self.max_new_tokens,
                pad_token_id=pad if pad is not None else self.tokenizer.eos_token_id,
            )
        return self.tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


@dataclass(frozen=True)
class JudgeOutcome:
    """The result of asking about one solution: a judgement, or the reason it failed."""

    judgement: Judgement | None
    attempts: int
    error: str | None
    reply: str | None  # the last reply text (None if the judge never answered)


def judge_solution(
    judge: Judge,
    messages: list[Message],
    num_steps: int,
    taxonomy: Sequence[ErrorType],
    attempts: int = 3,
    backoff: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> JudgeOutcome:
    """Ask `judge` until it gives a usable answer, at most `attempts` times.

    Between tries it waits as groupwise.http_client says (backoff * 2^(try - 1) seconds, or a
    server's Retry-After). Unusable replies are retried unless the judge is deterministic (the
    same question would get the same reply); transport errors are retried when retryable.
    Never raises for judge trouble: the outcome carries the error.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    replies: list[str] = []

    def ask() -> Judgement:
        replies.append(judge.complete(messages))
        return parse_judgement(replies[-1], num_steps, taxonomy)

    asked = with_retries(
        ask,
        retries=attempts - 1,
        backoff=backoff,
        failures=(JudgeTransportError, JudgeAnswerError),
        retryable=lambda err: (
            err.retryable if isinstance(err, JudgeTransportError) else not judge.deterministic
        ),
        sleep=sleep,
    )
    reply = replies[-1] if replies else None
    if asked.error is None:
        return JudgeOutcome(asked.value, asked.tries, None, reply)
    kind = "transport" if isinstance(asked.error, JudgeTransportError) else "answer"
    return JudgeOutcome(None, asked.tries, f"{kind}: {asked.error}", reply)

"""Evaluation engine on any OpenAI-compatible server (`groupwise eval --engine openai`): vLLM's
`vllm serve`, SGLang, TGI, llama.cpp's server or a hosted endpoint. A `Sampler` and a
`TokenScorer`, over HTTP (groupwise.http_client, the standard library's urllib) from a thread
pool.

Sampling: one request per prompt on the chat (`/chat/completions`, the server renders the chat
template) or the completions endpoint (`/completions`, a prompt rendered here), asking for n
choices, the prompt's seed, and the log-probs of the sampled tokens. A server that does not
answer n choices in one request gets n requests of one choice each, request j seeded
seed + j: vLLM seeds sample j of an n-choice request so too, so on vLLM both ways draw the
same samples (`check` finds out which way the server takes, before anything is sampled).
mean_logp is the mean of the server's log-probs of the sampled tokens: on vLLM the raw model
distribution (temperature 1) unless the server was started with
`--logprobs-mode processed_logprobs`; other servers document their own. A server that returns
no log-probs gives samples without mean_logp, and token counts from its usage report.

Failures: the requests go through groupwise.http_client, whose rules say what is retried
(HTTP 408, 409, 429 and 5xx, timeouts, refused and dropped connections), how long it waits (from
`backoff` seconds, doubling; a Retry-After header is honoured up to 60 s) and that anything
else, or the last of `retries` retries, raises `ServerError`, a one-line message naming the
URL. At most `concurrency` requests are in flight; when one fails for good the others stop
retrying.

Log-probs of given text (`mean_logp`): the completions endpoint with the token ids of prompt +
completion as the prompt, `echo` and `logprobs` (as lm-evaluation-harness asks), reading the
echoed log-probs of the completion's positions. `check_scoring` says clearly when a server
does not do that.
"""

from __future__ import annotations

import json
import statistics
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

from groupwise.http_client import JSONClient, ServerError
from groupwise.rollout.types import Completions, Prompt, SamplingParams

__all__ = [
    "APIS",
    "ModelNotServed",
    "OpenAIEngine",
    "ServerError",
    "ServerFeatures",
    "check_base_url",
]

APIS = ("chat", "completions")
CHECK_TIMEOUT = 30.0  # seconds: the first contact (a wrong URL should fail fast)
T = TypeVar("T")
# One sample as a server answers it: text, tokens, truncated, mean_logp.
Choice = tuple[str, int, bool, float | None]


class ModelNotServed(ServerError):
    """The server answers, but does not serve the model asked for."""


@dataclass(frozen=True)
class ServerFeatures:
    """What `check` found: whether one request answers n choices, and whether the server
    returns the sampled tokens' log-probs."""

    n: bool
    logprobs: bool


def check_base_url(base_url: str) -> str:
    """base_url without its trailing slash; ValueError unless it is http(s)://HOST[:PORT][/PATH]."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
        raise ValueError(
            f"must be http(s)://HOST[:PORT]/PATH (e.g. http://127.0.0.1:8000/v1), got {base_url!r}"
        )
    return base_url.rstrip("/")


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


class OpenAIEngine:
    """Completions and log-probs from an OpenAI-compatible server (module docstring).

    base_url: the API root, e.g. http://127.0.0.1:8000/v1. model: the served model name.
    api: "chat" (messages; the server applies the chat template) or "completions" (prompt
        strings rendered by the caller). api_key: sent as a Bearer token when given.
    concurrency: requests in flight at once. retries: further tries of a failed request.
    timeout: seconds to wait for a response (a whole non-streamed completion).
    backoff: seconds before the first retry, doubled for each next one.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api: str = "chat",
        api_key: str | None = None,
        concurrency: int = 16,
        retries: int = 5,
        timeout: float = 600.0,
        backoff: float = 1.0,
    ) -> None:
        if api not in APIS:
            raise ValueError(f"api must be one of {', '.join(APIS)}, got {api!r}")
        if concurrency < 1 or retries < 0 or timeout <= 0 or backoff < 0:
            raise ValueError(
                "concurrency >= 1, retries >= 0, timeout > 0 and backoff >= 0 "
                f"needed, got {concurrency}, {retries}, {timeout}, {backoff}"
            )
        self.base_url = check_base_url(base_url)
        self.model, self.api, self.api_key = model, api, api_key
        self.client = JSONClient(self.base_url, api_key)
        self.concurrency, self.retries = concurrency, retries
        self.timeout, self.backoff = timeout, backoff
        self.features: ServerFeatures | None = None

    # ----------------------------------------------------------------------------- transport

    def _call(
        self,
        path: str,
        body: dict[str, Any] | None,
        abort: threading.Event | None = None,
        *,
        retries: int | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One request with the engine's retries, backoff and timeout unless given
        (groupwise.http_client); `abort` set elsewhere stops the retrying."""
        return self.client.call(
            path,
            body,
            timeout=self.timeout if timeout is None else timeout,
            retries=self.retries if retries is None else retries,
            backoff=self.backoff,
            abort=abort,
        )

    def _run_all(self, jobs: Sequence[Callable[[threading.Event], T]]) -> list[T]:
        """Run jobs, at most `concurrency` at once; their results in job order. The first
        failure stops the others' retries, cancels what has not started, and is raised."""
        abort = threading.Event()
        pool = ThreadPoolExecutor(max_workers=self.concurrency)
        try:
            futures = [pool.submit(job, abort) for job in jobs]
            wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in futures if f.done() and not f.cancelled() and f.exception()]
            if failed:
                raise failed[0].exception()  # type: ignore[misc]
            return [f.result() for f in futures]
        except BaseException:
            abort.set()
            raise
        finally:
            # Requests still in flight end within their timeout; nobody waits for them.
            pool.shutdown(wait=False, cancel_futures=True)

    # ----------------------------------------------------------------------------- sampling

    def _body(
        self, prompt: Prompt, count: int, sampling: SamplingParams, seed: int, logprobs: bool
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": self.model,
            "n": count,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
            "seed": seed,
        }
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if self.api == "chat":
            if isinstance(prompt, str):
                raise ValueError("the chat endpoint takes chat messages, not a prompt string")
            body["messages"] = prompt
            if logprobs:
                body.update(logprobs=True, top_logprobs=0)
            return "/chat/completions", body
        if not isinstance(prompt, str):
            raise ValueError("the completions endpoint takes a prompt string, not messages")
        body["prompt"] = prompt
        if logprobs:
            body["logprobs"] = 0
        return "/completions", body

    def _logprobs(self, choice: dict[str, Any]) -> list[float] | None:
        """The sampled tokens' log-probs of one choice, or None when it has none."""
        logprobs = choice.get("logprobs") or {}
        if self.api == "chat":
            entries = logprobs.get("content")
            return None if entries is None else [float(e["logprob"]) for e in entries]
        values = logprobs.get("token_logprobs")
        return None if values is None else [float(v) for v in values]

    def _choices(self, answer: Any, count: int, where: str) -> list[Choice]:
        """The `count` samples of one answer, in choice order."""
        try:
            choices = sorted(answer["choices"], key=lambda c: c.get("index", 0))
            if len(choices) != count:
                raise ServerError(f"{where}: asked for {count} choice(s), got {len(choices)}")
            out = []
            for choice in choices:
                text = (
                    choice["message"].get("content") or "" if self.api == "chat" else choice["text"]
                )
                logps = self._logprobs(choice)
                if logps is not None:
                    tokens, mean = len(logps), _mean(logps)
                elif count == 1 and "usage" in answer:
                    tokens, mean = int(answer["usage"]["completion_tokens"]), None
                else:
                    raise ServerError(
                        f"{where}: the answer has neither log-probs nor a usage "
                        "report per choice: its token counts are unknown"
                    )
                out.append((text, tokens, choice.get("finish_reason") == "length", mean))
            return out
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            raise ServerError(
                f"{where}: malformed answer ({type(err).__name__}: {err}): "
                f"{json.dumps(answer)[:200]}"
            ) from None

    def _complete(
        self,
        prompt: Prompt,
        count: int,
        sampling: SamplingParams,
        seed: int,
        abort: threading.Event,
    ) -> list[Choice]:
        assert self.features is not None
        path, body = self._body(prompt, count, sampling, seed, self.features.logprobs)
        return self._choices(self._call(path, body, abort), count, self.base_url + path)

    def check(self) -> ServerFeatures:
        """Contact the server before anything is sampled: it must answer, serve `model` (when
        it lists its models), and take a sampling request. Finds out whether one request
        answers n choices and whether log-probs come back (`features`). ServerError (one
        line) when it cannot be used."""
        try:
            listed = self._call(
                "/models", None, retries=0, timeout=min(self.timeout, CHECK_TIMEOUT)
            )
            names = [m["id"] for m in listed["data"]]
        except ServerError as err:
            if err.status != 404:  # a server without /models is told apart by the probe
                raise
        except (KeyError, TypeError) as err:
            raise ServerError(f"GET {self.base_url}/models: malformed answer ({err})") from None
        else:
            if self.model not in names:
                raise ModelNotServed(
                    f"{self.base_url} serves {', '.join(map(repr, names))}, not {self.model!r}"
                )
        probe: Prompt = (
            [{"role": "user", "content": "Say hi."}] if self.api == "chat" else "Say hi."
        )
        sampling = SamplingParams(temperature=1.0, max_new_tokens=1)
        refusals = []
        # n choices per request are usable only with per-choice token counts (log-probs).
        for ask_n, ask_logprobs in ((True, True), (False, True), (False, False)):
            path, body = self._body(probe, 2 if ask_n else 1, sampling, 0, ask_logprobs)
            where = self.base_url + path
            try:
                answer = self._call(path, body, timeout=min(self.timeout, 4 * CHECK_TIMEOUT))
                choices = answer["choices"]
                logprobs = ask_logprobs and all(self._logprobs(c) is not None for c in choices)
            except ServerError as err:
                if err.status == 404:
                    raise ServerError(
                        f"{err} (no {path} endpoint here: is the API root, "
                        "often ending in /v1, the --base-url?)"
                    ) from None
                if err.status is None or err.retryable:
                    raise
                refusals.append(str(err))
                continue
            except (KeyError, TypeError, AttributeError, ValueError) as err:
                raise ServerError(
                    f"{where}: malformed answer ({type(err).__name__}: {err})"
                ) from None
            if ask_logprobs and not logprobs:
                continue
            self._choices(answer, len(choices), where)  # an answer we can read
            self.features = ServerFeatures(ask_n and len(choices) == 2, logprobs)
            return self.features
        reason = refusals[-1] if refusals else "no per-choice token counts"
        raise ServerError(f"{self.base_url}: refused every way of sampling ({reason})")

    def sample(
        self,
        prompts: Sequence[Prompt],
        n: int,
        sampling: SamplingParams,
        prompt_seeds: Sequence[int],
    ) -> Completions:
        """n completions of each prompt (chat messages for the chat api, prompt strings for
        completions), prompt i's requests seeded from prompt_seeds[i] (module docstring)."""
        if len(prompt_seeds) != len(prompts):
            raise ValueError(f"{len(prompt_seeds)} prompt_seeds for {len(prompts)} prompts")
        features = self.features or self.check()
        per_request = n if features.n else 1
        jobs = []
        for prompt, seed in zip(prompts, prompt_seeds, strict=True):
            for first in range(0, n, per_request):
                count = min(per_request, n - first)
                jobs.append(
                    lambda abort, p=prompt, c=count, s=int(seed) + first: self._complete(
                        p, c, sampling, s, abort
                    )
                )
        rows = [choice for answer in self._run_all(jobs) for choice in answer]
        texts, tokens, truncated, means = (list(column) for column in zip(*rows, strict=True))
        return Completions(texts, tokens, truncated, means, n)

    # ----------------------------------------------------------------------------- scoring

    def echo_logprobs(
        self, token_ids: Sequence[int], abort: threading.Event | None = None
    ) -> tuple[list[str], list[Any]]:
        """The server's token strings and log-probs of the given ids as a prompt (completions
        endpoint, echo + logprobs, one generated token asked for and left out); the first
        log-prob is None (nothing predicts the first token)."""
        path = "/completions"
        body = {
            "model": self.model,
            "prompt": list(token_ids),
            "max_tokens": 1,
            "temperature": 0.0,
            "echo": True,
            "logprobs": 0,
        }
        answer = self._call(path, body, abort)
        where = self.base_url + path
        try:
            logprobs = answer["choices"][0]["logprobs"]
            tokens, values = list(logprobs["tokens"]), list(logprobs["token_logprobs"])
        except (KeyError, TypeError, IndexError) as err:
            raise ServerError(
                f"{where}: no log-probs of the prompt in the answer ({type(err).__name__}: {err})"
            ) from None
        if len(values) < len(token_ids) or len(tokens) != len(values):
            raise ServerError(
                f"{where}: {len(values)} log-probs for a prompt of "
                f"{len(token_ids)} tokens: the prompt was not echoed"
            )
        return tokens[: len(token_ids)], values[: len(token_ids)]

    def check_scoring(self, token_ids: Sequence[int], text: str) -> None:
        """ServerError (one line) unless the server echoes log-probs of a prompt given as
        token ids, and reads `token_ids` (the caller's tokenizer) as `text`: the scorer's
        tokenizer must be the server's."""
        try:
            tokens, values = self.echo_logprobs(token_ids)
        except ServerError as err:
            raise ServerError(
                f"{self.base_url} does not return log-probs of given text (the "
                f"completions endpoint with echo and logprobs): {err}"
            ) from None
        if any(v is None for v in values[1:]):
            raise ServerError(f"{self.base_url} echoed the prompt without its log-probs")
        if "".join(tokens) != text:
            raise ServerError(
                f"{self.base_url} reads the probe's token ids as "
                f"{''.join(tokens)!r}, not {text!r}: the tokenizer here is not "
                "the served model's"
            )

    def mean_logp(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]
    ) -> list[float | None]:
        """Mean log-prob per completion token of each (prompt, completion) pair, from the
        echoed log-probs of prompt + completion (one request per pair, `concurrency` at once)."""
        if len(prompt_ids) != len(completion_ids):
            raise ValueError(f"{len(prompt_ids)} prompts for {len(completion_ids)} completions")
        if any(not p for p in prompt_ids):
            raise ValueError("a prompt to score needs at least one token")

        def score(
            prompt: Sequence[int], completion: Sequence[int], abort: threading.Event
        ) -> float | None:
            if not completion:
                return None
            _, values = self.echo_logprobs([*prompt, *completion], abort)
            return _mean([float(v) for v in values[len(prompt) :]])

        return self._run_all(
            [
                lambda abort, p=p, c=c: score(p, c, abort)
                for p, c in zip(prompt_ids, completion_ids, strict=True)
            ]
        )

"""JSON over HTTP with retries, standard library only (urllib): the one client of the OpenAI-
compatible servers groupwise talks to, the evaluation engine `openai`
(groupwise.rollout.openai_engine) and the error-position judge
(groupwise.analysis.error_position.judges).

The rules, stated once:

- Retryable: HTTP 408, 409, 429 and 5xx, no answer within the timeout, a refused or dropped
  connection. Not retryable: any other HTTP status (e.g. 401 bad key, 404 wrong path), an
  answer that is not JSON.
- Backoff: `backoff` seconds before the first retry, doubling for each next one; a server's
  Retry-After replaces that wait; no wait is longer than MAX_RETRY_WAIT.
- `with_retries` tries at most `retries + 1` times, stops at the first failure that is not
  retryable, and stops waiting and retrying once `abort` (an event set elsewhere, e.g. by a
  request that failed for good) is set.

Every failure is a `ServerError` whose message is one line naming the method and URL.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = [
    "MAX_RETRY_WAIT",
    "JSONClient",
    "RetryOutcome",
    "ServerError",
    "retry_wait",
    "with_retries",
]

MAX_RETRY_WAIT = 60.0  # seconds: the longest backoff or Retry-After honoured
T = TypeVar("T")


class ServerError(RuntimeError):
    """A request the server did not answer usefully; the message is one line naming the URL.

    retryable: worth asking again (module docstring). retry_after: the server's Retry-After in
    seconds, if it sent one. status: the HTTP status of an error answer. detail: the server's
    own words (an error answer's message, or the start of an answer that is not JSON). A
    failed connection is raised from urllib's own error (its `__cause__`)."""

    def __init__(
        self,
        message: str,
        retryable: bool = False,
        retry_after: float | None = None,
        status: int | None = None,
        detail: str = "",
    ) -> None:
        super().__init__(message)
        self.retryable, self.retry_after, self.status = retryable, retry_after, status
        self.detail = detail


def retry_wait(retry: int, backoff: float, retry_after: float | None = None) -> float:
    """Seconds to wait before retry number `retry` (1: the second try): the server's
    Retry-After when it sent one, else backoff * 2^(retry - 1); at most MAX_RETRY_WAIT."""
    return min(MAX_RETRY_WAIT, backoff * 2 ** (retry - 1) if retry_after is None else retry_after)


@dataclass(frozen=True)
class RetryOutcome(Generic[T]):
    """How `with_retries` ended: the value of the try that worked, or the error of the last
    try (or of the first one not worth repeating); `tries`: how many were made."""

    value: T | None
    error: Exception | None
    tries: int


def _retryable(error: Exception) -> bool:
    return isinstance(error, ServerError) and error.retryable


def with_retries(
    attempt: Callable[[], T],
    *,
    retries: int,
    backoff: float,
    failures: tuple[type[Exception], ...] = (ServerError,),
    retryable: Callable[[Exception], bool] = _retryable,
    abort: threading.Event | None = None,
    sleep: Callable[[float], object] = time.sleep,
) -> RetryOutcome[T]:
    """Call `attempt` until it returns, at most retries + 1 times (module docstring).

    failures: the exceptions that count as a failed try (any other propagates at once).
    retryable: which of them are worth another try (default: a retryable ServerError).
    abort: once set, no further try, and a wait in progress ends. sleep: how to wait when no
    `abort` is given (a test passes a recorder)."""
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    for tries in range(1, retries + 2):
        try:
            return RetryOutcome(attempt(), None, tries)
        except failures as error:
            stopped = abort is not None and abort.is_set()
            if tries == retries + 1 or stopped or not retryable(error):
                return RetryOutcome(None, error, tries)
            hint = error.retry_after if isinstance(error, ServerError) else None
            pause = retry_wait(tries, backoff, hint)
            if abort is not None:
                abort.wait(pause)
            else:
                sleep(pause)
    raise AssertionError("unreachable")


def _error_detail(err: urllib.error.HTTPError) -> str:
    """The server's own message from an error answer ({"error": {"message"}} or the text)."""
    try:
        raw = err.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        return err.reason or ""
    try:
        body = json.loads(raw)
        message = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(message, dict):
            message = message.get("message", message)
        raw = str(message)
    except ValueError:
        pass
    return " ".join(raw.split())[:300]


def _retry_after(err: urllib.error.HTTPError) -> float | None:
    try:
        return float(err.headers.get("Retry-After", ""))
    except (TypeError, ValueError):
        return None


class JSONClient:
    """JSON requests to one server's API root, e.g. http://127.0.0.1:8000/v1 (no trailing
    slash); `api_key` is sent as a Bearer token when given."""

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        self.base_url, self.api_key = base_url.rstrip("/"), api_key

    def request(self, path: str, body: dict[str, Any] | None, timeout: float) -> Any:
        """One request (GET without a body, else POST of JSON) to base_url + path; the decoded
        JSON answer. ServerError (module docstring) when there is none."""
        url = self.base_url + path
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(
            url, data=data, headers=headers, method="GET" if body is None else "POST"
        )
        where = f"{request.get_method()} {url}"
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            detail = _error_detail(err)
            retryable = err.code in (408, 409, 429) or err.code >= 500
            raise ServerError(
                f"{where}: HTTP {err.code}: {detail}",
                retryable,
                _retry_after(err),
                err.code,
                detail,
            ) from err
        except TimeoutError as err:
            raise ServerError(f"{where}: no answer within {timeout:g} s", True) from err
        except urllib.error.URLError as err:
            if isinstance(err.reason, TimeoutError):
                raise ServerError(f"{where}: no answer within {timeout:g} s", True) from err
            raise ServerError(f"{where}: cannot connect ({err.reason})", True) from err
        except (OSError, http.client.HTTPException) as err:
            raise ServerError(
                f"{where}: connection lost ({type(err).__name__}: {err})", True
            ) from err
        try:
            return json.loads(raw)
        except ValueError:
            text = " ".join(raw.decode("utf-8", "replace").split())[:200]
            raise ServerError(f"{where}: the answer is not JSON: {text!r}", detail=text) from None

    def call(
        self,
        path: str,
        body: dict[str, Any] | None,
        *,
        timeout: float,
        retries: int,
        backoff: float,
        abort: threading.Event | None = None,
    ) -> Any:
        """`request` with retries (module docstring); the last failure is raised, its message
        saying how many tries were made."""
        outcome = with_retries(
            lambda: self.request(path, body, timeout), retries=retries, backoff=backoff, abort=abort
        )
        if outcome.error is None:
            return outcome.value
        err = outcome.error
        assert isinstance(err, ServerError)
        tries = f" (after {outcome.tries} tries)" if outcome.tries > 1 else ""
        raise ServerError(f"{err}{tries}", err.retryable, status=err.status) from None

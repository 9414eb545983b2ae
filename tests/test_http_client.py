"""groupwise.http_client's retry rules on their own (the requests themselves: tests/
test_eval_openai.py against a fake server, tests/test_analysis.py for the judge)."""

from __future__ import annotations

import threading

import pytest

from groupwise.http_client import MAX_RETRY_WAIT, ServerError, retry_wait, with_retries


def test_the_wait_doubles_from_backoff_takes_retry_after_and_is_capped() -> None:
    assert [retry_wait(k, 0.5) for k in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert retry_wait(3, 0.5, retry_after=7.0) == 7.0
    assert retry_wait(20, 1.0) == retry_wait(1, 1.0, retry_after=1e6) == MAX_RETRY_WAIT


def failing(*errors: Exception):
    """A call that raises `errors` in turn, then returns "ok"; `calls` counts the calls."""
    queue = list(errors)

    def call() -> str:
        call.calls += 1
        if queue:
            raise queue.pop(0)
        return "ok"

    call.calls = 0
    return call


def test_retryable_failures_are_tried_again_after_the_waits() -> None:
    slept: list[float] = []
    call = failing(ServerError("a", True), ServerError("b", True, retry_after=0.25))
    outcome = with_retries(call, retries=2, backoff=1.0, sleep=slept.append)
    assert (outcome.value, outcome.error, outcome.tries) == ("ok", None, 3)
    assert slept == [1.0, 0.25]


def test_it_stops_at_the_last_try_or_a_failure_not_worth_repeating() -> None:
    slept: list[float] = []
    call = failing(*(ServerError(str(i), True) for i in range(5)))
    outcome = with_retries(call, retries=2, backoff=0.0, sleep=slept.append)
    assert (str(outcome.error), outcome.tries, call.calls, len(slept)) == ("2", 3, 3, 2)

    call = failing(ServerError("401", retryable=False))
    outcome = with_retries(call, retries=5, backoff=0.0, sleep=slept.append)
    assert (str(outcome.error), outcome.tries, call.calls) == ("401", 1, 1)

    with pytest.raises(KeyError):  # not a failure it handles: raised at once
        with_retries(failing(KeyError("bug")), retries=5, backoff=0.0)


def test_an_abort_set_elsewhere_ends_the_retrying() -> None:
    abort = threading.Event()
    abort.set()
    call = failing(ServerError("down", True), ServerError("down", True))
    outcome = with_retries(call, retries=5, backoff=30.0, abort=abort)
    assert (str(outcome.error), outcome.tries) == ("down", 1)

"""A small OpenAI-compatible server for tests (stdlib http.server in a thread), with faults on
demand: answers that depend only on each request's seed, as vLLM's do, so that any run against
it can be compared with any other sample for sample.

Sampling (/v1/completions, /v1/chat/completions): choice j of a request seeded s is drawn from
random.Random(s + j) (vLLM seeds sample j of an n-choice request so): a boxed digit, a number
of tokens, and that many log-probs; finish_reason "length" when the tokens reach max_tokens.
`n_per_request=False` answers one choice whatever n asks; `logprobs=False` never returns
log-probs. Scoring (`echo` with token ids as the prompt): token i of id t gets the log-prob
-(t % 7 + 1) / 10, the first None, and the token string `decode(t)` (default "<t>");
`echo=False` ignores echo (samples instead).

Faults: `fault(request_number, path) -> str | None` is asked before each sampling or scoring
request (numbered from 1): "500", "429" (Retry-After: 0), "hang" (no answer for `hang_seconds`),
"drop" (close the connection without an answer) or "die" (drop, and stop the server: later
connections are refused); None answers.

`FaultyProxy` puts the same faults in front of a real server (tests/test_vllm_server.py): it
forwards every request to it and answers what it answers, unless a fault says otherwise.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "fake-model"


def choice_for(seed: int, max_tokens: int) -> tuple[str, list[float], bool]:
    """The completion text, its tokens' log-probs, and whether it was cut at max_tokens, of a
    choice seeded `seed`."""
    rng = random.Random(seed)
    digit = rng.randint(0, 9)
    tokens = min(max_tokens, rng.randint(3, 9))
    return (
        f"The answer is \\boxed{{{digit}}}.",
        [-rng.random() for _ in range(tokens)],
        (tokens == max_tokens),
    )


def echo_logprob(token_id: int) -> float:
    return -(token_id % 7 + 1) / 10


class FaultyServer:
    """An HTTP server on 127.0.0.1, on a free port, in a thread; `url` is its API root
    (".../v1"). `requests` records (path, body) of every POST. Subclasses answer: `models()`
    for GET /v1/models, `answer(path, body)` for a POST, each as (status, JSON object);
    `fault` (module docstring) decides before each POST whether to answer at all."""

    def __init__(
        self,
        fault: Callable[[int, str], str | None] | None = None,
        hang_seconds: float = 30.0,
    ) -> None:
        self.fault, self.hang_seconds = fault, hang_seconds
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket (later connections are refused)."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FaultyServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def models(self) -> tuple[int, Any]:
        raise NotImplementedError

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._json(*server.models())
                else:
                    self._json(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path not in ("/v1/completions", "/v1/chat/completions"):
                    self._json(404, {"detail": "Not Found"})
                    return
                with server._lock:
                    server.requests.append((self.path, body))
                    number = len(server.requests)
                fault = server.fault(number, self.path) if server.fault else None
                if fault == "500":
                    self._json(500, {"error": {"message": "simulated failure"}})
                elif fault == "429":
                    self._json(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"})
                elif fault == "hang":
                    time.sleep(server.hang_seconds)
                elif fault in ("drop", "die"):
                    self.close_connection = True
                    if fault == "die":
                        threading.Thread(target=server.stop, daemon=True).start()
                else:
                    self._json(*server.answer(self.path, body))

        return Handler


class FakeOpenAIServer(FaultyServer):
    """The fake server (module docstring), serving MODEL."""

    def __init__(
        self,
        *,
        n_per_request: bool = True,
        logprobs: bool = True,
        echo: bool = True,
        decode: Callable[[int], str] = "<{}>".format,
        fault: Callable[[int, str], str | None] | None = None,
        hang_seconds: float = 30.0,
    ) -> None:
        self.n_per_request, self.logprobs, self.echo = n_per_request, logprobs, echo
        self.decode = decode
        super().__init__(fault, hang_seconds)

    def models(self) -> tuple[int, Any]:
        return 200, {"object": "list", "data": [{"id": MODEL}]}

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if body.get("model") != MODEL:
            return 404, {"error": {"message": f"no model {body.get('model')}"}}
        if body.get("echo") and self.echo:
            ids = body["prompt"]
            return 200, {
                "choices": [
                    {
                        "index": 0,
                        "text": "",
                        "finish_reason": "length",
                        "logprobs": {
                            "tokens": [self.decode(t) for t in ids],
                            "token_logprobs": [None, *(echo_logprob(t) for t in ids[1:])],
                        },
                    }
                ]
            }
        n = body.get("n", 1) if self.n_per_request else 1
        choices, used = [], 0
        for j in range(n):
            text, logps, cut = choice_for(body.get("seed", 0) + j, body["max_tokens"])
            used += len(logps)
            choice: dict[str, Any] = {"index": j, "finish_reason": "length" if cut else "stop"}
            # completions ask with an integer (0 counts), chat with true
            wants = (
                self.logprobs
                and body.get("logprobs") is not None
                and (body["logprobs"] is not False)
            )
            if path.endswith("/chat/completions"):
                choice["message"] = {"role": "assistant", "content": text}
                choice["logprobs"] = (
                    {"content": [{"token": "t", "logprob": v} for v in logps]} if wants else None
                )
            else:
                choice["text"] = text
                choice["logprobs"] = (
                    {"tokens": ["t"] * len(logps), "token_logprobs": logps} if wants else None
                )
            choices.append(choice)
        return 200, {"choices": choices, "usage": {"completion_tokens": used}}


class FaultyProxy(FaultyServer):
    """Forwards every request to the server at `target` (its API root) and answers what it
    answers, with `fault` in between."""

    def __init__(
        self,
        target: str,
        fault: Callable[[int, str], str | None] | None = None,
        hang_seconds: float = 30.0,
    ) -> None:
        self.target = target.rstrip("/")
        super().__init__(fault, hang_seconds)

    def _forward(self, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.target + path, data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def models(self) -> tuple[int, Any]:
        return self._forward("/models", None)

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        return self._forward(path.removeprefix("/v1"), body)

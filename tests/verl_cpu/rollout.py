"""The rollout `hf_cpu`: verl's token-in token-out server, sampling on a CPU with transformers.

verl 0.9.1's rollouts are vLLM, SGLang and TensorRT-LLM servers (its hf and naive rollouts are
registered nowhere); this one is registered through verl's own registries
(`_ROLLOUT_REGISTRY` for the adapter inside the training worker, `RolloutReplicaRegistry` for
the replica), so `actor_rollout_ref.rollout.name=hf_cpu` runs verl's agent loop, load balancer
and weight sync unchanged:

- `CpuServer` (a Ray actor, one per replica) holds the model of `actor_rollout_ref.model.path`
  and answers verl's `generate(request_id, prompt_ids, sampling_params)` with a `TokenOutput`
  (token ids, their log-probs at the sampling temperature). The k-th request of the same
  prompt under the same weights draws from a generator seeded by (prompt, weights' step, k), so
  the same data and seed give the same samples in every run whatever the arrival order.
- `CpuServerAdapter` (verl's BaseRollout in the training worker) sends the actor's weights to
  the server on every sync (`update_weights`), so each step samples from the policy verl just
  trained. With `VERL_CPU_RECORD` set, the server saves each state it receives as
  `weights_<step>.pt` there: what the test reads to see the actor's weights move.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from typing import Any

import ray
import torch
from transformers import AutoModelForCausalLM
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

NAME = "hf_cpu"
"""actor_rollout_ref.rollout.name of this rollout."""
RECORD = "VERL_CPU_RECORD"
"""The environment variable naming the folder the server saves each weight sync to."""


def server_name(replica_rank: int) -> str:
    return f"{NAME}_server_{replica_rank}"


def sample_seed(prompt_ids: list[int], weights_step: int, occurrence: int) -> int:
    """A 63-bit seed of one request: its prompt, the step of the weights, and how many requests
    of the same prompt came before it under those weights."""
    text = f"{weights_step}:{occurrence}:{','.join(map(str, prompt_ids))}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


@ray.remote(num_cpus=0)
class CpuServer:
    """One replica's model and sampler (module docstring)."""

    def __init__(self, model_path: str, prompt_length: int, response_length: int) -> None:
        torch.set_num_threads(1)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.eos = self.model.config.eos_token_id
        self.prompt_length, self.response_length = prompt_length, response_length
        self.weights_step = 0
        self.seen: Counter = Counter()

    def load_weights(self, state: dict[str, torch.Tensor], global_steps: int | None) -> None:
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        tied = set(self.model._tied_weights_keys or {}) if missing else set()
        if unexpected or set(missing) - tied:
            raise ValueError(f"weight sync: missing {missing}, unexpected {unexpected}")
        self.weights_step = int(global_steps or 0)
        self.seen.clear()
        folder = os.environ.get(RECORD)
        if folder:
            torch.save(state, os.path.join(folder, f"weights_{self.weights_step}.pt"))

    @torch.no_grad()
    def generate(
        self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any], **unused: Any
    ) -> TokenOutput:
        key = (self.weights_step, tuple(prompt_ids))
        generator = torch.Generator().manual_seed(
            sample_seed(prompt_ids, self.weights_step, self.seen[key])
        )
        self.seen[key] += 1
        temperature = float(sampling_params.get("temperature", 1.0))
        budget = min(
            self.response_length, self.prompt_length + self.response_length - len(prompt_ids)
        )
        ids = torch.tensor([prompt_ids])
        tokens, log_probs = [], []
        for _ in range(budget):
            logits = self.model(ids).logits[0, -1].float()
            if temperature > 0:
                logp = torch.log_softmax(logits / temperature, dim=-1)
                token = int(torch.multinomial(logp.exp(), 1, generator=generator))
            else:
                logp = torch.log_softmax(logits, dim=-1)
                token = int(logp.argmax())
            tokens.append(token)
            log_probs.append(float(logp[token]))
            if token == self.eos:
                break
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
        return TokenOutput(
            token_ids=tokens,
            log_probs=log_probs,
            stop_reason="completed",
            extra_fields={"global_steps": self.weights_step},
        )

    # verl's replica calls these around every sync and profile; a CPU model has nothing to do
    def wake_up(self) -> None: ...
    def sleep(self) -> None: ...
    def abort_all_requests(self, reject_request: bool = False) -> None: ...
    def resume_generation(self) -> None: ...
    def clear_kv_cache(self) -> None: ...
    def release_kv_cache(self) -> None: ...
    def resume_kv_cache(self) -> None: ...
    def start_profile(self, **kwargs: Any) -> None: ...
    def stop_profile(self) -> None: ...


class CpuServerAdapter(BaseRollout):
    """The rollout side of verl's training worker: the actor's weights to the replica's
    server on every sync."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args, **kwargs) -> None:
        super().__init__(config, model_config, device_mesh)
        size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        rank = int(os.environ.get("RANK", "0"))
        self.replica_rank, self.sends = rank // size, rank % size == 0

    async def update_weights(self, weights, wire_format: str = "named_tensors", **kwargs) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"{NAME}: weight sync in {wire_format}; only named_tensors is served")
        state = {name: tensor.detach().to("cpu", torch.float32).clone() for name, tensor in weights}
        if self.sends:
            server = ray.get_actor(server_name(self.replica_rank))
            await server.load_weights.remote(state, kwargs.get("global_steps"))

    async def resume(self, tags: list[str]) -> None:
        """The server's weights and cache never leave memory."""

    async def release(self) -> None:
        """The server's weights and cache never leave memory."""


class CpuReplica(RolloutReplica):
    """verl's rollout replica with one CpuServer."""

    async def launch_servers(self) -> None:
        server = CpuServer.options(name=server_name(self.replica_rank) + self.name_suffix).remote(
            self.model_config.path, self.config.prompt_length, self.config.response_length
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{NAME}://{self.replica_rank}"


rollout_base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{__name__}.CpuServerAdapter"
RolloutReplicaRegistry.register(NAME, lambda: CpuReplica)

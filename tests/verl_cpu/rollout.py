"""The rollout `hf_cpu`: verl's token-in token-out server, sampling on a CPU with transformers.

verl 0.9.1's rollouts are vLLM, SGLang and TensorRT-LLM servers (its hf and naive rollouts are
registered nowhere); this one is registered through verl's own registries
(`_ROLLOUT_REGISTRY` for the adapter inside the training worker, `RolloutReplicaRegistry` for
the replica), so `actor_rollout_ref.rollout.name=hf_cpu` runs verl's agent loop, load balancer
and weight sync unchanged:

- `CpuServer` (a Ray actor, one per replica) holds the model of `actor_rollout_ref.model.path`
  and answers verl's `generate(request_id, prompt_ids, sampling_params)` with a `TokenOutput`:
  token ids drawn at the request's temperature, top_k and top_p, up to its max_tokens (else the
  rollout's response length), their log-probs as verl asks vLLM for them
  (`logprobs_mode=processed_logprobs`: of the tempered, top-k and top-p filtered, renormalised
  distribution, `processed_log_probs`), and stop_reason "length" for a response cut at the limit
  (SGLang's server and verl's server manager say so; "completed" otherwise). The k-th request
  of the same prompt under the same weights, counted over all replicas (one named actor per
  run, verl_cpu.occurrences), draws from a generator seeded by (prompt, weights' step, k), so
  the same data and seed give the same samples in every run whatever the arrival order and the
  number of replicas (one per rank).
- `CpuServerAdapter` (verl's BaseRollout in the training worker) sends the actor's weights to
  the server on every sync (`update_weights`), so each step samples from the policy verl just
  trained. With `VERL_CPU_RECORD` set, the first replica's server saves each state it receives
  as `weights_<step>.pt` there: what the test reads to see the actor's weights move.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import ray
import torch
from transformers import AutoModelForCausalLM
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

from verl_cpu.occurrences import OCCURRENCES, Occurrences

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


def processed_log_probs(logits: torch.Tensor, temperature: float, top_p: float, top_k: int):
    """vLLM's sampling distribution as log-probs ([V] from [V] logits): logits / temperature,
    then top_k (<= 0: all), then top_p (1: all; the fewest most likely tokens whose probability
    reaches top_p, as vLLM's apply_top_k_top_p: at least one), renormalised; -inf elsewhere.
    temperature 0 is greedy: log-prob 0 on the argmax."""
    if temperature <= 0:
        greedy = torch.full_like(logits, float("-inf"))
        greedy[logits.argmax()] = 0.0
        return greedy
    logits = logits.float() / temperature
    if 0 < top_k < logits.numel():
        kth = logits.topk(top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ascending, order = logits.sort()
        below = ascending.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
        below[-1] = False
        logits = logits.masked_fill(below.scatter(0, order, below), float("-inf"))
    return torch.log_softmax(logits, dim=-1)


def sample_response(
    model: Any,
    prompt_ids: list[int],
    sampling_params: dict[str, Any],
    budget: int,
    generator: torch.Generator,
) -> TokenOutput:
    """Up to `budget` tokens after `prompt_ids` from `model` at the request's temperature, top_p
    and top_k (`processed_log_probs`), ending at the model's EOS: stop_reason "completed", or
    "length" when the budget ran out first."""
    temperature = float(sampling_params.get("temperature", 1.0))
    top_p = float(sampling_params.get("top_p", 1.0))
    top_k = int(sampling_params.get("top_k", -1))
    ids = torch.tensor([prompt_ids])
    tokens, log_probs = [], []
    for _ in range(budget):
        logp = processed_log_probs(model(ids).logits[0, -1], temperature, top_p, top_k)
        token = int(torch.multinomial(logp.exp(), 1, generator=generator))
        tokens.append(token)
        log_probs.append(float(logp[token]))
        if token == model.config.eos_token_id:
            break
        ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    stopped = tokens[-1:] == [model.config.eos_token_id]
    return TokenOutput(
        token_ids=tokens,
        log_probs=log_probs,
        stop_reason="completed" if stopped else "length",
        extra_fields={},
    )


@ray.remote(num_cpus=0)
class CpuServer:
    """One replica's model and sampler (module docstring)."""

    def __init__(
        self, model_path: str, prompt_length: int, response_length: int, records: bool
    ) -> None:
        torch.set_num_threads(1)
        self.records = records  # one replica saves each sync: all receive the same weights
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.prompt_length, self.response_length = prompt_length, response_length
        self.weights_step = 0
        self.occurrences = Occurrences.options(name=OCCURRENCES, get_if_exists=True).remote()

    def load_weights(self, state: dict[str, torch.Tensor], global_steps: int | None) -> None:
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        tied = set(self.model._tied_weights_keys or {}) if missing else set()
        if unexpected or set(missing) - tied:
            raise ValueError(f"weight sync: missing {missing}, unexpected {unexpected}")
        self.weights_step = int(global_steps or 0)
        folder = os.environ.get(RECORD)
        if folder and self.records:
            torch.save(state, os.path.join(folder, f"weights_{self.weights_step}.pt"))

    @torch.no_grad()
    def generate(
        self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any], **unused: Any
    ) -> TokenOutput:
        occurrence = ray.get(self.occurrences.take.remote((self.weights_step, tuple(prompt_ids))))
        generator = torch.Generator().manual_seed(
            sample_seed(prompt_ids, self.weights_step, occurrence)
        )
        room = self.prompt_length + self.response_length - len(prompt_ids)
        budget = min(int(sampling_params.get("max_tokens") or self.response_length), room)
        output = sample_response(self.model, prompt_ids, sampling_params, budget, generator)
        output.extra_fields["global_steps"] = self.weights_step
        return output

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
            self.model_config.path,
            self.config.prompt_length,
            self.config.response_length,
            self.replica_rank == 0,
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{NAME}://{self.replica_rank}"


rollout_base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{__name__}.CpuServerAdapter"
RolloutReplicaRegistry.register(NAME, lambda: CpuReplica)

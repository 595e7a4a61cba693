"""Feed-forward blocks: dense gated MLP or mixture of experts.

Parameter counts assume SwiGLU-style gated MLPs (gate, up, down: 3 matrices of
``hidden x intermediate``), which all bundled architectures use. MoE routers are
``num_experts x hidden``; gpt-oss adds biases to experts and router (gpt-oss model card).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FFNLayer:
    """One layer's feed-forward block.

    Attributes:
        kind: ``dense`` or ``moe``.
        intermediate_size: dense MLP width (dense layers only).
        num_experts / experts_per_token / expert_intermediate_size: routed experts.
        num_shared_experts / shared_intermediate_size: always-active experts.
        expert_bias: experts and router carry biases (gpt-oss).
        expert_input_size: the width routed experts read and write, when a latent
            projection sits around them (Kimi K3's ``routed_expert_hidden_size``); 0 = hidden.
        latent_params: that projection's weights (down h -> latent, up latent -> h, and the
            latent RMSNorm), replicated on every rank and counted with the router.
    """

    kind: str
    hidden_size: int
    intermediate_size: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    expert_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0
    expert_bias: bool = False
    expert_input_size: int = 0
    latent_params: int = 0

    @property
    def is_moe(self) -> bool:
        return self.kind == "moe"

    def dense_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size if self.kind == "dense" else 0

    def one_expert_params(self) -> int:
        h, i = self.expert_input_size or self.hidden_size, self.expert_intermediate_size
        n = 3 * h * i
        if self.expert_bias:
            n += 2 * i + h
        return n

    def routed_expert_params(self) -> int:
        return self.num_experts * self.one_expert_params() if self.is_moe else 0

    def shared_expert_params(self) -> int:
        if not self.is_moe or not self.num_shared_experts:
            return 0
        return 3 * self.hidden_size * self.shared_intermediate_size

    def router_params(self) -> int:
        if not self.is_moe:
            return 0
        n = self.num_experts * self.hidden_size + (self.num_experts if self.expert_bias else 0)
        return n + self.latent_params

    def active_routed_params(self) -> int:
        return self.experts_per_token * self.one_expert_params() if self.is_moe else 0

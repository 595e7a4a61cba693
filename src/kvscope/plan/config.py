"""Deployment configuration the planner reasons about: parallelism and engine flags.

Names mirror the engines' flags (vLLM ``EngineArgs``, SGLang ``ServerArgs``) so a plan
reads like the command line that would run it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.errors import KvscopeError


@dataclass(frozen=True)
class Parallelism:
    """How one replica is split over GPUs, and how many replicas run.

    ``tp`` (``--tensor-parallel-size``), ``pp`` (``--pipeline-parallel-size``), ``dp``
    (``--data-parallel-size``), ``ep`` (``--enable-expert-parallel``: experts are spread
    over tp x dp ranks instead of sharded by TP), ``dp_attention`` (SGLang
    ``--enable-dp-attention``; in vLLM, dp with ep means attention is data-parallel).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: bool = False
    dp_attention: bool = False

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise KvscopeError(f"--{name} must be a positive integer, got {value!r}.")

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def ep_size(self) -> int:
        """Ranks the experts are spread over (1 when expert parallelism is off)."""
        return self.tp * self.dp if self.ep else 1

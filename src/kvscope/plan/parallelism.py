"""How a deployment splits over GPUs: tensor, pipeline, data and expert parallelism and DP
attention (vLLM ``ParallelConfig``, SGLang ``--tp`` / ``--dp-size`` / ``--enable-dp-attention``),
resolved from ``--num-gpus`` and checked against the model. Units: GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.errors import KvscopeError
from kvscope.validate import count

#: Most GPUs a plan may span (2^20). The largest clusters hold a few hundred thousand GPUs; a
#: bigger count is a typo, and the search and the cost figures stay exact below it.
MAX_GPUS = 1 << 20
#: Longest context any flag may ask for (2^31 - 1 tokens): the engines' attention kernels take
#: sequence lengths as int32 (FlashAttention ``seqused_k``, vLLM's ``seq_lens``), so no engine
#: can hold a longer request; the largest public context windows are ~10M tokens.
MAX_TOKENS = 2**31 - 1

#: Flag names as the user types them, for one-line errors.
_FLAG = {
    "tp": "--tensor-parallel-size",
    "pp": "--pipeline-parallel-size",
    "dp": "--data-parallel-size",
}


def resolve_parallel(
    num_gpus: int | None, tp: int | None, pp: int, dp: int, dp_attention: bool
) -> tuple[int, int, int]:
    """(tp, pp, dp) from the command line's ``--num-gpus`` and parallel sizes, checked.

    Every size is a positive integer of at most :data:`MAX_GPUS` before any arithmetic (a zero
    would divide); ``--num-gpus`` alone fills TP; given together they must agree.
    """
    if num_gpus is not None:
        count(num_gpus, "--num-gpus", low=1, high=MAX_GPUS)
    if tp is not None:
        count(tp, _FLAG["tp"], low=1, high=MAX_GPUS)
    count(pp, _FLAG["pp"], low=1, high=MAX_GPUS)
    count(dp, _FLAG["dp"], low=1, high=MAX_GPUS)
    per_tp = pp if dp_attention else pp * dp  # SGLang DP attention lives inside the TP group
    if tp is None:
        tp = max(1, (num_gpus or 1) // per_tp)
    if num_gpus is not None and tp * per_tp != num_gpus:
        shape = f"TP x PP = {tp} x {pp}" if dp_attention else f"TP x PP x DP = {tp} x {pp} x {dp}"
        raise KvscopeError(
            f"--num-gpus {num_gpus} does not equal {shape}.",
            "Give --num-gpus alone, or parallel sizes whose product is the GPU count.",
        )
    return tp, pp, dp


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
            if not isinstance(value, int):
                raise KvscopeError(f"{_FLAG[name]} must be an integer, not {value!r}.")
            count(value, _FLAG[name], low=1, high=MAX_GPUS)
        if self.tp * self.pp * self.dp > MAX_GPUS:
            raise KvscopeError(
                f"TP x PP x DP = {self.tp} x {self.pp} x {self.dp} is more than {MAX_GPUS:,} GPUs.",
                "Plan one deployment at a time; the largest clusters hold far fewer GPUs.",
            )
        if self.dp_attention and self.tp % self.dp:
            raise KvscopeError(
                f"DP attention splits the TP group: --dp {self.dp} must divide --tp {self.tp}.",
                "SGLang runs --tp GPUs with --dp attention groups inside them.",
            )

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def world_size(self) -> int:
        """GPUs in all. SGLang's DP attention splits the TP group instead of adding GPUs."""
        if self.dp_attention:
            return self.tp * self.pp
        return self.tp * self.pp * self.dp

    @property
    def attn_tp(self) -> int:
        """Ranks one attention layer is sharded over: TP, or TP / DP with SGLang DP attention."""
        if self.dp_attention and self.dp > 1:
            return max(1, self.tp // self.dp)
        return self.tp

    @property
    def ep_size(self) -> int:
        """Ranks the experts are spread over (1 when expert parallelism is off)."""
        if not self.ep:
            return 1
        return self.tp if self.dp_attention else self.tp * self.dp


def check_layout(par: Parallelism, is_moe: bool, model_name: str) -> None:
    """Refuse layout flags that would do nothing on this model (one line each).

    ``--enable-expert-parallel`` on a dense model has no experts to place, and
    ``--enable-dp-attention`` without ``--data-parallel-size`` above 1 has no attention
    replicas to make; the engines start anyway and ignore them, so a plan or a simulation
    that names them would describe a layout that does not run. The pipeline split and the
    product of the sizes are checked where they are computed (``pp_layer_split``,
    :func:`resolve_parallel`).
    """
    if par.ep and not is_moe:
        raise KvscopeError(
            f"--enable-expert-parallel: {model_name} has no routed experts to spread.",
            "Drop --enable-expert-parallel for a dense model.",
        )
    if par.dp_attention and par.dp < 2:
        raise KvscopeError(
            "--enable-dp-attention needs --data-parallel-size of 2 or more "
            f"(got {par.dp}): it splits attention over DP ranks.",
            "Add --data-parallel-size (e.g. --dp 8 with --tp 8), or drop --enable-dp-attention.",
        )

"""SGLang's ``SGLANG_SHARED_EXPERT_TP1`` switch: the MoE shared experts whole on every GPU instead
of split over tensor parallelism, and the bytes that adds to one GPU.

Read in the SGLang wheels 0.5.12, 0.5.13, 0.5.14, 0.5.16, 0.5.20 and 0.5.23 (absent from 0.5.8,
0.5.9 and 0.5.11): ``srt/environ.py`` declares ``SGLANG_SHARED_EXPERT_TP1 = EnvBool(False)``;
``DeepseekV2MoE.__init__`` (``srt/models/deepseek_v2.py``, which DeepSeek V4's
``srt/models/deepseek_v4.py`` also builds) passes ``tp_rank=0, tp_size=1`` to the shared
experts' ``DeepseekV2MLP`` when it is set, so each GPU loads the whole shared MLP; and
``ModelRunner`` (``srt/model_executor/model_runner.py``) then skips its check that
``moe_intermediate_size / moe_tp_size`` is a multiple of the FP8 weight block, which
DeepSeek-V4-Pro fails at a MoE TP of 16 (3,072 / 16 = 192), so such a start needs the switch.
The MTP draft layer is a ``DeepseekV2MoE`` too. DeepEP and the other all-to-all backends make the
same choice on their own; kvscope plans no all-to-all backend, so only the switch is modelled.
"""

from __future__ import annotations

from kvscope.errors import KvscopeError
from kvscope.plan.weights import RankWeights, with_component

#: First SGLang release with ``SGLANG_SHARED_EXPERT_TP1`` (environ.py).
SHARED_EXPERT_TP1_SINCE = (0, 5, 12)


def check_shared_expert_tp1(engine: str, version: tuple[int, ...]) -> None:
    """Refuse the switch where the engine has none."""
    if engine != "sglang":
        raise KvscopeError(
            "--shared-expert-tp1 is SGLang's switch (SGLANG_SHARED_EXPERT_TP1); vLLM has none.",
            "Drop --shared-expert-tp1 with --engine vllm.",
        )
    if tuple(version) < SHARED_EXPERT_TP1_SINCE:
        raise KvscopeError(
            "SGLANG_SHARED_EXPERT_TP1 first appears in SGLang 0.5.12; this release has no "
            "such switch.",
            "Drop --shared-expert-tp1, or plan --engine-version 0.5.12 or later.",
        )


def with_whole_shared_experts(w: RankWeights, tp: int) -> RankWeights:
    """``w`` with the (TP - 1)/TP share of the shared experts a TP rank does not hold by
    default (:func:`kvscope.plan.weights.rank_weights` counts 1/TP of them)."""
    share = w.by_component.get("shared_experts", 0.0)
    return with_component(w, "shared_experts_tp1", share * (tp - 1))

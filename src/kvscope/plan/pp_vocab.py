"""Vocabulary tables vLLM builds on every pipeline stage, for model classes that never swap
them for ``PPMissingLayer`` (bytes per GPU).

Most vLLM decoders build the token embedding only on the first pipeline stage and the LM head
only on the last (``LlamaModel``: ``if get_pp_group().is_first_rank ... else PPMissingLayer()``,
``LlamaForCausalLM``: ``if get_pp_group().is_last_rank``; likewise ``DeepseekV2Model``,
``Glm4MoeModel``, ``MiniMaxM2Model``). Some classes build both unconditionally and only skip
them in ``forward``: ``Qwen3MoeModel.__init__`` creates ``self.embed_tokens =
VocabParallelEmbedding(...)`` and ``Qwen3MoeForCausalLM.__init__`` ``self.lm_head =
ParallelLMHead(...)`` with no pipeline check (vllm/model_executor/models/qwen3_moe.py, read in
the 0.9.2, 0.22.0, 0.23.0, 0.25.0, 0.27.0 and 0.31.0 wheels), so every stage holds both
tables and the weights vLLM measures per stage include them. The same holds for the classes
of :data:`EVERY_STAGE_TYPES` (mixtral.py, qwen2_moe.py, olmoe.py, phimoe.py, granitemoe.py,
minicpm.py, gemma2.py, gemma3.py: 0.9.2, 0.22.0, 0.27.0, 0.31.0; qwen3_next.py: 0.22.0,
0.27.0, 0.31.0). With tied embeddings the head is the embedding (``tie_weights`` or
``logits_processor(self.model.embed_tokens, ...)``), so each stage holds one table.

Published check: the 0.27.1 PP4 start of Qwen3-235B-A22B-Instruct-2507-FP8 on four RTX PRO 6000
logs "Model loading took 55.70 GiB" on its first stage (23 of 94 layers), which is 23 layers
plus both 1.16 GiB tables, where the TP4 start of the same checkpoint logs 55.19 GiB.
"""

from __future__ import annotations

from kvscope.plan.weights import RankWeights, with_component
from kvscope.specs.model import ModelSpec

#: HF ``model_type`` values whose vLLM class builds the embedding and LM head on every stage.
EVERY_STAGE_TYPES = frozenset(
    {
        "qwen3_moe",
        "qwen2_moe",
        "qwen3_next",
        "mixtral",
        "olmoe",
        "phimoe",
        "granitemoe",
        "minicpm",
        "gemma2",
        "gemma3",
        "gemma3_text",
    }
)


def builds_tables_everywhere(model: ModelSpec) -> bool:
    """Whether vLLM's class for ``model`` holds the vocabulary tables on every PP stage."""
    return model.model_type in EVERY_STAGE_TYPES


def with_every_stage_tables(
    stages: tuple[RankWeights, ...], model: ModelSpec
) -> tuple[RankWeights, ...]:
    """``stages`` with the tables each stage holds beyond its own end of the model: the
    embedding on every stage after the first, an untied LM head on every stage before the
    last (sizes as the first and last stage hold them)."""
    if len(stages) < 2 or not builds_tables_everywhere(model):
        return stages
    embed = stages[0].by_component.get("embedding", 0.0)
    head = 0.0 if model.tie_word_embeddings else stages[-1].by_component.get("lm_head", 0.0)
    last = len(stages) - 1
    out = []
    for i, w in enumerate(stages):
        if i > 0 and not (i == last and model.tie_word_embeddings):
            w = with_component(w, "pp_embedding", embed)
        if i < last:
            w = with_component(w, "pp_lm_head", head)
        out.append(w)
    return tuple(out)

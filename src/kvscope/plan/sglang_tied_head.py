"""The LM head SGLang before 0.4.0 built beside a tied input embedding, and the bytes it adds to
each GPU.

Read in the SGLang wheels 0.3.3, 0.3.5 and 0.3.6: ``LlamaForCausalLM.__init__``
(``srt/models/llama.py``) and ``Qwen2ForCausalLM.__init__`` (``srt/models/qwen2.py``) always
create ``self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)``; with
``tie_word_embeddings`` set, ``load_weights`` only copies the embedding into that separate
tensor ("Tie output embedding layer to input embedding layer"). ``MistralForCausalLM``
(``srt/models/mistral.py``) subclasses the Llama class. From 0.4.0 both classes share the
table (``if config.tie_word_embeddings: self.lm_head = self.model.embed_tokens``, llama.py and
qwen2.py in the 0.4.0-0.4.5 wheels), which is what :func:`kvscope.plan.weights.rank_weights`
counts. A tied Llama 3.2 or Qwen2.5 checkpoint therefore holds its vocabulary table twice under
the older releases: Llama-3.2-1B-Instruct on an H100 loaded 2.91 GB in the SGLang docs build of
2024-11-10 (main at 0.3.5) and 2.42 GB from the 2024-12-04 build (0.4.0) on.
"""

from __future__ import annotations

from kvscope.plan.weights import RankWeights, with_component
from kvscope.specs.model import ModelSpec

#: First SGLang release whose Llama and Qwen2 classes reuse the embedding as the LM head.
SHARED_HEAD_SINCE = (0, 4, 0)
#: HF ``model_type`` values served by those two model files (llama.py, mistral.py, qwen2.py).
SEPARATE_HEAD_TYPES = frozenset({"llama", "mistral", "qwen2"})


def builds_separate_head(model: ModelSpec, version: tuple[int, ...]) -> bool:
    """Whether SGLang ``version`` holds a second vocabulary table for ``model``'s tied head."""
    return (
        model.tie_word_embeddings
        and model.model_type in SEPARATE_HEAD_TYPES
        and tuple(version) < SHARED_HEAD_SINCE
    )


def with_separate_head(
    stages: tuple[RankWeights, ...], model: ModelSpec, version: tuple[int, ...]
) -> tuple[RankWeights, ...]:
    """``stages`` with the LM head the release builds beside a tied embedding, sized as the
    embedding the first stage holds (both are vocabulary-parallel over TP)."""
    if not builds_separate_head(model, version):
        return stages
    head = stages[0].by_component.get("embedding", 0.0)
    return (*stages[:-1], with_component(stages[-1], "tied_lm_head_copy", head))

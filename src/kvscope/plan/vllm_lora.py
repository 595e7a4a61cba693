"""The LoRA slots vLLM preallocates with ``--enable-lora`` (weights side of the budget).

With LoRA enabled vLLM wraps the model's layers right after loading it, inside the
``DeviceMemoryProfiler`` whose reading the log prints as "Model loading took" (V0
``ModelRunner.load_model``, vllm/worker/model_runner.py of the 0.8.5.post1 wheel; V1
``GPUModelRunner.load_model`` -> ``load_lora_model``, vllm/v1/worker/gpu_model_runner.py of
the 0.11.0 and 0.12.0 wheels). Each wrapped layer's ``create_lora_weights`` allocates zeroed
stacks for ``max_loras`` adapters of rank ``max_lora_rank`` in ``lora_dtype`` (``auto`` = the
model dtype), whether or not an adapter is ever loaded (vllm/lora/layers.py of 0.8.5.post1;
vllm/lora/layers/ of 0.11.0 and 0.12.0):

- every linear layer (``get_supported_lora_modules``: all ``LinearBase`` modules): per
  slice an A stack ``rank x input`` and a B stack ``output x rank``. Column-parallel layers
  (the packed QKV with 3 slices, gate/up with 2) keep the whole input and their output
  shard; row-parallel ones (``o_proj``, ``down_proj``) their input shard and the whole
  output.
- for classes that declare ``embedding_modules`` (Llama and the models built on it, Mixtral,
  Granite, ...; not Qwen2/Qwen3, Gemma, Phi-3) the input embedding and the LM head too:
  ``VocabParallelEmbeddingWithLoRA`` an A stack over the whole vocabulary and a B stack
  ``hidden x rank``; ``LogitsProcessorWithLoRA`` an A stack ``rank x hidden`` and a B stack
  over the vocabulary. Up to 0.11 LoRA adapters could also add ``lora_extra_vocab_size``
  (256) tokens: the embedding then grows by ``256 x max_loras`` rows, both wrappers keep an
  ``embeddings_tensors`` stack of ``max_loras x 256 x hidden`` in the model dtype, the
  embedding's A stack covers the extra tokens and the head's B stack is padded to a multiple
  of 256 (``lora_vocab_padding_size``); 0.12.0 dropped the extra vocabulary.

MoE experts, MLA and linear-attention projections are not counted (no start read uses them).
Checked on Unsloth's GRPO notebooks (one slot): Llama-3.2-3B at rank 64 logs 6.2472 GiB under
vLLM 0.8.1 against 6.0160 GiB without LoRA (0.8.2), 6.232 planned; Qwen3-4B at rank 32
7.6334 (7.625 planned); Qwen3-8B-FP8 at rank 32 8.9638 (8.962); Llama-3.2-1B FP8-block at
rank 32 1.4721 (1.472); Mistral-7B-v0.3 bnb-4bit at rank 32 4.0423 (4.030).
"""

from __future__ import annotations

import math

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.model import ModelSpec

#: ``model_type`` of the checkpoints whose vLLM class declares ``embedding_modules`` (read in
#: vllm/model_executor/models/ of the 0.8.5.post1 and 0.11.0 wheels: llama.py, which the
#: Mistral checkpoints also load through, mixtral.py, granite*.py, exaone*.py, nemotron*.py,
#: solar.py, minicpm.py, phimoe.py, jamba.py, bamba.py).
EMBEDDING_LORA_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "granite",
        "granitemoe",
        "granitemoeshared",
        "exaone",
        "exaone4",
        "nemotron",
        "solar",
        "minicpm",
        "phimoe",
        "jamba",
        "bamba",
    }
)
#: The last release whose ``LoRAConfig`` has ``lora_extra_vocab_size`` (default 256):
#: vllm/config/lora.py of 0.11.0 warns it "will be removed in v0.12.0"; 0.12.0 has none.
EXTRA_VOCAB_BEFORE = (0, 12, 0)
LORA_EXTRA_VOCAB = 256
LORA_VOCAB_PADDING = 256
EMBED_PADDING = 64


def lora_slot_bytes(
    model: ModelSpec,
    par: Parallelism,
    eng: EngineConfig,
    layers: tuple[int, ...],
    first_stage: bool,
    last_stage: bool,
) -> float:
    """Bytes of the LoRA stacks one GPU of a pipeline stage holding ``layers`` allocates."""
    rank = eng.max_lora_rank
    if eng.engine != "vllm" or not rank:
        return 0.0
    slots = eng.max_loras
    tp = par.tp
    per = element_bytes(model.dtype)
    elements = 0.0
    for i in layers:
        layer = model.layers[i]
        att = layer.attention
        if att.kind in ("full", "sliding"):
            h = att.hidden_size
            q = att.num_heads * att.head_dim
            kv = max(1, att.num_kv_heads // tp) * att.head_dim
            elements += 3 * rank * h + rank * (q / tp + 2 * kv)  # packed QKV, 3 slices
            elements += rank * q / tp + h * rank  # o_proj (row-parallel)
        ffn = layer.ffn
        if ffn.kind == "dense" and ffn.intermediate_size:
            h, inter = ffn.hidden_size, ffn.intermediate_size
            elements += 2 * rank * h + rank * 2 * inter / tp  # gate/up, 2 slices
            elements += rank * inter / tp + h * rank  # down_proj (row-parallel)
    elements *= slots
    if model.model_type in EMBEDDING_LORA_TYPES:
        h, vocab = model.hidden_size, model.vocab_size
        extra = LORA_EXTRA_VOCAB if eng.version < EXTRA_VOCAB_BEFORE else 0
        if first_stage:
            elements += slots * ((vocab + extra) * rank + h * rank + extra * h)
            # the embedding's rows for the adapters' tokens, vocab-parallel
            added = math.ceil(extra * slots / EMBED_PADDING) * EMBED_PADDING
            elements += added * h / tp
        if last_stage:
            head = vocab + extra
            if extra:
                head = math.ceil(head / LORA_VOCAB_PADDING) * LORA_VOCAB_PADDING
            elements += slots * (rank * h + head * rank + extra * h)
            if not (model.tie_word_embeddings and par.pp == 1) and extra:
                # an untied head of vocab + 256 rows padded to 256, not vocab padded to 64
                planned = math.ceil(vocab / EMBED_PADDING) * EMBED_PADDING
                elements += max(0, head - planned) * h / tp
    return elements * per

"""Write a tiny random-weight Llama GGUF with the ``gguf`` package (no download needed).

2 layers, 64-dim, 4 heads (2 KV heads), 128-dim FFN, a SentencePiece-style vocabulary of 3
control tokens, 256 byte tokens and the letters; seeded random f32 weights. The output is
gibberish, but llama-server runs every real path (tokenise, batch, decode, /metrics). Recipe
measured in shared/reference/cpu_engines.md (gguf 0.19.0).
"""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np

DIM, LAYERS, HEADS, KV_HEADS, FFN, CTX = 64, 2, 4, 2, 128, 4096


def write_tiny_llama(path: Path, seed: int = 0) -> Path:
    import gguf

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    for piece in ["▁", *string.ascii_lowercase, *(f"▁{c}" for c in string.ascii_lowercase)]:
        tokens.append(piece)
        types.append(gguf.TokenType.NORMAL)
    scores = [0.0] * 259 + [float(len(t)) for t in tokens[259:]]
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.1).astype(np.float32)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(CTX)
    w.add_embedding_length(DIM)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(DIM // HEADS)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types([int(t) for t in types])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    kv_dim = DIM // HEADS * KV_HEADS
    w.add_tensor("token_embd.weight", mat(len(tokens), DIM))
    w.add_tensor("output_norm.weight", np.ones(DIM, dtype=np.float32))
    w.add_tensor("output.weight", mat(len(tokens), DIM))
    for i in range(LAYERS):
        for name, shape in (
            ("attn_q", (DIM, DIM)),
            ("attn_k", (kv_dim, DIM)),
            ("attn_v", (kv_dim, DIM)),
            ("attn_output", (DIM, DIM)),
            ("ffn_gate", (FFN, DIM)),
            ("ffn_up", (FFN, DIM)),
            ("ffn_down", (DIM, FFN)),
        ):
            w.add_tensor(f"blk.{i}.{name}.weight", mat(*shape))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(DIM, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(DIM, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path

"""llama.cpp test helpers: a tiny random-weight Llama GGUF (no download) and where llama-server is.

Architecture: 2 layers, 64-dim embeddings, 4 heads (2 KV heads), 128-dim FFN, a
SentencePiece-style ("llama") vocabulary of control tokens, 256 byte tokens and whole-word
pieces ("▁the", ...), and a ChatML chat template. Weights are seeded random f32, so the output
is gibberish but the engine runs every real code path (tokenise, batch, decode, stream,
/metrics). About 0.3 MB, written with the gguf package's GGUFWriter (gguf 0.19.0).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# words the bench's calibrated prompts use become single tokens, as in real vocabularies
from kvscope.bench.prompts import WORDS

DIM, LAYERS, HEADS, KV_HEADS, FF, CTX = 64, 2, 4, 2, 128, 4096
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    import gguf

    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    # every prefix of "▁word" is a piece too: SentencePiece-style merging (llama.cpp's
    # llm_tokenizer_spm) joins adjacent symbols only into pieces that exist, so a whole-word
    # token is reachable only through its prefixes
    words = [f"▁{w}" for w in WORDS]
    prefixes = [w[:k] for w in words for k in range(2, len(w) + 1)]
    pieces = ["▁", *"abcdefghijklmnopqrstuvwxyz", *prefixes]
    seen = set(tokens)
    for p in pieces:
        if p not in seen:
            seen.add(p)
            tokens.append(p)
            types.append(gguf.TokenType.NORMAL)
    scores = [0.0] * 3 + [0.0] * 256 + [float(-i) for i in range(len(tokens) - 259)]
    # longer pieces score higher so SentencePiece picks whole words
    for i in range(259, len(tokens)):
        scores[i] = float(len(tokens[i]))
    return tokens, scores, [int(t) for t in types]


@dataclass(frozen=True)
class Shape:
    """A random Llama's size: embedding width, layers, heads, KV heads, FFN width."""

    dim: int = DIM
    layers: int = LAYERS
    heads: int = HEADS
    kv_heads: int = KV_HEADS
    ff: int = FF


#: The default tiny shape (0.3 MB: every code path, almost no compute).
TINY = Shape()
#: A small shape whose steps are dominated by compute, not by the server's per-step host
#: work (4.3 M parameters, 17 MB of f32: a prompt token costs ~9 MFLOP, a decode step
#: reads every weight), for latency measurements that must rise above scheduling noise.
SMALL = Shape(dim=256, layers=4, heads=4, kv_heads=2, ff=1024)


def write_tiny_llama(path: Path, seed: int = 0, shape: Shape = TINY) -> Path:
    import gguf

    tokens, scores, types = vocabulary()
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("kvscope-tiny-random-llama")
    w.add_context_length(CTX)
    w.add_embedding_length(shape.dim)
    w.add_block_count(shape.layers)
    w.add_feed_forward_length(shape.ff)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(shape.dim // shape.heads)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHATML)
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.1).astype(np.float32)

    dim, ff = shape.dim, shape.ff
    kv_dim = dim // shape.heads * shape.kv_heads
    w.add_tensor("token_embd.weight", mat(vocab, dim))
    w.add_tensor("output_norm.weight", np.ones(dim, dtype=np.float32))
    w.add_tensor("output.weight", mat(vocab, dim))
    for i in range(shape.layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(dim, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", mat(dim, dim))
        w.add_tensor(f"blk.{i}.attn_k.weight", mat(kv_dim, dim))
        w.add_tensor(f"blk.{i}.attn_v.weight", mat(kv_dim, dim))
        w.add_tensor(f"blk.{i}.attn_output.weight", mat(dim, dim))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(dim, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(ff, dim))
        w.add_tensor(f"blk.{i}.ffn_up.weight", mat(ff, dim))
        w.add_tensor(f"blk.{i}.ffn_down.weight", mat(dim, ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


#: llama-cpp-python release whose vendored llama.cpp scripts/build_llama_server.sh builds.
LLAMA_VERSION = "0.3.36"


def llama_server_binary() -> Path | None:
    """``$KVSCOPE_LLAMA_SERVER``, else the build cache, else ``llama-server`` on PATH."""
    env = os.environ.get("KVSCOPE_LLAMA_SERVER")
    if env:
        return Path(env) if Path(env).is_file() else None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    p = cache / "kvscope" / f"llama-server-{LLAMA_VERSION}" / "llama-server"
    if p.is_file():
        return p
    found = shutil.which("llama-server")
    return Path(found) if found else None

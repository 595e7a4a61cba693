"""Prompt text for a workload: exact token counts and byte-identical shared prefixes.

A :class:`~kvscope.workload.request.Request` carries lengths, not text; a live server needs
text. ``PromptBuilder`` turns each request into a prompt:

* **Shared prefixes.** A request's ``prefix_hashes`` name its full blocks of
  ``hash_block_size`` tokens (chained, so equal hashes mean equal prefixes). Block ``h`` is
  rendered from ``h`` alone, so every request that shares the first ``k`` hashes gets the same
  first ``k`` block texts byte for byte, and the server's prefix cache (vLLM keys blocks by
  their token content, vllm/v1/core/kv_cache_utils.py) sees exactly the reuse the trace
  intended. The tail after the last full block is unique to the request.
* **Exact length** with a tokenizer (``tokenizer.json`` read by the ``tokenizers`` library):
  the vocabulary is scanned for word tokens that re-encode to themselves and that a
  whitespace pre-tokenizer keeps apart, so a text of ``n`` such words encodes to exactly ``n``
  tokens; the result is checked by encoding and trimmed or padded if a tokenizer surprises.
* **Calibrated approximation** without a tokenizer: English words from a fixed list, sized by
  ``tokens_per_word`` and ``overhead_tokens`` measured from the server's own
  ``usage.prompt_tokens`` (see :func:`kvscope.bench.preflight.calibrate`); the error against
  the server's count is reported per request in the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvscope.errors import KvscopeError
from kvscope.workload.request import Request

#: Common short English words; in BPE/SentencePiece vocabularies of Llama-, Qwen- and GPT-class
#: tokenizers each " word" is one token, so the approximation starts near 1 token per word.
_WORD_TEXT = """
the of and to in is was for on that with as by at from his her it an were are which this
be or has had not but have one new first their after who they its also two been other
all when there more into time during about over can only most some would between may
three city these people world up such out no made many year used part years both then
where well while school under team since state him through because same any before each
high film now later group four work so she known called being five number several game
area could will must around own long name house water line war north south east west
river small early life family second music left back last book main place show just very
local best did how great much what does road often our take still like way music light
land green black white red blue day night home open side end power form field point
order voice paper table story change plan case fact level
"""
WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())


class TokenizerBackend:
    """A local ``tokenizer.json`` and the single-token words found in its vocabulary."""

    def __init__(self, path: str | Path) -> None:
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise KvscopeError(f"{p}: no tokenizer.json there.", hint="Give --tokenizer FILE.")
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise KvscopeError(
                "--tokenizer needs the 'tokenizers' package.",
                hint="pip install 'kvscope[tokenizers]'",
            ) from None
        try:
            self.tok = Tokenizer.from_file(str(p))
        except Exception as err:  # the library raises a bare Exception on bad files
            raise KvscopeError(f"{p}: not a readable tokenizer.json ({err}).") from None
        self.path = p
        self.words = self._single_token_words()
        if len(self.words) < 16:
            raise KvscopeError(f"{p}: found only {len(self.words)} single-token words.")

    def _single_token_words(self) -> tuple[str, ...]:
        # Try each vocabulary entry decoded as " <text>": keep it when that string encodes to
        # one token (no special tokens), so space-separated runs split exactly per word.
        vocab = self.tok.get_vocab()
        found: list[str] = []
        for tid in sorted(vocab.values()):
            text = self.tok.decode([tid]).strip()
            if not (text.isascii() and text.isalpha() and 2 <= len(text) <= 12):
                continue
            enc = self.tok.encode(" " + text, add_special_tokens=False).ids
            if len(enc) == 1:
                found.append(text)
            if len(found) >= 4096:
                break
        return tuple(sorted(set(found)))

    def count(self, text: str) -> int:
        """Tokens of ``text`` with the tokenizer's own special tokens (e.g. BOS) added."""
        return len(self.tok.encode(text, add_special_tokens=True).ids)

    def special_overhead(self) -> int:
        """Tokens the post-processor adds to any text (BOS/EOS)."""
        return self.count("hello") - len(self.tok.encode("hello", add_special_tokens=False).ids)


@dataclass(frozen=True)
class Calibration:
    """Prompt tokens ≈ ``overhead_tokens + tokens_per_word * words`` (from server usage)."""

    tokens_per_word: float = 1.0
    overhead_tokens: float = 0.0
    source: str = "assumed"

    def words_for(self, tokens: int) -> int:
        return max(1, round((tokens - self.overhead_tokens) / self.tokens_per_word))

    def words_for_block(self, tokens: int) -> int:
        return max(1, round(tokens / self.tokens_per_word))


class PromptBuilder:
    """Render requests as prompt text (deterministic for a seed)."""

    def __init__(
        self,
        *,
        tokenizer: TokenizerBackend | None = None,
        calibration: Calibration | None = None,
        seed: int = 0,
    ) -> None:
        self.tokenizer = tokenizer
        self.calibration = calibration or Calibration()
        self.words = np.array(tokenizer.words if tokenizer else WORDS, dtype=object)
        self.seed = seed
        self._blocks: dict[int, str] = {}
        self._overhead = tokenizer.special_overhead() if tokenizer else 0

    # one block of shared prefix: the same hash always renders to the same text
    def _block(self, h: int, block_tokens: int) -> str:
        text = self._blocks.get(h)
        if text is None:
            n = block_tokens if self.tokenizer else self.calibration.words_for_block(block_tokens)
            rng = np.random.default_rng([self.seed, h & 0xFFFFFFFF, h >> 32])
            text = " ".join(self.words[rng.integers(0, len(self.words), n)])
            self._blocks[h] = text
        return text

    def filler(self, n: int, key: int) -> str:
        rng = np.random.default_rng([self.seed, 0x5EED, key])
        return " ".join(self.words[rng.integers(0, len(self.words), max(n, 0))])

    def build(self, req: Request, index: int) -> str:
        """The prompt of ``req`` (``index`` seeds the unique tail)."""
        if req.prompt_text is not None:
            return req.prompt_text
        parts: list[str] = []
        covered = 0
        if req.prefix_hashes and req.hash_block_size:
            bs = req.hash_block_size
            usable = min(len(req.prefix_hashes), req.prompt_tokens // bs)
            parts = [self._block(h, bs) for h in req.prefix_hashes[:usable]]
            covered = usable * bs
        if self.tokenizer is not None:
            tail = req.prompt_tokens - covered - self._overhead
            parts.append(self.filler(tail, index))
            return self._exact(" ".join(p for p in parts if p), req.prompt_tokens, index)
        cal = self.calibration
        block_words = len(parts) * cal.words_for_block(req.hash_block_size or 1) if parts else 0
        tail_words = max(1, cal.words_for(req.prompt_tokens) - block_words)
        parts.append(self.filler(tail_words, index))
        return " ".join(p for p in parts if p)

    def _exact(self, text: str, target: int, index: int) -> str:
        # Word tokens split at spaces, so this normally holds at once; correct the tail if not.
        assert self.tokenizer is not None
        tok = self.tokenizer
        if tok.count(text.split(" ", 1)[0]) != 1 + self._overhead:
            # the first word is a word piece only after a space in this vocabulary (GPT-2's
            # "Ġthe"): start with a space so it stays one token
            text = " " + text
        for attempt in range(8):
            n = tok.count(text)
            if n == target:
                return text
            if n > target:
                words = text.split(" ")
                cut = max(2 if text.startswith(" ") else 1, len(words) - (n - target))
                text = " ".join(words[:cut])
            else:
                text = text + " " + self.filler(target - n, index * 31 + attempt + 1)
        n = tok.count(text)
        if n != target:
            raise KvscopeError(
                f"could not build a prompt of exactly {target} tokens with {tok.path} "
                f"(got {n}); the tokenizer merges across spaces."
            )
        return text


def fit_calibration(samples: list[tuple[int, int]], source: str) -> Calibration:
    """Least-squares line through ``(words, prompt_tokens)`` pairs measured on the server."""
    if len(samples) < 2:
        raise KvscopeError("calibration needs at least two measured prompts.")
    x = np.array([s[0] for s in samples], dtype=np.float64)
    y = np.array([s[1] for s in samples], dtype=np.float64)
    slope, intercept = np.polyfit(x, y, 1)
    if not (math.isfinite(slope) and slope > 0.05):
        raise KvscopeError(f"server prompt-token counts do not grow with length ({samples}).")
    return Calibration(float(slope), float(max(intercept, 0.0)), source)


def calibration_words() -> tuple[int, int]:
    """Word counts of the two calibration prompts."""
    return (32, 256)


def describe(builder: PromptBuilder) -> dict[str, Any]:
    """How prompts were made, for ``summary.json``."""
    if builder.tokenizer is not None:
        return {"mode": "exact", "tokenizer": str(builder.tokenizer.path)}
    c = builder.calibration
    return {
        "mode": "calibrated",
        "tokens_per_word": c.tokens_per_word,
        "overhead_tokens": c.overhead_tokens,
        "calibration_source": c.source,
    }

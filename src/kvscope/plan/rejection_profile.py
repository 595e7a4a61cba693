"""The rejection-sampler pass that vLLM's V1 profiling run adds when speculative decoding is
configured: its peak bytes on one GPU of the last pipeline stage.

``GPUModelRunner._dummy_sampler_run`` (vllm/v1/worker/gpu_model_runner.py) samples the dummy
batch's S = ``min(max_num_seqs, T)`` rows once, then, with a ``speculative_config`` of any
method, gives every request one dummy draft token and runs ``self.rejection_sampler`` on
``torch.randn(num_tokens + num_reqs, vocab)`` logits in the logits' dtype (b bytes): 2 S rows
over the target's vocabulary V, whatever k and the drafter's own vocabulary. In
``RejectionSampler.forward`` (vllm/v1/sample/rejection_sampler.py) the bonus rows are gathered
(``logits[bonus_logits_indices]``, S V b, kept to the end) and sampled with
``max_num_logprobs=-1`` and ``raw_logits`` logprobs, so the bonus output keeps an fp32 copy
(S V 4); the target rows are gathered and made fp32 (S V 4), cloned for the logits processors
(S V 4), scaled and top-k/top-p masked in place (``apply_top_k_top_p_triton`` from 8 rows on);
``rejection_sample`` then takes their fp32 softmax (S V 4) and ``sample_recovered_tokens``
draws ``q`` and ``inv_q = q.reciprocal()`` (2 x S V 4). All of them are live at the kernel
launch: S V (3 b + 24) bytes, against the plain sampler pass's S V (b + 12) (:mod:`kvscope.plan.
activation`), beside the pass's hidden states (T h b) that ``profile_run`` still holds. A
``draft_sample_method="probabilistic"`` drafter under the ``standard`` rejection method
(``fly`` too from 0.33) also gets dummy fp32 draft probabilities (``torch.softmax`` of
``torch.rand(num_tokens, vocab)``, S V 4) from 0.22.0.

Read in the 0.17.0, 0.19.0, 0.20.0, 0.22.0, 0.24.0, 0.29.0, 0.31.0, 0.32.0 and 0.33.0 wheels
(the forward is the same text throughout; 0.29.0 adds a second, all-greedy pass that returns
before the softmax, so it is smaller). Before 0.17.0 the mask sorts the vocabulary
(``apply_top_k_top_p_pytorch``) and 0.16.0 draws no ``inv_q``: a different peak, not sized
here. The V2 runner (:func:`kvscope.plan.vllm_runner.runs_v2`, the only runner from 0.34.0)
has its own sampler and is not covered.
"""

from __future__ import annotations

from kvscope.plan.config import EngineConfig
from kvscope.plan.vllm_runner import runs_v2
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: First release whose rejection pass masks in place (Triton top-k/top-p) and draws ``inv_q``.
REJECTION_PASS_SINCE = (0, 17, 0)
#: First release that gives a probabilistic drafter dummy draft probabilities.
DRAFT_PROBS_SINCE = (0, 22, 0)
#: First release whose ``fly`` rejection method gets them too.
FLY_DRAFT_PROBS_SINCE = (0, 33, 0)
#: fp32 vocabulary-wide rows the pass holds at its peak, per dummy request: the bonus
#: output's raw logits, the fp32 target logits, their clone, the softmax, q and 1/q.
FP32_ROWS = 6
#: rows in the logits' dtype: the 2 S random logits and the gathered bonus rows.
LOGIT_DTYPE_ROWS = 3


def _probs_methods(v: tuple[int, int, int]) -> tuple[str, ...]:
    return ("standard", "fly") if v >= FLY_DRAFT_PROBS_SINCE else ("standard",)


def rejection_pass_bytes(
    model: ModelSpec, eng: EngineConfig, gpu: GPUSpec, tokens: int, max_num_seqs: int
) -> float:
    """Peak bytes of the profiling pass's rejection-sampler run on the last stage (0.0 where
    the start has no speculative config, runs the V2 runner or predates the read release)."""
    spec = eng.speculative
    if spec is None or eng.version < REJECTION_PASS_SINCE or runs_v2(model, eng, gpu):
        return 0.0
    raw = spec.raw_dict()
    probabilistic = (
        eng.version >= DRAFT_PROBS_SINCE
        and raw.get("draft_sample_method") == "probabilistic"
        and raw.get("rejection_sample_method", "standard") in _probs_methods(eng.version)
    )
    b = element_bytes(model.dtype)
    rows = min(max_num_seqs, tokens)
    width = LOGIT_DTYPE_ROWS * b + 4.0 * (FP32_ROWS + (1 if probabilistic else 0))
    return rows * model.vocab_size * width + tokens * model.hidden_size * b

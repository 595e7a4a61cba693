"""The winner's ready-to-paste launch command, with flags the engine really has.

The base line is the planner's (:func:`kvscope.plan.advice.command_line`: ``vllm serve`` with
vLLM ``EngineArgs`` flags, ``python -m sglang.launch_server`` with SGLang ``ServerArgs``),
planned for the point's layout and flags so every budget it prints is the one simulated;
tune adds the flags it varies that the planner line leaves out: vLLM
``--no-enable-prefix-caching``, ``--no-enable-chunked-prefill`` and ``--speculative-config``
(vLLM 0.33.0 ``vllm/engine/arg_utils.py``); SGLang ``--disable-radix-cache`` and
``--chunked-prefill-size -1`` (chunked prefill off; SGLang ``server_args.py``).
"""

from __future__ import annotations

import shlex

from kvscope.plan.advice import command_line
from kvscope.plan.config import Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.sim.deployment import engine_config
from kvscope.sim.run import SimConfig
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model


def launch_command(cfg: SimConfig) -> str:
    """The ``vllm serve`` / ``sglang.launch_server`` line that runs ``cfg``."""
    model = load_model(cfg.model, dtype=cfg.dtype, revision=cfg.revision)
    par = Parallelism(
        tp=cfg.tp,
        pp=cfg.pp,
        dp=cfg.dp,
        ep=cfg.enable_expert_parallel,
        dp_attention=cfg.enable_dp_attention,
    )
    eng = engine_config(cfg)  # the settings the point was simulated with, drafter included
    plan = plan_memory(model, get_gpu(cfg.gpu), par, eng)
    online = model.quantization.method if model.quantization.online else None
    line = command_line(cfg.model, plan, eng, par, online)
    if cfg.engine == "sglang":
        if not cfg.enable_prefix_caching:
            line += " --disable-radix-cache"
        if not cfg.enable_chunked_prefill:
            line = line.replace(
                f"--chunked-prefill-size {plan.max_num_batched_tokens}", "--chunked-prefill-size -1"
            )
        return line
    if not cfg.enable_prefix_caching:
        line += " --no-enable-prefix-caching"
    if not cfg.enable_chunked_prefill:
        line += " --no-enable-chunked-prefill"
    if cfg.speculative_config:
        line += f" --speculative-config {shlex.quote(cfg.speculative_config)}"
    return line

"""kvscope: see under the hood of LLM serving.

GPU memory, the paged KV cache and communication, turned into numbers an operator can
act on. The public Python API lives in the subpackages (``kvscope.specs``,
``kvscope.plan``, ...); the ``kvscope`` command is a thin shell over them.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

"""moeft's Python side: vLLM's KV connector over libmoeft (``moeft.vllm``).

The package imports nothing of vLLM until ``moeft.vllm`` is imported.
"""

__version__ = "0.1.0"

"""Replica schedulers: each step, decide which requests advance and by how many tokens.

``base`` holds what every policy shares (queues, preemption, applying a plan, decode
stretches), ``plan`` the ``StepPlan`` a policy returns. One file per policy: ``vllm`` (vLLM v1),
``sarathi`` (Sarathi-Serve), ``prefill_first`` (vLLM v0), ``static`` (request-level batching),
``trtllm`` (TensorRT-LLM's in-flight batching), ``sglang`` (SGLang).
A scheduler asks the KV cache for blocks; it never counts them itself.
"""

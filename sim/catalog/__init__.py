"""What is deployed: GPUs and models from their datasheets, and how a replica uses the memory.

- ``hardware``: the GPU catalog (memory, bandwidth, FLOP/s per precision, interconnect, price);
- ``model``: the model catalog (parameters, layers, heads, KV bytes per token, experts);
- ``hf_config``: a model's catalog fields from a Hugging Face config.json (exact counts);
- ``model_import``: ``fleetcast model import``, a config.json as a catalog YAML;
- ``memory``: one GPU's memory split into weights, a reserve and KV blocks;
- ``deployment``: one replica (model, GPU, precisions, TP, memory plan) built from the config;
- ``placement``: which models a fleet serves and which replicas serve each.
- ``pools``: a disaggregated fleet's prefill and decode pools, and the KV link between them.

May import: ``sim.errors``, ``sim.rng``, ``sim.config``. Add a GPU or a model as a YAML file in
``configs/hardware/`` or ``configs/model/`` (or run a config.json with ``model=hf``); no code
changes.
"""

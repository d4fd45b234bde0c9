"""One replica's engine, in plain Python with no clock: requests, the KV cache, the schedulers
and the step-time models.

- ``request``: a request's progress (tokens known, tokens computed, tokens sampled);
- ``kv_cache``: the paged KV cache (numbered, shareable blocks; ``None`` when short);
- ``prefix_cache``: the KV cache with vLLM's prefix caching (computed prompt blocks kept for
  later requests, least recently freed evicted first);
- ``host_tier``: a prefix cache's second tier, the blocks it evicted kept in host memory;
- ``step_shape``: the work of one step (P, D, Ap, Ad), all a step-time model may see;
- ``speculation``: speculative decoding: the drafts a step keeps (seeded acceptance draws) and
  a step priced with its verification width and its drafter;
- ``scheduler/``: who advances each step, one file per policy (add one: a file + a YAML);
- ``step_time/``: how long a step takes, one file per model (add one: a file + a YAML).

May import: ``sim.errors``, ``sim.resources``, ``sim.catalog``. Never SimPy, never
``sim.fleet`` (the fleet drives the engine, not the other way round), never ``sim.output``.
"""

"""Small run configurations that many tests simulate (overrides of the default config)."""

# Random lengths, ~6 s of Poisson arrivals at 20 req/s on one replica.
RANDOM = [
    "fleet.replicas=1",
    "workload=poisson",
    "workload.num_requests=120",
    "workload.qps=20",
    "workload.prompt_tokens={dist:uniform,low:1,high:300}",
    "workload.output_tokens={dist:uniform,low:1,high:200}",
    "sim.progress=false",
]
# 20 short fixed-length requests on one replica: a run that takes a fraction of a second.
TINY = [
    "fleet.replicas=1",
    "workload=poisson",
    "workload.num_requests=20",
    "workload.qps=10",
    "workload.prompt_tokens=64",
    "workload.output_tokens=16",
    "sim.progress=false",
]
TINY_KV = ["kv.num_blocks=40", "kv.block_size=16"]  # 640 tokens: forces preemptions
SCHEDULERS = {
    "vllm": ["scheduler=vllm"],
    "vllm_whole": ["scheduler=vllm", "scheduler.enable_chunked_prefill=false"],
    "vllm_small_budget": ["scheduler=vllm", "scheduler.max_num_batched_tokens=48"],
    "vllm_one_prefill": ["scheduler=vllm", "scheduler.max_prefills_per_step=1"],
    "sarathi": ["scheduler=sarathi", "scheduler.chunk_size=64"],
    "prefill_first": ["scheduler=prefill_first"],
    "static": ["scheduler=static", "scheduler.max_num_seqs=8"],
    "trtllm": ["scheduler=trtllm"],
    "trtllm_max_util_chunked": [
        "scheduler=trtllm",
        "scheduler.capacity_policy=max_utilization",
        "scheduler.enable_chunked_context=true",
        "scheduler.max_num_batched_tokens=48",
    ],
    "sglang": ["scheduler=sglang"],
    "sglang_mixed_small_chunk": [
        "scheduler=sglang",
        "scheduler.enable_mixed_chunk=true",
        "scheduler.chunked_prefill_size=64",
    ],
}


# A day plan's settings small enough for the suite: two periods, two replications a point, no
# what-ifs or headroom (tests/plan/test_day.py, tests/report/conftest.py)
QUICK_DAY_PLAN = [
    "plan.max_replicas=8",
    "plan.jobs=2",
    "plan.step_time_scales=[]",
    "plan.rate_scales=[]",
    "plan.max_headroom=null",
    "plan.min_replications=2",
    "plan.max_replications=2",
    "plan.day.periods=2",
]
# An M/D/1 queue per replica: one request a constant 10 ms step (16-token prompts, one output
# token), Poisson arrivals; add the rate, the count and the replicas (a plan searches them).
MD1 = [
    "step_time=constant",
    "step_time.seconds=0.01",
    "scheduler.max_num_seqs=1",
    "workload=poisson",
    "workload.prompt_tokens=16",
    "workload.output_tokens=1",
    "sim.progress=false",
]
# A plan over M/D/1 replicas: one request at a time, 10 ms each, 120 requests/s split at
# random; a mean TTFT within 15 ms needs N = 3 replicas (tests/plan/test_fault_plan.py).
MD1_PLAN = [
    "step_time=constant",
    "step_time.seconds=0.01",
    "scheduler.max_num_seqs=1",
    "router=random",
    "workload=poisson",
    "workload.num_requests=3000",
    "workload.qps=120",
    "workload.prompt_tokens=16",
    "workload.output_tokens=1",
    "plan.slo=[ttft_s.mean <= 0.015]",
    "plan.max_replicas=8",
    "plan.jobs=1",
    "plan.step_time_scales=[]",
    "plan.rate_scales=[]",
    "plan.max_headroom=null",
]

"""``build``: a config node's ``_target_`` and options to an object, every mistake named in one
line; a ``_target_`` an older Fleetcast wrote still builds."""

import numpy as np
import pytest

from sim.config.build import build
from sim.engine.kv_cache import KVCache
from sim.engine.scheduler.vllm import VLLMScheduler
from sim.errors import ConfigError
from sim.fleet.router import RandomRouter, RoundRobinRouter


def test_a_node_builds_its_class_with_its_options_and_the_context_it_takes():
    kv = KVCache(10, 4)
    sched = build(
        {"_target_": "sim.engine.scheduler.vllm.VLLMScheduler", "max_num_seqs": 3},
        "scheduler",
        kv=kv,
        max_model_len=100,
        unrelated="ignored",
    )
    assert isinstance(sched, VLLMScheduler)
    assert (sched.max_num_seqs, sched.kv, sched.max_model_len) == (3, kv, 100)
    # a class taking **_ receives the context it names and ignores the rest
    router = build(
        {"_target_": "sim.fleet.router.RandomRouter"}, "router", rng=np.random.default_rng(0)
    )
    assert isinstance(router, RandomRouter)


@pytest.mark.parametrize(
    "old, new",
    [
        ("sim.scheduler.vllm.VLLMScheduler", VLLMScheduler),
        ("sim.router.RoundRobinRouter", RoundRobinRouter),
    ],
)
def test_an_older_target_still_builds(old, new):
    built = build({"_target_": old}, "x", kv=KVCache(10, 4), rng=np.random.default_rng(0))
    assert type(built) is new


@pytest.mark.parametrize(
    "node, message",
    [
        ({}, r"^scheduler\._target_=None: must name a class as module\.Class$"),
        ({"_target_": "nodots"}, r"^scheduler\._target_='nodots': must name a class"),
        (
            {"_target_": "sim.engine.scheduler.vllm.Nope"},
            r"^scheduler\._target_=.*: no such class$",
        ),
        ({"_target_": "sim.nowhere.Nope"}, r"^scheduler\._target_=.*: no such class$"),
        (
            {"_target_": "sim.engine.scheduler.vllm.VLLMScheduler", "bogus": 1},
            r"^scheduler\.bogus=1: unknown option for VLLMScheduler; known: max_num_seqs, ",
        ),
    ],
)
def test_mistakes_are_one_line_errors_naming_the_field(node, message):
    with pytest.raises(ConfigError, match=message):
        build(node, "scheduler", kv=KVCache(10, 4))

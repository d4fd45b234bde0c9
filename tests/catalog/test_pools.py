"""A disaggregated fleet's pools (``sim.catalog.pools``): errors raised while building a pool,
told in the pool's terms."""

from __future__ import annotations

from sim.catalog.pools import in_pool_terms
from sim.config.schema import PoolConfig
from sim.errors import ConfigError


def test_a_field_the_pool_sets_is_named_by_its_key_and_so_are_the_fixes():
    pool = PoolConfig(tp=2, scheduler="sglang", hardware="h200")
    err = ConfigError("fleet.tp", 2, "scheduler.max_num_seqs x hardware: raise fleet.tp to 4")
    told = in_pool_terms(err, "decode", pool)
    assert told.field == "placement.decode.tp"
    # the fix names the pool's key; other words that are group names stay as they were
    assert told.reason == (
        "in the decode pool: scheduler.max_num_seqs x hardware: raise placement.decode.tp to 4"
    )


def test_a_settings_key_wins_over_the_pools_own_and_an_inherited_field_keeps_its_name():
    pool = PoolConfig(tp=2, settings={"fleet.tp": 3})
    err = ConfigError("placement.decode.settings.fleet.tp", 3, "must divide 32 heads")
    assert in_pool_terms(err, "decode", pool).field == "placement.decode.settings.fleet.tp"
    inherited = ConfigError("precision.weights", "fp4", "no fp4; fleet.tp=2 fits")
    told = in_pool_terms(inherited, "prefill", PoolConfig())
    assert (told.field, told.reason) == (
        "precision.weights",
        "in the prefill pool: no fp4; fleet.tp=2 fits",
    )

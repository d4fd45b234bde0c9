"""The fleet-shape seam (``sim.deploy.shape``): a shape of one's own, given to ``simulate``
through the registry's list, runs end to end, and what it says of itself (price, summary block,
file, a process connected to the cluster) is what the run writes."""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim.config.schema import RunConfig, validate_run
from sim.deploy.fixed import FixedFleet
from sim.deploy.shape import Priced, ReplicaGroup, billed
from sim.deploy.shapes import SHAPES, fleet_shape
from sim.fleet.cluster import Cluster
from sim.output.cost import gpu_price
from sim.output.run_files import SUMMARY_FILE
from sim.run import simulate
from tests.scenarios import TINY
from tests.support import compose

RESERVED_SHARE = 0.5  # the reserved price as a share of the on-demand one, in the example


class ReservedFleet(FixedFleet):
    """The worked example of docs/how-to/add-a-fleet-shape.md, small: a fixed fleet whose
    replicas are billed at a reserved price, which counts the requests in flight each second
    of the run and says so in its own block and file."""

    @classmethod
    def applies(cls, run: RunConfig) -> bool:
        return True

    def __init__(self, cfg: dict[str, Any], run: RunConfig) -> None:
        super().__init__(cfg, run)
        self.in_flight: list[int] = []

    def connect(self, cluster: Cluster, seed: int) -> None:
        def sample():
            while not cluster.finished():
                self.in_flight.append(sum(r.num_outstanding for r in cluster.replicas))
                yield cluster.env.timeout(1.0)

        cluster.env.process(sample())

    def priced(self) -> Priced:
        deployment = self.placement.deployments[0]
        on_demand = gpu_price(self.run.cost, deployment.gpu)[0]
        group = ReplicaGroup(
            self.run.fleet.replicas, deployment.num_gpus, RESERVED_SHARE * on_demand
        )
        return Priced(
            num_gpus=group.gpus,
            num_replicas=group.replicas,
            kv_capacity_tokens=[deployment.memory.kv_capacity_tokens],
            gpu=deployment.gpu,
            billed=billed([group]),
        )

    def add_to_summary(self, summary, step_log, column) -> None:
        summary["reserved"] = {"seconds_sampled": len(self.in_flight)}

    def tables(self) -> dict[str, pa.Table]:
        return {"in_flight.parquet": pa.table({"in_flight": self.in_flight})}


OVERRIDES = [*TINY, "fleet.replicas=2"]


def test_a_shape_of_ones_own_runs_end_to_end_and_writes_what_it_says(tmp_path):
    plain = simulate(compose(*OVERRIDES)).summary
    simulate(compose(*OVERRIDES), tmp_path, shapes=(ReservedFleet,))
    summary = json.loads((tmp_path / SUMMARY_FILE).read_text())
    # the same requests served the same way: only the price and the shape's own parts differ
    assert summary["ttft_s"] == plain["ttft_s"] and summary["num_gpus"] == plain["num_gpus"]
    assert summary["cost"]["usd_per_hour"] == pytest.approx(
        RESERVED_SHARE * plain["cost"]["usd_per_hour"]
    )
    in_flight = pq.read_table(tmp_path / "in_flight.parquet").column("in_flight").to_pylist()
    assert summary["reserved"]["seconds_sampled"] == len(in_flight)
    # sampled at 0, 1, 2, ... s while a request had not ended; the first arrives after 0
    ended_s = pq.read_table(tmp_path / "requests.parquet").column("completion_time_s")
    assert len(in_flight) == math.floor(max(ended_s.to_pylist())) + 1
    assert in_flight[0] == 0 and max(in_flight) >= 1


def test_in_memory_the_shapes_tables_come_back_with_the_result():
    result = simulate(compose(*OVERRIDES), shapes=(ReservedFleet,))
    assert list(result.tables) == ["in_flight.parquet"] and result.scaling is None


def test_a_list_of_shapes_none_of_which_applies_is_said_plainly():
    class Never(ReservedFleet):
        @classmethod
        def applies(cls, run: RunConfig) -> bool:
            return False

    cfg = compose(*OVERRIDES)
    with pytest.raises(LookupError, match="Never"):
        fleet_shape(cfg, validate_run(cfg), (Never,))
    assert SHAPES[-1] is FixedFleet  # the shipped list always ends with one that applies

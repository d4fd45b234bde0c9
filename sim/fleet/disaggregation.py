"""Prefill/decode disaggregation: a request's prompt on a prefill replica, its KV sent over a
link, its output on a decode replica (``placement=disaggregated``; the pools in
``sim.catalog.pools``).

The path of one request (the design of DistServe, Zhong et al., OSDI 2024, and Splitwise, Patel
et al., ISCA 2024, as NVIDIA Dynamo and llm-d run it):

1. The router sends it to a prefill replica, whose scheduler runs its prompt like any other.
   The step that ends the prompt samples the first token: the client has it then, so TTFT ends
   on the prefill replica. (A one-token output completes there.)
2. The decode router picks a decode replica at once (it counts the request as routed there,
   so loads stay honest), and the request queues there, FIFO, for room: KV blocks for its
   prompt above the watermark and a seat under ``max_num_seqs``, both kept for it from the
   moment the transfer is booked (it may then wait for a link) until its KV arrives. Room is
   looked for at once, and again each time the decode replica ends a step while transfers
   wait. Until then its blocks stay held on the prefill replica.
3. The transfer starts once the room is kept, as soon as both ends' links are free for it
   (each replica's link carries one transfer at a time; a transfer may go in a gap before one
   booked earlier that waits for its other end), and takes
   ``latency + bytes / (min(gpus_prefill, gpus_decode) x link bandwidth)`` (GPUs of a replica:
   tp x pp): every GPU has its own link and moves its share of the KV. With
   ``kv_transfer_overlap`` the KV streams layer by layer while the prompt is computed
   (Mooncake; Dynamo's NIXL): a transfer that starts as the prefill ends waits only for what
   the prefill did not hide, and never less than its last layer's share; what it hides is the
   part of the prefill during which both links carried no other transfer. One that waited for
   room or for a link gets no overlap: its layers were computed long before it started.
4. When it ends, the prefill replica releases the blocks (and plans again if it was stalled
   on them), and the request joins the decode replica's running batch, its seat and blocks
   there already its own. It decodes there to the end; the client hears the rest from it.

Back-pressure is modelled, not assumed away: a full decode pool keeps transfers waiting, their
KV keeps prefill blocks held, and a prefill replica whose pool is held by waiting transfers
admits nothing until one ends. No request is lost: each ends exactly once, where it completes.

With faults (``sim.fleet.faults``) a replica of either pool may go down: the transfers one of
whose ends it is are called off (``lost``: the room kept on the decode replica, or its place in
the queue there, and the KV held on the prefill replica, released; the link time booked
freed), and their requests leave with it, to be sent again from the prefill pool or failed. A
decode replica that drains or is down is chosen for nothing (``stop_choosing``, ``back``);
with none to choose, a prefilled request fails at its hand-off (``sim.fleet.cluster.
NO_REPLICA``).

The pools are built from the config in ``sim.deploy.disaggregated``.

Left out: the prefill replica computing for a decode replica chosen before its prefill (layer
streaming here starts only as the prefill ends), prefix caching across pools, and moving a
request between decode replicas once it is there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import simpy

from sim.engine.request import FAILED, Request
from sim.fleet.cluster import NO_REPLICA
from sim.fleet.replica import Replica
from sim.fleet.router import Router
from sim.fleet.simclock import ARRIVAL_PRIORITY, timeout_at


@dataclass(frozen=True)
class TransferCost:
    """What moving one request's KV costs: its bytes per token, over how many parallel links
    (each ``bytes_per_s`` each way, ``latency_s`` one way), and the model's layers (the
    overlap's unit)."""

    bytes_per_s: float
    latency_s: float
    kv_bytes_per_token: float  # the whole replica's, every layer
    parallel_links: int
    num_layers: int
    overlap: bool

    def seconds(self, prompt_tokens: int, hidden_s: float | None) -> float:
        """The transfer of ``prompt_tokens`` tokens of KV; ``hidden_s``: the prefill's own time,
        which a layer-by-layer transfer that starts as the prefill ends overlaps (None: it
        waited, nothing is hidden)."""
        whole_s = prompt_tokens * self.kv_bytes_per_token / (self.parallel_links * self.bytes_per_s)
        if self.overlap and hidden_s is not None:
            whole_s = max(whole_s - hidden_s, whole_s / self.num_layers)
        return self.latency_s + whole_s


@dataclass(eq=False)
class _Transfer:
    """One request's way from its prefill replica to its decode replica, until its KV arrives:
    queued for room (``keeper`` None), then booked (``keeper`` holds the room, ``booked`` its
    links' interval); ``called_off`` once one of its ends went down."""

    request: Request
    prefill: Replica
    decode: Replica
    keeper: Request | None = None
    booked: tuple[float, float] | None = None
    called_off: bool = False


class Disaggregation:
    """Moves prefilled requests from the prefill pool's replicas to the decode pool's."""

    def __init__(
        self,
        env: simpy.Environment,
        prefill: list[Replica],
        decode: list[Replica],
        decode_router: Router,
        cost: TransferCost,
        end_request: Callable[[Request, int], None] | None = None,
    ) -> None:
        """``end_request(request, caller_priority)``: how a request that finds no decode
        replica up ends (only faults take them all down)."""
        self.env = env
        self.end_request = end_request
        self.decode = decode
        self.decode_router = decode_router
        self.cost = cost
        self._by_id = {replica.replica_id: replica for replica in (*prefill, *decode)}
        for replica in prefill:
            replica.join_prefill_pool(self._handoff)
        for replica in decode:
            replica.join_decode_pool(self._start_transfers)
        # per decode replica: requests waiting for room (the seats kept for transfers under way
        # are its scheduler's ``seats_kept``)
        self._queues: dict[int, deque[Request]] = {r.replica_id: deque() for r in decode}
        # each replica's link: the (start, end) of the transfers booked on it, in booking order,
        # and when the last of those now over ended
        self._link_busy: dict[int, list[tuple[float, float]]] = {i: [] for i in self._by_id}
        self._link_free_since: dict[int, float] = dict.fromkeys(self._by_id, 0.0)
        # room checks each decode replica has made, and each queued request's first one
        self._checks: dict[int, int] = dict.fromkeys(self._queues, 0)
        self._first_check: dict[Request, int] = {}
        # the transfers not yet arrived, by request (what a replica that goes down calls off)
        self._transfers: dict[Request, _Transfer] = {}

    def _handoff(self, request: Request, prefill: Replica) -> None:
        """``prefill`` sampled ``request``'s first token: pick its decode replica, queue it,
        and look for room there now.

        The room seen is the same whether the decode replica steps one by one or in decode
        stretches: a stretch's KV growth up to the step in progress counts, and a stretch
        whose pool a kept room changed ends with that step (as an arrival ends it)."""
        request.prefill_replica_id = prefill.replica_id
        if not self.decode:  # (faults took every decode replica down)
            prefill.engines[0].scheduler.kv.free(request)
            request.status = FAILED
            request.fail_reason = NO_REPLICA
            assert self.end_request is not None, "no decode replica is down without faults"
            self.end_request(request, prefill.priority)
            return
        decode = self.decode[self.decode_router.choose(request, self.decode)]
        decode.expect(request)
        self._transfers[request] = _Transfer(request, prefill, decode)
        self._queues[decode.replica_id].append(request)
        self._first_check[request] = self._checks[decode.replica_id] + 1
        decode.transfer_queued()
        if self._start_transfers(decode, decode.unapplied_kv_blocks(prefill.priority)):
            decode.end_stretch_now(prefill.priority)

    def _start_transfers(self, decode: Replica, unapplied_blocks: int = 0) -> int:
        """Start the transfers queued for ``decode`` while it has room for the head; how many
        started. ``unapplied_blocks``: its KV a decode stretch grew that the pool does not
        count yet (``Replica.unapplied_kv_blocks``)."""
        started = 0
        queue = self._queues[decode.replica_id]
        scheduler = decode.engines[0].scheduler
        self._checks[decode.replica_id] += 1
        while queue:
            request = queue[0]
            # the seat and blocks are kept under a stand-in until the KV arrives (the request
            # still holds its prefill replica's blocks until then)
            keeper = Request(-1, 0.0, request.prompt_tokens, 1)
            if not scheduler.keep_for_transfer(keeper, request, unapplied_blocks):
                return started
            decode.kv_changed_outside(keeper.kv_slots // scheduler.kv.block_size)
            queue.popleft()
            decode.transfer_started()
            # room found at the first look after the handoff: it did not wait for room
            found_at_once = self._first_check.pop(request) == self._checks[decode.replica_id]
            transfer = self._transfers[request]
            transfer.keeper = keeper
            self._transfer(transfer, found_at_once)
            started += 1
        return started

    def _transfer(self, transfer: _Transfer, found_at_once: bool) -> None:
        request, decode = transfer.request, transfer.decode
        now = self.env.now
        assert request.prefill_replica_id is not None and request.first_token_time_s is not None
        link_ids = (request.prefill_replica_id, decode.replica_id)
        ends = tuple(self._link_busy[i] for i in link_ids)
        for link_id, busy in zip(link_ids, ends, strict=True):  # forget what is over
            while busy and busy[0][1] <= now:
                self._link_free_since[link_id] = max(self._link_free_since[link_id], busy.pop(0)[1])
        hidden_s = None
        if found_at_once and request.first_scheduled_time_s is not None:
            # the layers stream while the prompt is computed, over links then free of others
            streaming_from = max(
                request.first_scheduled_time_s, *(self._link_free_since[i] for i in link_ids)
            )
            hidden_s = max(0.0, now - streaming_from)
        duration = self.cost.seconds(request.prompt_tokens, hidden_s)
        start = _first_gap(now, duration, ends)
        if start > now and hidden_s is not None:  # it waited for a link: nothing is hidden
            duration = self.cost.seconds(request.prompt_tokens, None)
            start = _first_gap(now, duration, ends)
        end = start + duration
        for busy in ends:
            busy.append((start, end))
            busy.sort()
        transfer.booked = (start, end)
        if decode.horizon_s is None or start < decode.horizon_s:  # (never seen past it)
            request.transfer_start_s = start
        timeout_at(self.env, end).callbacks.append(lambda _event: self._arrived(transfer))

    def _arrived(self, transfer: _Transfer) -> None:
        """The KV is on its decode replica: free the prefill side, hand the kept blocks over."""
        if transfer.called_off:
            return
        request, decode, keeper = transfer.request, transfer.decode, transfer.keeper
        assert keeper is not None
        del self._transfers[request]
        request.transfer_end_s = self.env.now
        assert request.prefill_replica_id is not None
        prefill = self._by_id[request.prefill_replica_id]
        prefill.engines[0].scheduler.kv.free(request)
        kv = decode.engines[0].scheduler.kv
        before = kv.num_used_blocks
        kv.free(keeper)
        grown = kv.grow(request, request.prompt_tokens)
        assert grown is not None, "the blocks kept for a transfer were taken"
        decode.kv_changed_outside(kv.num_used_blocks - before)
        # (more transfers to it start at the end of its next step: ``Replica.on_room``)
        decode.receive(request, ARRIVAL_PRIORITY)
        prefill.wake()

    # -- a replica that goes down (``sim.fleet.faults``) -----------------------------------

    def lost(self, replica: Replica) -> list[Request]:
        """``replica`` goes down: call off the transfers one of whose ends it is, and return
        their requests (they leave with it). Called before it stops (it still counts them).

        The other end gives back what it held for each: a decode replica its kept room (seat
        and blocks) or the request's place in its queue, and the request's count; a prefill
        replica the request's KV blocks (and it plans again, maybe stalled on them). Its
        bookings on the links are freed."""
        gone = [t for t in self._transfers.values() if t.prefill is replica or t.decode is replica]
        for transfer in gone:
            self._call_off(transfer, replica)
        for decode in {t.decode for t in gone if t.decode is not replica}:
            self._start_transfers(decode)  # (room given back: those waiting may go)
        if replica.on_room is not None:  # a decode replica: it takes no transfer while down
            self.stop_choosing(replica)
            self._queues[replica.replica_id].clear()
            replica.transfers_waiting = 0
        return [t.request for t in gone]

    def _call_off(self, transfer: _Transfer, going: Replica) -> None:
        """Call ``transfer`` off: its end other than ``going`` (whose engines go with it)
        gives back what it held for it."""
        transfer.called_off = True
        request, prefill, decode = transfer.request, transfer.prefill, transfer.decode
        del self._transfers[request]
        self._first_check.pop(request, None)
        if transfer.booked is not None:
            for link_id in (prefill.replica_id, decode.replica_id):
                busy = self._link_busy[link_id]
                if transfer.booked in busy:
                    busy.remove(transfer.booked)
        if decode is not going:
            if transfer.keeper is None:  # still queued for room
                self._queues[decode.replica_id].remove(request)
                decode.transfer_started()  # (it waits no more)
            else:
                scheduler = decode.engines[0].scheduler
                before = scheduler.kv.num_used_blocks
                scheduler.kv.free(transfer.keeper)
                scheduler.seats_kept -= 1
                decode.kv_changed_outside(scheduler.kv.num_used_blocks - before)
            decode.withdraw(request)
        if prefill is not going:
            prefill.engines[0].scheduler.kv.free(request)
            prefill.wake()

    def stop_choosing(self, decode: Replica) -> None:
        """The decode router chooses ``decode`` no more (it drains, or is down), until
        ``back``; what it holds, or is on its way to it, it still takes."""
        if decode in self.decode:
            self.decode.remove(decode)

    def back(self, replica: Replica) -> None:
        """``replica`` is back with fresh engines: a decode replica takes transfers again (in
        replica order, as at the start)."""
        if replica.on_room is None:
            return  # a prefill replica: its scheduler was built handing off
        replica.engines[0].scheduler.join_decode_pool()
        if replica not in self.decode:
            self.decode.append(replica)
        self.decode.sort(key=lambda r: r.replica_id)


def _first_gap(now: float, duration: float, links: tuple[list[tuple[float, float]], ...]) -> float:
    """The earliest time from ``now`` at which every one of ``links`` is free for ``duration``
    (each a list of booked (start, end) intervals): a transfer may go before one booked later,
    in a gap it fits."""
    start = now
    for booked_start, booked_end in sorted(interval for busy in links for interval in busy):
        if booked_start >= start + duration:
            break
        start = max(start, booked_end)
    return start

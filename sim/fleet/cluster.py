"""A fleet of replicas behind a router, fed by a workload, in one SimPy environment.

Each replica serves one model, or several sharing its GPU (``sim.catalog.placement``); a
request goes to a replica that serves the model it asks for. Open-loop workloads (traces,
Poisson, ...) arrive at their own times whatever the fleet does. A closed-loop workload keeps
``concurrency`` requests in flight: each request that ends (completed or rejected) releases the
next one, after ``think_time_s``, as serving benchmarks do. A benchmark client (``workload=bench``)
has both: requests due at their times, sent while fewer than its cap are in flight, after a
warm-up phase whose end starts the clock of the others. Both clients send one request at a time,
``client_send_s`` each (``_send``): requests they release at one instant go out one by one.
Conversations (``workload=sessions``)
start at their own times, and each next turn is sent its think time after the last one ended:
turns are issued out of the workload's order, so a request's id (issue order) is not its row.

What the run produces leaves as it goes: each request's row through the ``RequestLog`` once it
has ended (and those issued before it), each replica's step rows through the ``StepLog`` when it
holds ``FLUSH_ROWS`` of them. The workload's lengths are read a chunk at a time. So memory
follows the requests in flight, not the length of the run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np
import simpy

from sim.engine.request import ENDED_UNSERVED, FAILED, UNFINISHED, Request
from sim.fleet.replica import Engine, Replica
from sim.fleet.router import Router
from sim.fleet.simclock import ARRIVAL_PRIORITY, timeout_at
from sim.output.request_log import RequestLog
from sim.output.step_log import FLUSH_ROWS, StepLog
from sim.workload.prefixes import PrefixGroups, prefix_groups
from sim.workload.source import Workload

CHUNK = 65536  # workload entries turned into Python values at a time
NO_REPLICA = "no_replica"  # a request's fail_reason when no replica serving its model is up


class Cluster:
    def __init__(
        self,
        workload: Workload,
        replica_engines: list[list[Engine]],
        router: Router,
        request_log: RequestLog,
        step_log: StepLog,
        model_ids: np.ndarray | None = None,
        fast_forward_decode: bool = True,
        horizon_s: float | None = None,
        on_request_done: Callable[[Request], None] | None = None,
        frontend_token_s: float = 0.0,
        routed_replicas: int | None = None,
    ) -> None:
        """``replica_engines[i]`` lists what replica ``i`` serves: one engine for a replica of
        one model, several for a GPU shared by models. ``model_ids`` says which model each
        request asks for (all model 0 when None). ``frontend_token_s`` > 0 gives every replica
        a frontend (``sim.fleet.frontend``). ``routed_replicas``: only the first that many
        replicas take requests from the router (a disaggregated fleet's prefill pool; the
        decode pool's are fed by ``sim.fleet.disaggregation``); None: all of them."""
        self.env = simpy.Environment()
        self.workload = workload
        self.router = router
        self.request_log = request_log
        self.step_log = step_log
        self.num_issued = 0
        self.num_ended = 0
        self._progress = on_request_done
        self._replica_options: dict[str, Any] = {
            "fast_forward_decode": fast_forward_decode,
            "horizon_s": horizon_s,
            "frontend_token_s": frontend_token_s,
        }
        self.replicas = [
            Replica(self.env, i, engines, self._request_done, **self._replica_options)
            for i, engines in enumerate(replica_engines)
        ]
        # replicas draining (sim.fleet.autoscaler): each one's callback for when it is empty
        self._draining: dict[int, Callable[[Replica], None]] = {}
        # the replicas that serve each model, in replica order, for the router to choose from
        self._hosts: dict[int, list[Replica]] = {}
        for replica in self.replicas[:routed_replicas]:
            for engine in replica.engines:
                self._hosts.setdefault(engine.model_id, []).append(replica)
        # the replicas the router never feeds (a decode pool's): one back from a fault stays so
        routed = len(self.replicas) if routed_replicas is None else routed_replicas
        self._unrouted = {r.replica_id for r in self.replicas[routed:]}
        for replica in self.replicas:
            replica.start()
        self.horizon_s = horizon_s
        if model_ids is None:
            model_ids = np.zeros(workload.num_requests, dtype=np.int64)
        self._next_request = _in_chunks(workload.prompt_tokens, workload.output_tokens, model_ids)
        self._model_ids = model_ids
        # with a prefix cache, each request's prompt blocks grouped by shared content, for the
        # block size of the model it asks for
        self._prefix_groups: dict[int, PrefixGroups] = {}
        if workload.hash_ids is not None:
            by_size: dict[int, PrefixGroups] = {}
            for replica in self.replicas:
                for engine in replica.engines:
                    kv = engine.scheduler.kv
                    if kv.prefix_caching and engine.model_id not in self._prefix_groups:
                        if kv.block_size not in by_size:
                            by_size[kv.block_size] = prefix_groups(
                                workload.hash_ids,
                                workload.hashed_tokens,
                                _segment_tokens(workload),
                                kv.block_size,
                            )
                        self._prefix_groups[engine.model_id] = by_size[kv.block_size]
        # a harness client's sender (closed loop, benchmark client): requests sent so far (or
        # scheduled to be), and when it is free to send the next one (``_send``)
        self._num_sent = 0
        self._sender_free_s = 0.0
        self._sessions = workload.sessions
        if self._sessions is not None:
            self._closed_loop = False
            self._client_paced = False
            self.env.process(self._session_starts())
        elif workload.arrival_time_s is None:
            self._closed_loop = True
            # Requests issued or already scheduled to be: a request released after a think
            # time (or after a rejection) counts from the moment it is scheduled.
            self._released = 0
            assert workload.concurrency is not None  # a closed-loop workload has one (Workload)
            for _ in range(min(workload.concurrency, workload.num_requests)):
                if self._released >= workload.num_requests:
                    break
                self._released += 1
                self._send(ARRIVAL_PRIORITY)
        else:
            self._closed_loop = False
            # a benchmark client: a cap on requests in flight, and a warm-up phase
            self._cap = workload.concurrency
            self._due: deque[float] = deque()  # requests due, waiting for a slot under the cap
            self._in_flight = 0
            self._warmups_left = workload.warmup_requests
            self._warmups_done = self.env.event()
            # clients that send their own count of requests: the idle ones with requests left,
            # and which client sent each request in flight
            self._idle_clients: deque[int] | None = None
            self._client_left: list[int] = []
            self._client_of: dict[int, int] = {}
            if workload.requests_per_client is not None:
                assert self._cap is not None  # the Workload's rule
                self._idle_clients = deque(range(self._cap))
                self._client_left = [workload.requests_per_client] * self._cap
            self._client_paced = self._cap is not None or bool(self._warmups_left)
            if not self._client_paced:
                self.env.process(self._open_loop(_in_chunks(workload.arrival_time_s)))
            else:
                self.env.process(self._client(workload.arrival_time_s))

    # -- a fleet that changes (sim.fleet.autoscaler) --------------------------------------

    @property
    def serving(self) -> list[Replica]:
        """The replicas the router sends requests to (a fleet of one model)."""
        return self._hosts[0]

    def add_replica(self, engines: list[Engine]) -> Replica:
        """A new replica, serving from now on."""
        replica = Replica(
            self.env, len(self.replicas), engines, self._request_done, **self._replica_options
        )
        self.replicas.append(replica)
        for engine in engines:
            self._hosts.setdefault(engine.model_id, []).append(replica)
        replica.start()
        return replica

    def drain(self, replica: Replica, on_released: Callable[[Replica], None]) -> None:
        """Send ``replica`` nothing more; ``on_released(replica)`` once its last request has
        ended (now, if it holds none)."""
        self.stop_routing(replica)  # (a decode pool's replica: the router never fed it)
        if replica.num_outstanding:
            self._draining[replica.replica_id] = on_released
        else:
            on_released(replica)

    def settle_drains(self) -> None:
        """Release the draining replicas left with nothing (a request they expected will not
        come: its transfer was called off, ``sim.fleet.disaggregation``)."""
        for replica_id in [i for i in self._draining if not self.replicas[i].num_outstanding]:
            self._draining.pop(replica_id)(self.replicas[replica_id])

    def stop_routing(self, replica: Replica) -> None:
        """Send ``replica`` nothing more (it goes down; ``sim.fleet.faults``); a drain under way
        is called off: its replica leaves with whatever it holds."""
        for engine in replica.engines:
            hosts = self._hosts[engine.model_id]
            if replica in hosts:
                hosts.remove(replica)
        self._draining.pop(replica.replica_id, None)

    def resume_routing(self, replica: Replica) -> None:
        """Send ``replica`` requests again (it came back), in replica order as at the start
        (unless the router never fed it: a decode pool's)."""
        if replica.replica_id in self._unrouted:
            return
        for engine in replica.engines:
            hosts = self._hosts.setdefault(engine.model_id, [])
            hosts.append(replica)
            hosts.sort(key=lambda r: r.replica_id)

    def flush_steps(self, replica: Replica) -> None:
        """Write ``replica``'s step rows so far (before its engines are replaced)."""
        self._flush_steps(replica)

    def end_request(self, request: Request, caller_priority: int) -> None:
        """``request`` ended outside any replica's steps (it failed with its replica)."""
        self._request_done(request, caller_priority)

    def finished(self) -> bool:
        """Every request of the workload has ended."""
        return self.num_ended >= self.workload.num_requests

    def run(self) -> None:
        """Simulate until every request has ended, or until the horizon."""
        horizon_s = self.horizon_s
        self.env.run(until=horizon_s)
        for request in self.request_log.unwritten:
            # Completed means the client received the last token. Past the horizon nobody
            # stamped it (sim.fleet.replica), and whatever had not ended is unfinished.
            if request.status not in ENDED_UNSERVED and request.completion_time_s is None:
                request.status = UNFINISHED
        self.request_log.close()
        for replica in self.replicas:
            self._flush_steps(replica)

    def _flush_steps(self, replica: Replica) -> None:
        self.step_log.flush(
            replica.replica_id,
            [(engine.model_id, engine.steps) for engine in replica.engines],
            # its own pools: an autoscaled fleet's replicas may run other engine configurations
            [e.scheduler.kv.num_blocks for e in replica.engines],
        )

    def _flush_if_full(self, replica: Replica) -> None:
        engines = replica.engines
        held = len(engines[0].steps) if len(engines) == 1 else sum(len(e.steps) for e in engines)
        if held >= FLUSH_ROWS:
            self._flush_steps(replica)

    def _issue(
        self, arrival_time_s: float, caller_priority: int, session_row: int | None = None
    ) -> None:
        """Send the next request in the workload's order, or the turn in row ``session_row``."""
        row = self.num_issued
        if session_row is None:
            prompt_tokens, output_tokens, model_id = next(self._next_request)
        else:
            row = session_row
            workload = self.workload
            prompt_tokens = int(workload.prompt_tokens[row])
            output_tokens = int(workload.output_tokens[row])
            model_id = int(self._model_ids[row])
        request = Request(
            self.num_issued, arrival_time_s, prompt_tokens, output_tokens, model_id=model_id
        )
        if session_row is not None:
            sessions = self._sessions
            assert sessions is not None
            session = int(np.searchsorted(sessions.first_row, row, side="right")) - 1
            request.session_id = session
            request.turn = row - int(sessions.first_row[session])
            request.last_turn = bool(row + 1 == sessions.first_row[session + 1])
        groups = self._prefix_groups.get(model_id)
        if groups is not None:
            request.prefix_groups = groups.of(row)
        self.num_issued += 1
        self.request_log.issued(request)
        self.route(request, caller_priority)

    def route(self, request: Request, caller_priority: int) -> None:
        """Send ``request`` to the replica the router picks among those serving its model; with
        none up (``sim.fleet.faults`` took them all down), it fails at once (``no_replica``)."""
        hosts = self._hosts[request.model_id]
        if hosts:
            hosts[self.router.choose(request, hosts)].add(request, caller_priority)
        else:
            request.status = FAILED
            request.fail_reason = NO_REPLICA
            self._request_done(request, caller_priority)

    def _open_loop(self, arrival_times_s: Iterator[float]) -> Generator[simpy.Event, Any, None]:
        env = self.env
        for arrival_time_s in arrival_times_s:
            if arrival_time_s > env.now:
                yield timeout_at(env, arrival_time_s)
            self._issue(arrival_time_s, ARRIVAL_PRIORITY)

    def _session_starts(self) -> Generator[simpy.Event, Any, None]:
        """Each session's first turn at the session's start (its next ones follow as turns
        end, ``_next_turn``)."""
        env = self.env
        sessions = self._sessions
        assert sessions is not None
        for start_s, row in zip(
            _in_chunks(sessions.start_s), _in_chunks(sessions.first_row[:-1]), strict=True
        ):
            if start_s > env.now:
                yield timeout_at(env, start_s)
            self._issue(start_s, ARRIVAL_PRIORITY, session_row=row)

    def _next_turn(self, request: Request) -> None:
        """``request``, a turn, ended: send its session's next one after the think time (a
        rejected turn too: the user asks again, and the conversation goes on)."""
        sessions = self._sessions
        assert sessions is not None and request.session_id is not None
        row = int(sessions.first_row[request.session_id]) + request.turn + 1
        when = self.env.now + float(sessions.think_time_s[row])
        # through the event queue, even with no think time: a rejection happens inside _issue,
        # and a run of them must not recurse
        timeout_at(self.env, when).callbacks.append(
            lambda _event: self._issue(when, ARRIVAL_PRIORITY, session_row=row)
        )

    def _client(self, arrival_times_s: np.ndarray) -> Generator[simpy.Event, Any, None]:
        """A benchmark client (``vllm bench serve``): the warm-ups go out at once and are waited
        for, then each request is due at its time after that, and is sent when fewer than the
        cap are in flight. A request's arrival is when it is sent, as the harness times it."""
        env = self.env
        warmups = self.workload.warmup_requests
        start = 0.0
        for index, due_s in enumerate(_in_chunks(arrival_times_s)):
            if index == warmups and warmups:
                yield self._warmups_done
                start = env.now
            at = start + due_s
            if at > env.now:
                yield timeout_at(env, at)
            self._due.append(at)
            self._send_due(ARRIVAL_PRIORITY)

    def _send_due(self, caller_priority: int) -> None:
        idle = self._idle_clients
        while self._due and (self._cap is None or self._in_flight < self._cap):
            measured = self._num_sent >= self.workload.warmup_requests
            if idle is not None and measured:
                if not idle:
                    return  # every client with requests left has one in flight
                client = idle.popleft()
                self._client_left[client] -= 1
                self._client_of[self._num_sent] = client
            self._due.popleft()
            self._in_flight += 1
            self._send(caller_priority)

    def _send(self, caller_priority: int) -> None:
        """The harness's client sends the next request: now, or, while it is still sending the
        ones released before, ``client_send_s`` after the last of them (one sender: requests
        released at one instant go out one by one, in order). The request's arrival is when it
        is sent, as the harness times it. Its id is its place in the send order."""
        now = self.env.now
        at = max(now, self._sender_free_s)
        self._sender_free_s = at + self.workload.client_send_s
        self._num_sent += 1
        if at > now:
            timeout_at(self.env, at).callbacks.append(
                lambda _event: self._issue(at, ARRIVAL_PRIORITY)
            )
        else:
            self._issue(now, caller_priority)

    def _client_request_done(self, request: Request, caller_priority: int) -> None:
        self._in_flight -= 1
        client = self._client_of.pop(request.request_id, None)
        if client is not None and self._client_left[client]:
            assert self._idle_clients is not None
            self._idle_clients.append(client)
        if self._warmups_left and request.request_id < self.workload.warmup_requests:
            self._warmups_left -= 1
            if not self._warmups_left:
                self._warmups_done.succeed()
        if not self._due:
            return
        if request.status in ENDED_UNSERVED:
            # a rejection (or a failure for want of a replica) ends inside _issue: send the
            # next one from the event queue, so a run of rejections does not recurse
            timeout_at(self.env, self.env.now).callbacks.append(
                lambda _event: self._send_due(ARRIVAL_PRIORITY)
            )
        else:
            self._send_due(caller_priority)

    def _request_done(self, request: Request, caller_priority: int) -> None:
        """``request`` ended (its client heard) during an event of ``caller_priority``."""
        self.request_log.ended()
        self.num_ended += 1
        if self._draining and request.replica_id in self._draining:
            if not self.replicas[request.replica_id].num_outstanding:
                self._draining.pop(request.replica_id)(self.replicas[request.replica_id])
        if request.replica_id is not None:
            self._flush_if_full(self.replicas[request.replica_id])
            if request.prefill_replica_id is not None:  # (disaggregated: it prefilled there)
                self._flush_if_full(self.replicas[request.prefill_replica_id])
        if self._progress is not None:
            self._progress(request)
        if not self._closed_loop:
            if request.session_id is not None and not request.last_turn:
                self._next_turn(request)
            elif self._client_paced:
                self._client_request_done(request, caller_priority)
            return
        if self._released >= self.workload.num_requests:
            return
        self._released += 1
        think_time_s = self.workload.think_time_s
        if think_time_s > 0 or request.status in ENDED_UNSERVED:
            # A rejection (or a failure) happens inside _issue; going through the event queue
            # (even with no delay) keeps a run of rejections from recursing.
            timeout_at(self.env, self.env.now + think_time_s).callbacks.append(
                lambda _event: self._send(ARRIVAL_PRIORITY)
            )
        else:
            # sent from inside the event that ended the request
            self._send(caller_priority)


def _segment_tokens(workload: Workload) -> int | list[np.ndarray]:
    """How many tokens each of ``workload``'s hash ids covers (``sim.workload.prefixes``)."""
    if workload.hash_segment_tokens is not None:
        return workload.hash_segment_tokens
    assert workload.hash_block_tokens is not None  # the Workload's rule
    return workload.hash_block_tokens


def _in_chunks(*columns: np.ndarray) -> Iterator[Any]:
    """The columns' entries as Python values (one value, or a tuple of one from each column),
    converted ``CHUNK`` at a time rather than all at once."""
    for start in range(0, len(columns[0]), CHUNK):
        parts = [c[start : start + CHUNK].tolist() for c in columns]
        yield from parts[0] if len(parts) == 1 else zip(*parts, strict=True)

"""The rows of ``requests.parquet``, written while the run goes on.

Requests end out of order, but their rows go out in issue order (``request_id``): a request's
row is written once it and every request issued before it have ended, in batches of
``BATCH_ROWS``. So only the requests still in flight, and those that ended behind one still in
flight, are held in memory, not every request of the run. A row is final once the request is
rejected or failed, or its last token is stamped; what is left at the end of the run is
unfinished (the cluster marks it so before ``close``).
"""

from __future__ import annotations

from collections import deque

from sim.engine.request import ENDED_UNSERVED, Request
from sim.output.results import requests_table
from sim.output.tables import TableSink

BATCH_ROWS = 8192


class RequestLog:
    def __init__(self, sink: TableSink) -> None:
        self.sink = sink
        self._in_order: deque[Request] = deque()  # issued, row not yet written
        self._ready: list[Request] = []

    def issued(self, request: Request) -> None:
        self._in_order.append(request)

    def ended(self) -> None:
        """Some request ended: write the rows that are now next in line and final."""
        in_order = self._in_order
        while in_order and (
            (head := in_order[0]).completion_time_s is not None or head.status in ENDED_UNSERVED
        ):
            self._ready.append(in_order.popleft())
        if len(self._ready) >= BATCH_ROWS:
            self._write()

    @property
    def unwritten(self) -> deque[Request]:
        """Requests whose rows are not written yet, in issue order."""
        return self._in_order

    def close(self) -> None:
        """Write every remaining row (the run is over) and close the sink."""
        self._ready.extend(self._in_order)
        self._in_order.clear()
        self._write()
        self.sink.close()

    def _write(self) -> None:
        if self._ready:
            self.sink.write(requests_table(self._ready, self.sink.schema))
            self._ready = []

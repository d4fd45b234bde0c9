"""Request rows leave in issue order as soon as they are final (``sim.output.request_log``)."""

from sim.engine.request import COMPLETED, REJECTED, UNFINISHED, Request
from sim.output import request_log
from sim.output.request_log import RequestLog
from sim.output.results import REQUESTS_SCHEMA
from sim.output.tables import MemorySink


def test_rows_wait_for_every_earlier_request_and_leave_in_batches(monkeypatch):
    monkeypatch.setattr(request_log, "BATCH_ROWS", 2)
    sink = MemorySink(REQUESTS_SCHEMA)
    log = RequestLog(sink)
    requests = [Request(i, float(i), 10, 5, replica_id=0) for i in range(5)]
    for r in requests:
        log.issued(r)

    def complete(i: int) -> None:
        requests[i].status = COMPLETED
        requests[i].first_token_time_s = requests[i].completion_time_s = i + 1.0
        log.ended()

    complete(1)
    complete(2)
    assert sink.num_rows == 0 and list(log.unwritten) == requests  # 0 is still in flight
    requests[0].status, requests[0].reject_reason = REJECTED, "kv_capacity"
    log.ended()
    assert sink.num_rows == 3 and list(log.unwritten) == requests[3:]  # 0, 1, 2 written
    complete(4)
    assert sink.num_rows == 3  # 4 waits behind 3
    requests[3].status = UNFINISHED  # the run ended with 3 in flight
    log.close()
    table = sink.table
    assert table.column("request_id").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("status").to_pylist() == [
        "rejected",
        "completed",
        "completed",
        "unfinished",
        "completed",
    ]
    assert table.column("reject_reason").to_pylist() == ["kv_capacity", None, None, None, None]

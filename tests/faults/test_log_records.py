"""A worker's logging records under ever new logger names create nothing per name in the host:
they go to one host logger per worker (``comfy_airlock.worker.<name>``), the worker's logger
name on the record (``airlock_logger``) and in its message. 20 000 names used to leave 20 001
``logging.Logger`` objects behind in the host."""

from __future__ import annotations

import gc
import logging
import time

from .chaos import iterations

RECORDS = 20_000


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _host_loggers() -> int:
    # By type(), not isinstance(): that reads `__class__`, which some objects compute noisily.
    return sum(issubclass(type(o), logging.Logger) for o in gc.get_objects())


def test_records_under_new_logger_names_create_no_host_loggers(spawn, fault, leaks):
    run = fault(f"{RECORDS} log records under new logger names")
    manager = logging.Logger.manager
    for i in range(iterations(1)):
        with run.iteration(i):
            w = spawn()
            host_logger = logging.getLogger(f"comfy_airlock.worker.{w.name}")
            collect = _Collect()
            host_logger.addHandler(collect)
            try:
                w.call("fault_targets:echo", 0)
                names, objects = len(manager.loggerDict), _host_loggers()
                prefix = f"flood{i}"
                assert w.call("peer_values:log_flood", RECORDS, prefix) == RECORDS
                deadline = time.monotonic() + 120
                while len(collect.records) < RECORDS and time.monotonic() < deadline:
                    time.sleep(0.05)
                w.close(grace=2.0)
            finally:
                host_logger.removeHandler(collect)
            got = collect.records
            assert len(got) == RECORDS, f"{len(got)} of {RECORDS} records arrived"
            # Who said what is still there, on the record and in its text.
            last = got[-1]
            assert last.name == f"comfy_airlock.worker.{w.name}"
            assert last.airlock_logger == f"{prefix}.{RECORDS - 1}"
            assert last.getMessage() == f"[{w.name}/{prefix}.{RECORDS - 1}] record {RECORDS - 1}"
            assert {r.airlock_logger for r in got} == {f"{prefix}.{n}" for n in range(RECORDS)}
            del got, last, collect
            grew, made = len(manager.loggerDict) - names, _host_loggers() - objects
            assert grew == 0 and made == 0, f"{grew} logger names, {made} Logger objects made"
            run.outcome("one host logger, worker's names kept on the records")
            run.check_leaks(i, leaks.check([]))
    run.finish()

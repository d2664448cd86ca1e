"""A fake device API for the timing code (kiln_worker.evaluation.timing and
confirm take it as `api`): it records its calls in a list and keeps time in a
one-element list of milliseconds, which the test's launch advances."""


class FakeDeviceApi:
    """log gets "flush", "event", "sync", "event-sync" (one event waited for),
    ("sleep", cycles) and, with
    log_buffers, ("buffer", nbytes); events read clock[0]; with cycles_per_ms a
    sleep advances the clock (else it takes no time)."""

    def __init__(self, log, clock, cycles_per_ms=None, log_buffers=False):
        self.log, self.clock = log, clock
        self.cycles_per_ms, self.log_buffers = cycles_per_ms, log_buffers

    def buffer(self, nbytes):
        if self.log_buffers:
            self.log.append(("buffer", nbytes))
        return _Buffer(self.log)

    def event(self):
        return _Event(self)

    def synchronize(self):
        self.log.append("sync")

    def sleep(self, cycles):
        if self.cycles_per_ms:
            self.clock[0] += cycles / self.cycles_per_ms
        self.log.append(("sleep", cycles))
        return True


class _Buffer:
    def __init__(self, log):
        self.log = log

    def zero_(self):
        self.log.append("flush")


class _Event:
    def __init__(self, api):
        self.api = api

    def record(self):
        self.t = self.api.clock[0]
        self.api.log.append("event")

    def synchronize(self):
        self.api.log.append("event-sync")

    def elapsed_time(self, other):
        return other.t - self.t

"""Fair cross-stream batching: which queued windows form the next model call, and when.

Streams that share a model submit windows here; the batcher answers *when* a batch is due (full, or
every attached stream has a window waiting, or the oldest has waited ``max_wait_s``) and *which*
windows it holds: one per stream in turn, starting after the stream served first last time, so a busy
stream cannot starve a quiet one. Only windows of one shape share a batch (a batch is one tensor).
A window may carry a deadline, and the caller how long a call of n windows of a shape takes: then a
batch holds only as many windows as its earliest deadline allows (one call of many windows must not
carry a window past its deadline that a smaller call would have made), and a window that could not
make its deadline even alone is handed back as late instead of run (Nexus and Clipper size batches by
a latency objective the same way). Time is passed in; nothing here waits.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from streamer.errors import ConfigError

__all__ = ["BatchStats", "FairBatcher"]

T = TypeVar("T")

CallSeconds = Callable[[Hashable, int], float]
"""How long a call of n windows of a shape (the windows' key) is expected to take, in seconds."""


@dataclass(frozen=True, slots=True)
class BatchStats:
    streams: int
    pending: int
    max_pending: int
    submitted: int
    batches: int


@dataclass(frozen=True, slots=True)
class _Queued(Generic[T]):
    item: T
    key: Hashable
    since: float
    deadline: float | None = None


class FairBatcher(Generic[T]):
    """Per-stream FIFO queues of at most ``calls x max_batch`` items each, drained round-robin.

    A stream has at most ``calls`` (the model's workers) submissions under way, each of at most one
    call's worth, so the whole batcher holds at most ``streams x calls x max_batch`` items.

    ``one_each``: each stream has one item under way at a time (a recurrent model's steps, each
    reading the last one's state), so a batch holds at most its share of the streams, ``streams /
    calls`` rounded up, and is due once it has that many: one batch of every stream would leave the
    other calls idle.
    """

    def __init__(
        self, max_batch: int, max_wait_s: float = 0.0, calls: int = 1, one_each: bool = False
    ) -> None:
        if max_batch < 1:
            raise ConfigError(f"runtime.max_batch must be at least 1, got {max_batch}")
        if calls < 1:
            raise ConfigError(f"a batcher's calls under way per stream must be at least 1, got {calls}")
        if max_wait_s < 0:
            raise ConfigError(f"runtime.max_wait_ms must not be negative, got {max_wait_s * 1000:g}")
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.max_queued = calls * max_batch
        self._calls = calls
        self._one_each = one_each
        self._queues: dict[str, collections.deque[_Queued[T]]] = {}
        self._order: list[str] = []
        self._cursor = 0
        self._pending = 0
        self._max_pending = 0
        self._submitted = 0
        self._batches = 0

    def attach(self, stream: str) -> None:
        """A stream that will submit; until it has, a batch may wait ``max_wait_s`` for it."""
        if stream in self._queues:
            raise ConfigError(f"stream {stream!r} is already attached to this model's batcher")
        self._queues[stream] = collections.deque()
        self._order.append(stream)

    def detach(self, stream: str) -> list[T]:
        """Forget a stream; returns what it had queued, for the caller to cancel."""
        queue = self._queues.pop(stream, None)
        if queue is None:
            return []
        at = self._order.index(stream)
        self._order.pop(at)
        if at < self._cursor:
            self._cursor -= 1
        if self._order:
            self._cursor %= len(self._order)
        else:
            self._cursor = 0
        self._pending -= len(queue)
        return [q.item for q in queue]

    def submit(self, stream: str, item: T, key: Hashable, now: float, deadline: float | None = None) -> None:
        """Queue one window of ``stream``; ``key`` says which windows may share a tensor (their shape),
        ``deadline`` when its call must have ended (None: no deadline)."""
        queue = self._queues.get(stream)
        if queue is None:
            raise ConfigError(f"stream {stream!r} submitted a window without attaching to the batcher")
        if len(queue) >= self.max_queued:
            raise RuntimeError(
                f"stream {stream!r} has {len(queue)} windows queued, the most its calls under way take "
                f"({self.max_queued}); wait for them before submitting more"
            )
        queue.append(_Queued(item, key, now, deadline))
        self._pending += 1
        self._submitted += 1
        self._max_pending = max(self._max_pending, self._pending)

    def due_in(self, now: float) -> float | None:
        """Seconds until the next batch should run: 0 for now, None while nothing is queued."""
        if self._pending == 0:
            return None
        if self._pending >= self._batch_size() or all(self._queues[s] for s in self._order):
            return 0.0
        oldest = min(q[0].since for q in self._queues.values() if q)
        return max(0.0, oldest + self.max_wait_s - now)

    def expire(self, now: float, cost: CallSeconds) -> list[tuple[str, T]]:
        """Take out the windows whose deadline a call of them alone, started ``now``, would miss."""
        late: list[tuple[str, T]] = []
        for stream, queue in self._queues.items():
            kept: list[_Queued[T]] = []
            for queued in queue:
                if _ends_by(now, cost, queued.key, 1, queued.deadline):
                    kept.append(queued)
                else:
                    late.append((stream, queued.item))
            if len(kept) < len(queue):
                queue.clear()
                queue.extend(kept)
        self._pending -= len(late)
        return late

    def take(self, now: float | None = None, cost: CallSeconds | None = None) -> list[tuple[str, T]]:
        """The next batch: each stream's oldest window in turn, from the stream after the last one served.

        With ``now`` and ``cost``, the batch ends before the window that would make a call started ``now``
        end past the earliest deadline of the windows in it (it holds at least one window)."""
        if self._pending == 0:
            return []
        n = len(self._order)
        start = next(i % n for i in range(self._cursor, self._cursor + n) if self._queues[self._order[i % n]])
        key = self._queues[self._order[start]][0].key
        batch: list[tuple[str, T]] = []
        last = start
        progress = True
        size = self._batch_size()
        earliest: float | None = None
        while len(batch) < size and progress:
            progress = False
            for offset in range(n):
                at = (start + offset) % n
                queue = self._queues[self._order[at]]
                if queue and queue[0].key == key:
                    deadline = queue[0].deadline
                    if deadline is not None and (earliest is None or deadline < earliest):
                        earliest = deadline
                    if batch and not _ends_by(now, cost, key, len(batch) + 1, earliest):
                        size = len(batch)  # one more window would carry the earliest past it
                        break
                    batch.append((self._order[at], queue.popleft().item))
                    last, progress = at, True
                    if len(batch) == size:
                        break
        self._cursor = (last + 1) % n
        self._pending -= len(batch)
        self._batches += 1
        return batch

    def _batch_size(self) -> int:
        if not self._one_each:
            return self.max_batch
        return max(1, min(self.max_batch, -(-len(self._order) // self._calls)))

    def stats(self) -> BatchStats:
        return BatchStats(
            streams=len(self._order),
            pending=self._pending,
            max_pending=self._max_pending,
            submitted=self._submitted,
            batches=self._batches,
        )


def _ends_by(
    now: float | None, cost: CallSeconds | None, key: Hashable, windows: int, deadline: float | None
) -> bool:
    """Whether a call of ``windows`` started ``now`` is expected to end by ``deadline`` (True where
    either is not given)."""
    if now is None or cost is None or deadline is None:
        return True
    return now + cost(key, windows) <= deadline

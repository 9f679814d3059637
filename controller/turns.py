"""The pace of the controller's run status writes: one at a time, at most `rate` a second, the
urgent ones first (see `Turns`)."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable


class Turns:
    """Run status writes one at a time, their starts at least 1/rate seconds apart: no second
    holds more than `rate` of them. A write waits for its turn (`wait`, `done`; or `take`), then
    its moment
    (`pace`: only a turn that writes spends one); the urgent ones (what is gone a second later:
    a pod about to go, a GPU fault under the run) get their turn before the others, and each
    kind in the order it came. Urgent writes spend the same budget (the bound holds); they only
    do not queue behind a backlog (a restart's catch-up, a burst's ends)."""

    def __init__(
        self,
        rate: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.gap, self.clock, self.sleep = 1.0 / rate, clock, sleep
        self._next = float("-inf")  # the earliest start of the next write
        self._held = False
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []  # a heap: urgent first
        self._order = itertools.count()

    @contextlib.asynccontextmanager
    async def take(self, urgent: bool = False) -> AsyncIterator[None]:
        await self.wait(urgent)
        try:
            yield
        finally:
            self.done()

    async def pace(self) -> None:
        """Wait for the next write's moment (the turn's holder, before it writes)."""
        start = max(self.clock(), self._next)
        self._next = start + self.gap
        wait = start - self.clock()
        if wait > 0:
            await self.sleep(wait)

    async def wait(self, urgent: bool = False) -> None:
        """Until it is the caller's turn (then `done` when its write is)."""
        if not self._held:
            self._held = True
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (0 if urgent else 1, next(self._order), turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # handed the turn as it was cancelled
                self.done()
            raise

    def done(self) -> None:
        """The turn to the first waiter still waiting (a cancelled one's future is done)."""
        while self._waiting:
            turn = heapq.heappop(self._waiting)[2]
            if not turn.done():
                turn.set_result(None)
                return  # held, by the next
        self._held = False

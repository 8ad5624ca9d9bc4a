"""How long a round's decisions hold by the clock alone.

A round compares the snapshot's `now` with moments: a minimum runtime or cooldown ending, a
running workload's time limit, a backfill reservation's start. Each comparison notes the moment
from which it could come out the other way; the earliest is RoundResult.stable_until. Given the
same snapshot at any time before it, the round decides the same (reasons, messages and expected
starts included), so a caller whose inputs did not change may keep the decisions until then.
A value computed from `now` itself (an overdue end clamped to now, a grace deadline counted
from now) changes with any tick of the clock: it notes `now`, and nothing may be kept."""
from __future__ import annotations

import math


class Horizon:
    """The earliest moment noted so far (`until`), never before `now`."""

    __slots__ = ("now", "until")

    def __init__(self, now: float) -> None:
        self.now = now
        self.until = math.inf

    def at(self, moment: float) -> None:
        """Passing `moment` changes a comparison this round made (or a max(now, moment) it used:
        a moment already past moves with the clock, so it notes `now`)."""
        if moment < self.until:
            self.until = max(moment, self.now)

    def result(self) -> float | None:
        """RoundResult.stable_until: None when no moment was noted (time alone changes nothing)."""
        return None if math.isinf(self.until) else self.until

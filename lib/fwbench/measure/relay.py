"""Relay: the arms of one comparison take turns on the machine, a fraction of a second each.

Why: on the virtual machines this study runs on, speed comes in regimes. One process timing
MobileNetV3-S at batch 1 in 0.5 s slices read about 155 img/s, then 75-110 img/s for several
seconds, then 155 again, while it used both of its CPUs throughout and the hypervisor stole
nothing measurable. The headline's trials, one process each and minutes apart, inherit whichever
regime they fell in: across a run's rounds the SD of a trial's log throughput was 4-7 times the
standard error its own blocks give. Arms that alternate every quarter of a second fall in the
same regime. Measured (params/relay_check.yaml), it did not cut the round noise, of an arm, a
JAX ÷ PyTorch ratio or an A/A pair: a slow spell can hit some kernels and not others timed in the
same seconds (DESIGN.md section 3). The order stays available for that question.

Protocol (``order: relay`` in a campaign, ``pipeline/executors.run_relay``): every kernel of a
group holds one lock (``flock``) whenever it works, timed or not, so no two arms ever run at
once and each has every core when it runs. A timer passes its turn at the start of each
measurement, so the arms measure the same batch size at about the same time, and after every
``SLICE_S`` of its own timed calls. It takes the lock back only once a partner has had a turn,
then waits ``SETTLE_S`` so that the partner's idle thread pools have stopped spinning before
its own calls are timed. Time spent waiting is not measurement time: the stop rule counts only
the arm's own. Partners that have ended (or died: the system releases a dead kernel's lock) are
passed over.

A kernel joins when ``fwbench.measure.timing`` is first imported, before any model is built, if
``ENV_RELAY`` names the group's folder; elsewhere everything here does nothing.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import psutil

ENV_RELAY = "FWBENCH_RELAY"  # the group's folder (made by the executor)
ENV_RELAY_PLACE = "FWBENCH_RELAY_PLACE"  # this kernel's name in the group: its cell
SIZE_FILE = "size"  # how many kernels the group has
SLICE_S = 0.25
SETTLE_S = 0.02
# a partner that has not joined by then (its kernel failed to start) is passed over
_JOIN_TIMEOUT_S = 180.0
_POLL_S = 0.001


class Relay:
    """This kernel's place in a relay group; made holding the lock."""

    def __init__(self, folder: str | Path, place: str):
        self.folder = Path(folder)
        self.place = place
        self.turns = 0
        self.waited_s = 0.0
        self.joined_at = time.perf_counter()
        members = self.folder / "members"
        members.mkdir(exist_ok=True)
        self._lock = os.open(self.folder / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        # file names cannot hold a cell key's slashes
        (members / place.replace("/", "|")).write_text(str(os.getpid()))
        self._turn_began = time.perf_counter()

    def _expected(self) -> int:
        try:
            return int((self.folder / SIZE_FILE).read_text())
        except (OSError, ValueError):
            return 1

    def _partners(self) -> tuple[int, int]:
        """(partners that joined, partners still running)."""
        joined = alive = 0
        for member in (self.folder / "members").iterdir():
            if member.name == self.place.replace("/", "|"):
                continue
            joined += 1
            try:
                alive += psutil.pid_exists(int(member.read_text()))
            except (OSError, ValueError):
                pass
        return joined, alive

    def _nobody_to_wait_for(self) -> bool:
        joined, alive = self._partners()
        still_joining = joined + 1 < self._expected()
        if still_joining and time.perf_counter() - self.joined_at < _JOIN_TIMEOUT_S:
            return False
        return alive == 0

    def pass_turn(self) -> float:
        """Give the machine to a partner and wait for it to come back; the seconds waited."""
        start = time.perf_counter()
        if self._nobody_to_wait_for():
            self._turn_began = time.perf_counter()
            return 0.0
        turn = self.folder / "turn"
        while True:
            turn.write_text(self.place)
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            time.sleep(_POLL_S)
            fcntl.flock(self._lock, fcntl.LOCK_EX)
            if turn.read_text() != self.place:
                break  # a partner ran in between
            if self._nobody_to_wait_for():
                break
        time.sleep(SETTLE_S)
        self.turns += 1
        now = time.perf_counter()
        self.waited_s += now - start
        self._turn_began = now
        return now - start

    def tick(self) -> float:
        """Between timed calls: pass the turn once this one has lasted ``SLICE_S``."""
        if time.perf_counter() - self._turn_began < SLICE_S:
            return 0.0
        return self.pass_turn()

    def reading(self) -> dict:
        return {"place": self.place, "turns": self.turns, "waited_s": round(self.waited_s, 3)}


_relay: Relay | None = None


def current() -> Relay | None:
    """This kernel's relay, joined on the first call, or None outside a relay group."""
    global _relay
    if _relay is None and os.environ.get(ENV_RELAY):
        place = os.environ.get(ENV_RELAY_PLACE) or str(os.getpid())
        _relay = Relay(os.environ[ENV_RELAY], place)
    return _relay


def pass_turn() -> float:
    relay = current()
    return relay.pass_turn() if relay else 0.0


def tick() -> float:
    relay = current()
    return relay.tick() if relay else 0.0


def reading() -> dict | None:
    """What the records say about the relay: this kernel's place, turns and time waited."""
    relay = current()
    return relay.reading() if relay else None

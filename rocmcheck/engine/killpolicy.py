"""How a hung child is killed, as one value: the steps, the wait after each, and how long a
killed tree may take to go.

The watchdog carries a `KillPolicy` out and records each step it took as a `KillStep`; the
verdict compares those typed steps, and only its evidence turns them into text (the same
strings reports always held). Changing how a hung child is killed means changing this value
(its default, or the one a run is given), not the modules that carry it.
"""
from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, replace
from typing import List, Optional, Sequence, Tuple

SIGKILL = getattr(signal, "SIGKILL", 9)  # Windows has none: the watchdog terminates the job instead


class KillStep(enum.Enum):
    """One thing done to a child the watchdog ended; the value is the text its evidence shows."""

    STACK_DUMP = "SIGUSR1 (stack dump)"  # to the child alone: faulthandler writes every thread's stack
    TERM = "SIGTERM"  # to the whole tree; Windows: TerminateProcess of the child
    KILL = "SIGKILL"  # to the whole tree; Windows: the job is terminated

    @property
    def signum(self) -> Optional[int]:
        """The signal sent; None where the platform has none for this step (SIGUSR1 on Windows)."""
        return {KillStep.STACK_DUMP: getattr(signal, "SIGUSR1", None), KillStep.TERM: signal.SIGTERM,
                KillStep.KILL: SIGKILL}[self]


@dataclass(frozen=True)
class KillPolicy:
    """The steps of ending a hung child, in order, each with the seconds waited after it.

    The wait after `KillStep.KILL` is the teardown: 30 s, because a GPU process killed
    mid-kernel stays in driver teardown (state D) for seconds, and one still there after the
    wait is declared unkillable, which skips every remaining GPU probe of the run. A tree that
    goes sooner ends every wait at once, so a child off the GPU costs milliseconds, not 30 s.
    `interrupt_wait_s` bounds the wait after the SIGKILL of an interrupt (Ctrl-C, SIGTERM):
    the user is waiting, and the run is ending anyway.
    """

    steps: Tuple[Tuple[KillStep, float], ...] = ((KillStep.STACK_DUMP, 0.3), (KillStep.TERM, 0.5),
                                                 (KillStep.KILL, 30.0))
    interrupt_wait_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.steps or self.steps[-1][0] is not KillStep.KILL:
            raise ValueError("a kill policy ends with SIGKILL: nothing else is sure to end a tree")

    def with_waits(self, **waits: float) -> "KillPolicy":
        """This policy with other waits, by step name (`term=2.0`, `kill=1.5`); the steps stay."""
        unknown = set(waits) - {step.name.lower() for step, _ in self.steps}
        if unknown:
            raise ValueError(f"no such kill step: {', '.join(sorted(unknown))}")
        return replace(self, steps=tuple((step, waits.get(step.name.lower(), wait)) for step, wait in self.steps))


def step_texts(steps: Sequence[KillStep]) -> List[str]:
    """The steps as a verdict's evidence and message show them: the strings reports always held."""
    return [step.value for step in steps]

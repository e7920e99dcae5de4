"""A service process that has stopped cleanly exits within a bound.

After a clean stop everything durable is committed and flushed. What is left is the runtime's own
exit: the event loop joins its default executor's threads (without a bound in Python 3.11), then the
interpreter joins non-daemon threads and destroys librdkafka handles. A blocking Kafka call left in
a thread against an unreachable broker can make that outlast an orchestrator's grace period (seen:
a dispatcher that logged "stopped cleanly" after a broker was killed, then SIGKILLed 20 s later).

`arm` starts a daemon timer: if the process still runs `grace_s` later, every thread's stack goes
to stderr (so the holder is named in the log) and the process ends with the clean stop's code.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading

EXIT_GRACE_S = 10.0

log = logging.getLogger("inferq.exit")


def arm(code: int, grace_s: float = EXIT_GRACE_S) -> threading.Timer:
    """End the process with `code` if it has not exited `grace_s` from now."""

    def expire() -> None:
        mine = (threading.current_thread(), threading.main_thread())
        held = sorted(t.name for t in threading.enumerate() if t not in mine)
        log.warning(
            "still exiting %.1f s after a clean stop, held by threads %s; their stacks follow, then exit %d",
            grace_s,
            ", ".join(held) or "(none)",
            code,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(grace_s, expire)
    timer.name = "inferq-exit-bound"
    timer.daemon = True
    timer.start()
    return timer

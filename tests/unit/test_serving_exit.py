"""A service that stopped cleanly but is held at exit by a stuck thread still exits, naming it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

HELD = textwrap.dedent(
    """
    import threading, time
    from inferq.serving import bound_exit

    def blocking_kafka_call():
        time.sleep(600)

    threading.Thread(target=blocking_kafka_call, name="stuck-admin").start()
    bound_exit(0, grace_s=0.5)
    """
)


def test_a_thread_holding_the_exit_is_named_and_the_process_ends_with_the_clean_code():
    done = subprocess.run([sys.executable, "-c", HELD], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "held by threads stuck-admin" in done.stderr
    assert "blocking_kafka_call" in done.stderr  # the stack says where it waits


def test_a_process_that_exits_on_its_own_keeps_its_code_and_says_nothing():
    script = "from inferq.serving import bound_exit\nbound_exit(0, grace_s=30)\nraise SystemExit(3)\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert done.stderr == ""

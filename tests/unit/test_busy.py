"""duo.busy: the share of the machine other work took during a measurement."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from duo.busy import BUSY_SHARE, OtherLoad, busy_note, busy_share


def test_busy_share_and_its_note() -> None:
    assert busy_share(1.0, 2.0, 2) == 0.25
    assert busy_share(-0.5, 2.0, 2) == 0.0  # rounding in the counters
    assert busy_note(None) is None and busy_note(BUSY_SHARE) is None
    note = busy_note(0.5)
    assert note is not None and "50%" in note and "not a fair comparison" in note


def test_another_process_spinning_is_seen() -> None:
    load = OtherLoad()
    hog = subprocess.Popen(
        [sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1: pass"]
    )
    hog.wait(timeout=30)
    time.sleep(0.05)
    share = load.share()
    assert share is not None
    # one core's second, of what the machine's cores offered meanwhile, give or take others
    assert share >= 0.5 / (os.cpu_count() or 1), share

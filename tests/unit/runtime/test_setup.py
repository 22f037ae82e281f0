"""What the set-up passes in as it builds a loader (aisio.runtime.setup): importing aisio plugs
nothing into anything (tests/unit/test_layers.py), so the set-up does it, for the loader it
builds and for this process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT

BUILT = """
from multiprocessing.reduction import ForkingPickler
from aisio.core.order.reader import RoundChunks
from aisio.core.transport.delivery import Delivery
from aisio.runtime import dist, fetchers
from aisio.runtime.setup import loader_setup

def registered():
    return [kind.__name__ for kind in (Delivery, RoundChunks)
            if kind in ForkingPickler._extra_reducers]

print("imported:", registered())
setup = loader_setup("t", "ais://b/s-{0..1}.tar", {"endpoint": "http://127.0.0.1:9"}, seed=1,
                     uneven="drop")
print("set up:", registered())
loader = setup.loader(open_epoch=lambda epoch, state: [], close=lambda: None)
print("plugged:", loader.gather_over_ranks is dist.gather_state,
      loader.check_iteration is fetchers.check_iteration)
"""


def test_the_set_up_registers_the_transport_and_passes_in_what_the_core_cannot_import() -> None:
    """In a fresh process: the modules imported, nothing is registered; the set-up registers
    how deliveries and the deterministic order's packs cross (workers forked after it inherit
    that), and its loader gets the ranks' state and the trainer check passed in."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(BUILT)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["imported: []", "set up: ['Delivery', 'RoundChunks']",
                                        "plugged: True True"]

"""The `tau` CLI: parse -> call taugrid.client -> print. Nothing heavy is imported at module
import time.

pydantic looks for plugins in the metadata of every installed distribution the first time a
model is built (~25 ms at each `tau` start); the CLI uses none, so it tells pydantic not to look
(a process that embeds tau through taugrid.client keeps its own choice)."""

import os

os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

# The `tau` process's young-generation threshold for the cyclic garbage collector. A command's
# start-up (imports, building pydantic's validators) leaves ~50,000 new container objects and
# almost no cycles; at Python's default of 700 the collector makes ~75 passes over them, ~15 ms
# of a 0.2 s `tau run render`. At this threshold a start-up makes none, and a long-running
# command (a follow, the portal) still collects, once per this many new objects.
GC_YOUNG_THRESHOLD = 100_000


def main() -> int:
    """The `tau` executable (a function of this package, so that the collector's threshold is
    set before the CLI's own imports; importing taugrid.cli.app, as tests do, leaves it alone)."""
    import gc

    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    from taugrid.cli.app import main as run

    return run()

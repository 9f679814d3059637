"""The `tau` CLI: parse -> call taugrid.client -> print. Nothing heavy is imported at module
import time.

pydantic looks for plugins in the metadata of every installed distribution the first time a
model is built (~25 ms at each `tau` start); the CLI uses none, so it tells pydantic not to look
(a process that embeds tau through taugrid.client keeps its own choice)."""

import os

os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

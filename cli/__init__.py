"""The `tau` CLI and the run engine. Nothing heavy is imported at module import time."""

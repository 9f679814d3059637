"""The TauGrid contract: pydantic models and constants. Pure: no I/O, no heavy imports."""

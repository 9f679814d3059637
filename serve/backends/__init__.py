"""One backend per serving target (`base.REGISTRY`); see base.py."""

from taugrid.serve.backends.base import for_record, get

__all__ = ["for_record", "get"]

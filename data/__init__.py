"""Registry stores of datasets and models (file://): see store.py and docs/data.md."""

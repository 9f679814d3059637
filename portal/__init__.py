"""`tau portal`: runs, metrics and logs in a browser, on the same Python API as the CLI."""

"""The TauGrid controller (kopf): quota grants, the lifecycle recorder, GPU remediation,
status of the platform objects. `tau controller run` or `python -m taugrid.controller`."""

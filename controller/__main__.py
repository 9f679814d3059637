"""`python -m taugrid.controller`: the controller's process (the Deployment's command, and what
`tau sandbox up` starts out of cluster). `tau controller run` is the same with the CLI's output."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from taugrid.api.errors import TauError
from taugrid.controller import config as cfgmod
from taugrid.controller.operator import run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m taugrid.controller")
    ap.add_argument("--context", help="kubeconfig context (default: the current one)")
    ap.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    ap.add_argument("--config", type=Path, default=os.environ.get("TAU_CONTROLLER_CONFIG"))
    ap.add_argument("--dry-run", action="store_true", help="remediation decides, changes no node")
    ap.add_argument("--standalone", action="store_true", help="no peering (one replica)")
    ap.add_argument("--liveness", help="e.g. http://0.0.0.0:8080/healthz")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        cfg = cfgmod.load(args.config)
        if args.dry_run:
            cfg.remediation = cfg.remediation.model_copy(update={"dry_run": True})
        run(
            cfg,
            context=args.context,
            in_cluster=args.in_cluster,
            standalone=args.standalone,
            liveness=args.liveness,
        )
    except TauError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())

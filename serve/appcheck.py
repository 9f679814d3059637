"""Run in a subprocess before a deploy (`python appcheck.py IMPORT_PATH ARGS_JSON`, in the
revision's code folder): import the Ray Serve application the way Ray Serve will, and print
its deployments as JSON. An import path that does not import fails here, with the error, before
anything is deployed. (Ray is imported only in this process, never in `tau` itself.)
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from typing import Any


def _fail(message: str) -> None:
    print(json.dumps({"error": message}))
    sys.exit(0)


def main() -> None:
    import_path, args = sys.argv[1], json.loads(sys.argv[2])
    module_name, _, attr = import_path.partition(":")
    sys.path.insert(0, ".")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        tail = traceback.format_exception_only(type(e), e)[-1].strip()
        _fail(f"module {module_name!r} does not import: {tail}")
        return
    if not hasattr(module, attr):
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        _fail(f"module {module_name!r} has no {attr!r} (it has: {', '.join(public[:12])})")
        return
    from ray.serve import Application

    target: Any = getattr(module, attr)
    if not isinstance(target, Application):
        if not callable(target) or isinstance(target, type):
            _fail(
                f"{import_path} is a {type(target).__name__}, not a Ray Serve application "
                "(Deployment.bind()) or a builder function taking the args"
            )
            return
        try:
            target = target(args)
        except Exception as e:
            tail = traceback.format_exception_only(type(e), e)[-1].strip()
            _fail(f"the builder {import_path}(args) failed: {tail}")
            return
        if not isinstance(target, Application):
            _fail(
                f"the builder {import_path} returned a {type(target).__name__}, "
                "not a Ray Serve application"
            )
            return
    elif args:
        _fail(
            f"{import_path} is an application, not a builder function: it takes no args "
            "(remove service.args, or point import_path at a function that builds the app)"
        )
        return
    try:
        from ray.serve._private.build_app import build_app

        built = build_app(target, name="check")
        names = [d.name for d in built.deployments]
        ingress = built.ingress_deployment_name
    except Exception:  # Ray's builder is internal: the ingress alone still serves
        ingress = target._bound_deployment.name
        names = [ingress]
    print(json.dumps({"ingress": ingress, "deployments": names}))


if __name__ == "__main__":
    main()

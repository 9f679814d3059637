"""KWOK's stages for the sandbox's simulated pods: a Job's pod runs SANDBOX_RUN_SECONDS, then
succeeds, or fails when SANDBOX_RESULT=FAILED (the same words as the sandbox Ray job's)."""

from __future__ import annotations

from typing import Any

# What a sandbox pod of a Job does, from its container's env (the same words as the sandbox Ray
# job's): it runs SANDBOX_RUN_SECONDS (0: ends at once, as KWOK's stock stage), then succeeds,
# or fails with exit code 1 if SANDBOX_RESULT=FAILED. Pods of other owners: KWOK's stock stages.
_ENV = '[.spec.containers.[] | (.env // []) | .[] | select(.name == "{name}") | .value]'


_JOB_POD = [
    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
    # the active tier's check pods end as the sandbox's node agent says (sandbox/dcgmsim.py)
    {"key": '.metadata.labels["tau.azure.com/validation-check"]', "operator": "DoesNotExist"},
    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
    {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]},
]


_ENDED = """{{{{ $now := Now }}}}
containerStatuses:
{{{{ range .spec.containers }}}}
- name: {{{{ .name | Quote }}}}
  image: {{{{ .image | Quote }}}}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated: {{exitCode: {code}, reason: {reason}, startedAt: {{{{ $now | Quote }}}}, finishedAt: {{{{ $now | Quote }}}}}}
{{{{ end }}}}
phase: {phase}
"""  # noqa: E501 (data: its lines are what they are)


def sandbox_stages() -> list[dict[str, Any]]:
    """KWOK Stages for the pods of Jobs: run for a while, then succeed or fail (see above)."""
    result = _ENV.format(name="SANDBOX_RESULT") + " | .[]"
    delay = {
        "durationMilliseconds": 0,
        "durationFrom": {
            "jq": {
                "expression": _ENV.format(name="SANDBOX_RUN_SECONDS")
                + ' | (first // "0") | tostring + "s"'
            }
        },
    }

    def stage(name: str, outcome: str, phase: str, code: int, reason: str) -> dict[str, Any]:
        op = "In" if outcome == "FAILED" else "NotIn"
        return {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": {"name": name},
            "spec": {
                "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                "selector": {
                    "matchExpressions": [
                        *_JOB_POD,
                        {"key": result, "operator": op, "values": ["FAILED"]},
                    ]
                },
                "delay": delay,
                "next": {"statusTemplate": _ENDED.format(phase=phase, code=code, reason=reason)},
            },
        }

    return [
        stage("tau-job-pod-succeeds", "", "Succeeded", 0, "Completed"),
        stage("tau-job-pod-fails", "FAILED", "Failed", 1, "Error"),
    ]

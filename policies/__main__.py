"""The policy pack's entry point: the engine starts it (PulumiPolicy.yaml's folder is the pack)."""

from pulumi_policy import EnforcementLevel, PolicyPack

from taugrid.policies.pack import POLICIES

PolicyPack(name="taugrid", policies=POLICIES, enforcement_level=EnforcementLevel.MANDATORY)

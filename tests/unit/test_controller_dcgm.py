"""GPU use per run from DCGM's exporter (#41): its text format read (the fields that tell a busy
GPU from an allocated one), joined to runs through the pod that holds each GPU, a GPU no run's
pod holds set apart, garbage refused by name, and "allocated but idle" after a quiet window."""

from __future__ import annotations

import pytest

from taugrid.controller import dcgm as D

# What dcgm-exporter prints with its Kubernetes mapping on (two GPUs of one node: one held by a
# run's worker, one by no pod), in its own format: HELP and TYPE lines, labels, values.
EXPOSITION = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-8d8a41a1-6d5f-4c3e-9a11-000000000000",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="a100x2-0",DCGM_FI_DRIVER_VERSION="550.90.07",container="ray-worker",namespace="team",pod="r1-worker-0"} 100
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-8d8a41a1-6d5f-4c3e-9a11-000000000001",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="a100x2-0",DCGM_FI_DRIVER_VERSION="550.90.07"} 0
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-8d8a41a1-6d5f-4c3e-9a11-000000000000",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="a100x2-0",container="ray-worker",namespace="team",pod="r1-worker-0"} 40960
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-8d8a41a1-6d5f-4c3e-9a11-000000000001",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="a100x2-0"} 0
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-8d8a41a1-6d5f-4c3e-9a11-000000000000",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="a100x2-0",container="ray-worker",namespace="team",pod="r1-worker-0"} 312.5
# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned.
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-8d8a41a1-6d5f-4c3e-9a11-000000000000",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="a100x2-0",container="ray-worker",namespace="team",pod="r1-worker-0"} 0.031
DCGM_FI_PROF_SM_ACTIVE{gpu="1",UUID="GPU-8d8a41a1-6d5f-4c3e-9a11-000000000001",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="a100x2-0"} 0
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-8d8a41a1-6d5f-4c3e-9a11-000000000000"} 1410
"""  # noqa: E501 (data: the exporter's own lines)


def test_the_exporters_text_is_read_per_gpu_with_the_pod_that_holds_it() -> None:
    g0, g1 = D.parse(EXPOSITION, "a100x2-0")
    assert (g0.node, g0.index, g0.namespace, g0.pod) == ("a100x2-0", "0", "team", "r1-worker-0")
    assert g0.model == "NVIDIA A100-SXM4-80GB" and g0.uuid.endswith("000")
    assert g0.values[D.FB_USED] == 40960 and g0.values[D.POWER] == 312.5
    assert "DCGM_FI_DEV_SM_CLOCK" not in g0.values  # not a field read
    assert g1.pod is None and g1.namespace is None


def test_busy_is_sm_activity_not_the_0_100_utilisation() -> None:
    (g0, _) = D.parse(EXPOSITION, "n")
    assert g0.values[D.GPU_UTIL] == 100 and g0.busy == pytest.approx(0.031)  # "a kernel ran"
    only_util = D.Gpu("n", "0", values={D.GPU_UTIL: 42.0})
    assert only_util.busy == pytest.approx(0.42)
    assert D.Gpu("n", "0").busy is None


def test_use_is_joined_to_runs_and_a_gpu_of_no_run_is_set_apart() -> None:
    gpus = D.parse(EXPOSITION, "a100x2-0")
    use, strays = D.per_run(gpus, {("team", "r1-worker-0"): "r1"})
    assert set(use) == {"r1"} and [g.index for g in strays] == ["1"]
    u = use["r1"]
    assert (u.gpus, u.fb_used_mib, u.power_w, u.nodes) == (1, 40960, 312.5, ("a100x2-0",))
    assert u.busy == pytest.approx(0.031)
    # a GPU index a pod holds that is no run's (another team's pod, a pod gone): not a run's use
    use, strays = D.per_run(gpus, {("team", "someone-else"): "r2"})
    assert use == {} and len(strays) == 2


@pytest.mark.parametrize(
    "garbage",
    [
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0"} not-a-number',
        "<html><body>502 Bad Gateway</body></html>",
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0" 0.5',
    ],
)
def test_an_answer_that_is_not_the_format_is_refused_by_name(garbage: str) -> None:
    with pytest.raises(D.ExpositionError, match="not DCGM exporter's text format"):
        D.parse(garbage, "n")


def test_empty_and_unrelated_answers_hold_no_gpu() -> None:
    assert D.parse("", "n") == []
    assert D.parse("# HELP x y\n# TYPE x gauge\nx 1\n", "n") == []
    assert D.parse('DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-1"} 0.5\n', "n") == []  # no GPU index


def test_a_run_quiet_for_the_whole_window_is_allocated_but_idle() -> None:
    watch = D.IdleWatch(threshold=0.05, window_s=600)
    quiet = {"r1": D.GpuUse(1, 0.01, 0, 0, ("n",)), "r2": D.GpuUse(1, 0.9, 0, 0, ("n",))}
    assert watch.observe(quiet, 1000) == {}
    assert watch.observe(quiet, 1599) == {}
    assert watch.observe(quiet, 1600) == {"r1": 1000}  # quiet since its first quiet sample
    busy_again = {"r1": D.GpuUse(1, 0.5, 0, 0, ("n",))}
    assert watch.observe(busy_again, 1700) == {} and watch.quiet_since == {}
    assert watch.observe(quiet, 1800) == {}  # starts again
    assert watch.observe({}, 3000) == {} and watch.quiet_since == {}  # a run gone: forgotten
    unknown = {"r3": D.GpuUse(1, None, 0, 0, ("n",))}
    assert watch.observe(unknown, 4000) == {} and watch.observe(unknown, 9000) == {}

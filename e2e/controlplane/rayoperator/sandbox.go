package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils/dashboardclient"
	utiltypes "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils/types"
)

// sandboxProvider hands KubeRay clients for the Ray dashboard and the Serve proxy that answer
// from the Kubernetes objects the sandbox simulates instead of from a Ray head:
//
//   - K8sJobMode: a Ray job's state is the state of the RayJob's submitter Job (which KWOK runs:
//     its pod starts, runs and completes like any Job's), so a RayJob ends when its submitter ends;
//   - HTTPMode (what TauGrid renders): a submitted Ray job is RUNNING when first asked about and
//     SUCCEEDED from the next poll on (like KWOK's Job pods, which complete as soon as they run);
//     the head container's env may say otherwise: SANDBOX_RUN_SECONDS (how long it runs)
//     and SANDBOX_RESULT=FAILED (how it ends). After an operator restart the job is unknown,
//     and KubeRay submits it again;
//   - a Serve application is RUNNING with HEALTHY deployments once KubeRay has sent its config,
//     and every Serve proxy is healthy.
//
// A Ray cluster whose pods all run on the sandbox's real nodes (label type=real: kubelet and
// containerd, see infra/realnodes.py) has a real Ray head: its clients are KubeRay's own, through
// the API server's service and pod proxy (the host routes to the real nodes' pod ranges), so its
// jobs and Serve applications are Ray's answers. A cluster with any pod on a KWOK node, or with a
// pod not yet placed, keeps the sandbox clients.
type sandboxProvider struct{}

func (sandboxProvider) GetDashboardClient(mgr manager.Manager) func(*rayv1.RayCluster, string) (dashboardclient.RayDashboardClientInterface, error) {
	real := utils.GetRayDashboardClientFunc(mgr, true)
	return func(rc *rayv1.RayCluster, url string) (dashboardclient.RayDashboardClientInterface, error) {
		if clusterOnRealNodes(mgr.GetAPIReader(), rc.Namespace, rc.Name) {
			return real(rc, url)
		}
		return &sandboxDashboard{kube: mgr.GetClient(), cluster: types.NamespacedName{Namespace: rc.Namespace, Name: rc.Name}}, nil
	}
}

func (sandboxProvider) GetHttpProxyClient(mgr manager.Manager) func(string, string, string, int) utils.RayHttpProxyClientInterface {
	real := utils.GetRayHttpProxyClientFunc(mgr, true)
	return func(hostIP, namespace, pod string, port int) utils.RayHttpProxyClientInterface {
		if podOnRealNode(mgr.GetAPIReader(), namespace, pod) {
			return real(hostIP, namespace, pod, port)
		}
		return healthyProxy{}
	}
}

// realNodes remembers which nodes are real (name -> bool): a node's kind never changes.
var realNodes sync.Map

func nodeIsReal(ctx context.Context, reader client.Reader, name string) bool {
	if name == "" {
		return false
	}
	if v, ok := realNodes.Load(name); ok {
		return v.(bool)
	}
	var node corev1.Node
	if err := reader.Get(ctx, types.NamespacedName{Name: name}, &node); err != nil {
		return false
	}
	real := node.Labels["type"] == "real"
	realNodes.Store(name, real)
	return real
}

func clusterOnRealNodes(reader client.Reader, namespace, cluster string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var pods corev1.PodList
	if err := reader.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{utils.RayClusterLabelKey: cluster}); err != nil {
		return false
	}
	if len(pods.Items) == 0 {
		return false
	}
	for i := range pods.Items {
		if !nodeIsReal(ctx, reader, pods.Items[i].Spec.NodeName) {
			return false
		}
	}
	return true
}

func podOnRealNode(reader client.Reader, namespace, name string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var pod corev1.Pod
	if err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &pod); err != nil {
		return false
	}
	return nodeIsReal(ctx, reader, pod.Spec.NodeName)
}

type healthyProxy struct{}

func (healthyProxy) CheckProxyActorHealth(context.Context) error { return nil }

// submitted counts the polls of each Ray job submitted over HTTP (job id -> *int).
var submitted sync.Map

// serveConfigs keeps the Serve config KubeRay last sent to each RayCluster.
var serveConfigs sync.Map // types.NamespacedName -> []serveApp

type serveApp struct {
	Name        string `json:"name"`
	RoutePrefix string `json:"route_prefix"`
	Deployments []struct {
		Name string `json:"name"`
	} `json:"deployments"`
}

type sandboxDashboard struct {
	kube    client.Client
	cluster types.NamespacedName
}

func (d *sandboxDashboard) InitClient(*http.Client, string) {}

// GetJobInfo: the job of the RayJob whose status names jobId, in the submitter Job's state.
func (d *sandboxDashboard) GetJobInfo(ctx context.Context, jobID string) (*utiltypes.RayJobInfo, error) {
	var jobs rayv1.RayJobList
	if err := d.kube.List(ctx, &jobs, client.InNamespace(d.cluster.Namespace)); err != nil {
		return nil, err
	}
	for i := range jobs.Items {
		rj := &jobs.Items[i]
		if rj.Status.JobId != jobID {
			continue
		}
		info := &utiltypes.RayJobInfo{JobId: jobID, SubmissionId: jobID, Entrypoint: rj.Spec.Entrypoint, JobStatus: rayv1.JobStatusPending}
		if rj.Spec.SubmissionMode != rayv1.K8sJobMode {
			return httpJob(info, headEnv(rj))
		}
		var submitter batchv1.Job
		err := d.kube.Get(ctx, types.NamespacedName{Namespace: rj.Namespace, Name: rj.Name}, &submitter)
		if apierrors.IsNotFound(err) {
			return info, nil
		}
		if err != nil {
			return nil, err
		}
		if submitter.Status.StartTime != nil {
			info.StartTime = uint64(submitter.Status.StartTime.UnixMilli())
			info.JobStatus = rayv1.JobStatusRunning
		}
		for _, c := range submitter.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobComplete:
				info.JobStatus = rayv1.JobStatusSucceeded
			case batchv1.JobFailed:
				info.JobStatus = rayv1.JobStatusFailed
				info.Message = c.Message
			default:
				continue
			}
			info.EndTime = uint64(c.LastTransitionTime.UnixMilli())
		}
		return info, nil
	}
	// What a Ray dashboard answers for an unknown job: KubeRay reads it as "not found".
	return nil, apierrors.NewBadRequest("job " + jobID + " does not exist")
}

// headEnv: the plain env values of the RayJob's head container.
func headEnv(rj *rayv1.RayJob) map[string]string {
	out := map[string]string{}
	if rj.Spec.RayClusterSpec == nil {
		return out
	}
	for _, c := range rj.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers {
		for _, e := range c.Env {
			out[e.Name] = e.Value
		}
	}
	return out
}

func httpJob(info *utiltypes.RayJobInfo, env map[string]string) (*utiltypes.RayJobInfo, error) {
	v, ok := submitted.Load(info.JobId)
	if !ok {
		return nil, apierrors.NewBadRequest("job " + info.JobId + " does not exist")
	}
	polls := v.(*pollCount)
	polls.mu.Lock()
	defer polls.mu.Unlock()
	polls.n++
	info.StartTime = uint64(polls.at.UnixMilli())
	info.JobStatus = rayv1.JobStatusRunning
	seconds, _ := strconv.ParseFloat(env["SANDBOX_RUN_SECONDS"], 64)
	if polls.n > 1 && time.Since(polls.at).Seconds() >= seconds {
		info.JobStatus = rayv1.JobStatusSucceeded
		if env["SANDBOX_RESULT"] == string(rayv1.JobStatusFailed) {
			info.JobStatus = rayv1.JobStatusFailed
			info.Message = "the sandbox failed this job (SANDBOX_RESULT=FAILED)"
		}
		info.EndTime = uint64(time.Now().UnixMilli())
	}
	return info, nil
}

type pollCount struct {
	mu sync.Mutex
	n  int
	at time.Time
}

func (d *sandboxDashboard) ListJobs(context.Context) (*[]utiltypes.RayJobInfo, error) {
	return &[]utiltypes.RayJobInfo{}, nil
}

// SubmitJob (HTTP mode): the sandbox has no Ray to run it: it remembers the job (see httpJob).
func (d *sandboxDashboard) SubmitJob(_ context.Context, rj *rayv1.RayJob) (string, error) {
	submitted.LoadOrStore(rj.Status.JobId, &pollCount{at: time.Now()})
	return rj.Status.JobId, nil
}

func (d *sandboxDashboard) SubmitJobReq(_ context.Context, req *utiltypes.RayJobRequest) (string, error) {
	if req.SubmissionId != "" {
		return req.SubmissionId, nil
	}
	return "sandbox", nil
}

func (d *sandboxDashboard) GetJobLog(context.Context, string) (*string, error) {
	none := "(the sandbox runs no Ray job: its pods are simulated)"
	return &none, nil
}

func (d *sandboxDashboard) StopJob(context.Context, string) error   { return nil }
func (d *sandboxDashboard) DeleteJob(context.Context, string) error { return nil }

func (d *sandboxDashboard) UpdateDeployments(_ context.Context, configJSON []byte) error {
	var cfg struct {
		Applications []serveApp `json:"applications"`
	}
	if err := json.Unmarshal(configJSON, &cfg); err != nil {
		return apierrors.NewBadRequest("serve config: " + err.Error())
	}
	serveConfigs.Store(d.cluster, cfg.Applications)
	return nil
}

func (d *sandboxDashboard) apps() []serveApp {
	v, ok := serveConfigs.Load(d.cluster)
	if !ok {
		return nil
	}
	return v.([]serveApp)
}

func (d *sandboxDashboard) GetMultiApplicationStatus(context.Context) (map[string]*utiltypes.ServeApplicationStatus, error) {
	out := map[string]*utiltypes.ServeApplicationStatus{}
	for _, app := range d.apps() {
		st := &utiltypes.ServeApplicationStatus{Name: app.Name, Status: "RUNNING", Deployments: map[string]utiltypes.ServeDeploymentStatus{}}
		for _, dep := range app.Deployments {
			st.Deployments[dep.Name] = utiltypes.ServeDeploymentStatus{Name: dep.Name, Status: "HEALTHY"}
		}
		out[app.Name] = st
	}
	return out, nil
}

func (d *sandboxDashboard) GetServeDetails(ctx context.Context) (*utiltypes.ServeDetails, error) {
	statuses, _ := d.GetMultiApplicationStatus(ctx)
	details := &utiltypes.ServeDetails{Applications: map[string]utiltypes.ServeApplicationDetails{}, DeployMode: "MULTI_APP"}
	for _, app := range d.apps() {
		det := utiltypes.ServeApplicationDetails{ServeApplicationStatus: *statuses[app.Name], RoutePrefix: app.RoutePrefix,
			Deployments: map[string]utiltypes.ServeDeploymentDetails{}}
		for _, dep := range app.Deployments {
			det.Deployments[dep.Name] = utiltypes.ServeDeploymentDetails{ServeDeploymentStatus: utiltypes.ServeDeploymentStatus{Name: dep.Name, Status: "HEALTHY"}}
		}
		details.Applications[app.Name] = det
	}
	return details, nil
}

// The sandbox's KubeRay operator: KubeRay's own RayCluster, RayJob and RayService controllers
// (v1.5.0, imported as a library) with one difference: for a Ray cluster on KWOK's simulated
// pods, the Ray dashboard and Serve proxy clients are sandbox clients that never open a
// connection (see sandbox.go): there is no Ray head to talk to, and the stock operator polled
// `<head>.<ns>.svc.cluster.local:8265` through the host's resolver for ever. A Ray cluster whose
// pods all run on the sandbox's real nodes gets KubeRay's own clients through the API server's
// proxy. Nothing here sends a packet anywhere but the API server on the loopback.
package main

import (
	"flag"
	"os"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	k8szap "sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	configapi "github.com/ray-project/kuberay/ray-operator/apis/config/v1alpha1"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/batchscheduler"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
)

func main() {
	var metricsAddr, probeAddr string
	var concurrency int
	flag.StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:0", "metrics endpoint")
	flag.StringVar(&probeAddr, "health-probe-bind-address", "127.0.0.1:0", "probe endpoint")
	flag.IntVar(&concurrency, "reconcile-concurrency", configapi.DefaultReconcileConcurrency, "workers per controller")
	opts := k8szap.Options{Development: true}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	logger := k8szap.New(k8szap.UseFlagOptions(&opts))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	setup := ctrl.Log.WithName("setup")
	fail := func(err error, msg string) {
		if err != nil {
			setup.Error(err, msg)
			os.Exit(1)
		}
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(rayv1.AddToScheme(scheme))
	utilruntime.Must(batchv1.AddToScheme(scheme))

	// Like the stock operator: only the Jobs KubeRay made are cached.
	created, err := labels.NewRequirement(utils.KubernetesCreatedByLabelKey, selection.Equals, []string{utils.ComponentName})
	fail(err, "selector")
	restConfig := ctrl.GetConfigOrDie()
	restConfig.UserAgent = "kuberay-operator/" + utils.KUBERAY_VERSION + " (taugrid sandbox)"
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&batchv1.Job{}: {Label: labels.NewSelector().Add(*created)},
		}},
	})
	fail(err, "manager")
	ctx := ctrl.SetupSignalHandler()

	var config configapi.Configuration
	config.ReconcileConcurrency = concurrency
	schedulers, err := batchscheduler.NewSchedulerManager(ctx, config, restConfig, mgr.GetClient())
	fail(err, "batch scheduler manager")
	provider := sandboxProvider{}

	fail(ray.NewReconciler(ctx, mgr, ray.RayClusterReconcilerOptions{
		IsOpenShift: false, BatchSchedulerManager: schedulers,
	}).SetupWithManager(mgr, concurrency), "RayCluster controller")
	fail(ray.NewRayServiceReconciler(ctx, mgr, provider).SetupWithManager(mgr, concurrency), "RayService controller")
	fail(ray.NewRayJobReconciler(ctx, mgr, ray.RayJobReconcilerOptions{BatchSchedulerManager: schedulers}, provider).
		SetupWithManager(mgr, concurrency), "RayJob controller")
	fail(mgr.AddHealthzCheck("healthz", healthz.Ping), "health check")
	fail(mgr.AddReadyzCheck("readyz", healthz.Ping), "ready check")
	setup.Info("starting the sandbox KubeRay operator (no dashboard connections)")
	fail(mgr.Start(ctx), "manager")
}

// ssa-loop: the benchmark's physical limit. Reads every YAML document under
// the given paths and server-side applies each object once, N at a time, with
// client-go's dynamic client and a REST mapper from discovery. No planning,
// no diff, no waiting, no prune, no record: the least a server-side-apply
// deploy can do.
//
//	ssa-loop --kubeconfig K [--concurrency 32] [--field-manager M] [--wait] FILE|DIR...
//	ssa-loop --kubeconfig K --wait-only --selector LABELS
//
// --wait then polls (one LIST every 100 ms) until every Deployment matching
// --selector (default: every Deployment applied) has rolled out and is
// available, the health kix waits for. Times are printed from process start.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig")
	concurrency := flag.Int("concurrency", 32, "applies in flight")
	manager := flag.String("field-manager", "ssa-loop", "field manager")
	wait := flag.Bool("wait", false, "after applying, wait until the Deployments are available")
	waitOnly := flag.Bool("wait-only", false, "apply nothing; wait until the Deployments matching --selector are available")
	selector := flag.String("selector", "", "label selector of the Deployments to wait for")
	timeout := flag.Duration("timeout", 30*time.Minute, "how long --wait waits")
	flag.Parse()
	start := time.Now()

	var objs []*unstructured.Unstructured
	if !*waitOnly {
		var err error
		if objs, err = readAll(flag.Args()); err != nil {
			fail(err)
		}
	}
	// Namespaces first (the objects in them need them), then everything else.
	var first, rest []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			first = append(first, o)
		} else {
			rest = append(rest, o)
		}
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	// No client-side throttling: the apiserver's own limits are the limit.
	cfg.QPS = -1
	cfg.Burst = 0
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		fail(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		fail(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))

	if *waitOnly {
		waitDeployments(dyn, *selector, nil, start, *timeout)
		return
	}
	var failed atomic.Int64
	apply := func(batch []*unstructured.Unstructured) {
		work := make(chan *unstructured.Unstructured)
		var wg sync.WaitGroup
		for i := 0; i < *concurrency; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for o := range work {
					if err := applyOne(dyn, mapper, o, *manager); err != nil {
						failed.Add(1)
						fmt.Fprintf(os.Stderr, "%s %s/%s: %v\n", o.GetKind(), o.GetNamespace(), o.GetName(), err)
					}
				}
			}()
		}
		for _, o := range batch {
			work <- o
		}
		close(work)
		wg.Wait()
	}
	apply(first)
	apply(rest)
	fmt.Printf("applied %d objects in %.3fs (%d failed)\n", len(objs), time.Since(start).Seconds(), failed.Load())
	if failed.Load() > 0 {
		os.Exit(1)
	}
	if *wait {
		var names map[string]bool
		if *selector == "" {
			names = map[string]bool{}
			for _, o := range rest {
				if o.GetKind() == "Deployment" {
					names[o.GetNamespace()+"/"+o.GetName()] = true
				}
			}
		}
		waitDeployments(dyn, *selector, names, start, *timeout)
	}
}

// waitDeployments polls until every Deployment matching selector (and in
// names, when given) is rolled out and available.
func waitDeployments(dyn dynamic.Interface, selector string, names map[string]bool, start time.Time, timeout time.Duration) {
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	deadline := time.Now().Add(timeout)
	for {
		list, err := dyn.Resource(gvr).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err == nil {
			pending := 0
			for _, d := range list.Items {
				if names != nil && !names[d.GetNamespace()+"/"+d.GetName()] {
					continue
				}
				if !available(&d) {
					pending++
				}
			}
			if pending == 0 {
				fmt.Printf("ready in %.3fs\n", time.Since(start).Seconds())
				return
			}
		}
		if time.Now().After(deadline) {
			fail(fmt.Errorf("deployments not available after %s", timeout))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// available: the rollout of the current generation finished and every
// replica is available (what `kubectl rollout status` checks).
func available(d *unstructured.Unstructured) bool {
	gen := d.GetGeneration()
	observed, _, _ := unstructured.NestedInt64(d.Object, "status", "observedGeneration")
	replicas, found, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
	if !found {
		replicas = 1
	}
	updated, _, _ := unstructured.NestedInt64(d.Object, "status", "updatedReplicas")
	avail, _, _ := unstructured.NestedInt64(d.Object, "status", "availableReplicas")
	total, _, _ := unstructured.NestedInt64(d.Object, "status", "replicas")
	return observed >= gen && updated == replicas && avail == replicas && total == replicas
}

func applyOne(dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, o *unstructured.Unstructured, manager string) error {
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	body, err := o.MarshalJSON()
	if err != nil {
		return err
	}
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == "namespace" {
		ns := o.GetNamespace()
		if ns == "" {
			ns = "default"
		}
		ri = dyn.Resource(m.Resource).Namespace(ns)
	}
	force := true
	_, err = ri.Patch(context.Background(), o.GetName(), types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: manager, Force: &force})
	return err
}

func readAll(paths []string) ([]*unstructured.Unstructured, error) {
	var files []string
	for _, p := range paths {
		err := filepath.Walk(p, func(path string, info os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			if !info.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(files)
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, doc := range bytes.Split(data, []byte("\n---")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var m map[string]interface{}
			if err := yaml.Unmarshal(doc, &m); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if m == nil {
				continue
			}
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ssa-loop:", err)
	os.Exit(1)
}

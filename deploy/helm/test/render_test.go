// Package helmtest renders the runner chart with helm and decodes every
// manifest strictly into the Kubernetes API types (k8s.io/api): an
// unknown or misplaced field, a wrong type or an unknown kind fails. It
// is a module of its own so the runner's go.mod stays free of the
// Kubernetes libraries. RUNNER_TEST_HELM names the helm binary
// (.ci/container.sh sets it); without it the tests skip.
package helmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// serviceMonitor is the part of the Prometheus operator's ServiceMonitor
// the chart writes (its types live outside k8s.io/api).
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector  struct{ MatchLabels map[string]string } `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

func newObject(kind string) (any, error) {
	switch kind {
	case "Deployment":
		return &appsv1.Deployment{}, nil
	case "StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "Service":
		return &corev1.Service{}, nil
	case "Secret":
		return &corev1.Secret{}, nil
	case "ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, nil
	case "PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "Role":
		return &rbacv1.Role{}, nil
	case "RoleBinding":
		return &rbacv1.RoleBinding{}, nil
	case "ServiceMonitor":
		return &serviceMonitor{}, nil
	}
	return nil, fmt.Errorf("unexpected kind %q", kind)
}

// render runs helm template on the chart with the values files and
// returns the decoded objects by kind.
func render(t *testing.T, values ...string) map[string][]any {
	t.Helper()
	helm := os.Getenv("RUNNER_TEST_HELM")
	if helm == "" {
		t.Skip("RUNNER_TEST_HELM is not set; .ci/container.sh sets it")
	}
	args := []string{"template", "rel", "../runner", "--namespace", "agents"}
	for _, v := range values {
		if strings.Contains(v, "=") {
			args = append(args, "--set", v) // a value, not a file
		} else {
			args = append(args, "-f", v)
		}
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(helm, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	objs := map[string][]any{}
	for _, doc := range strings.Split(out.String(), "\n---") {
		if strings.TrimSpace(strings.ReplaceAll(doc, "---", "")) == "" {
			continue
		}
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		if string(js) == "null" {
			continue
		}
		var head struct{ Kind, APIVersion string }
		if err := json.Unmarshal(js, &head); err != nil {
			t.Fatal(err)
		}
		obj, err := newObject(head.Kind)
		if err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(obj); err != nil {
			t.Fatalf("%s does not decode strictly into the API type: %v\n%s", head.Kind, err, doc)
		}
		objs[head.Kind] = append(objs[head.Kind], obj)
	}
	return objs
}

func podSpec(t *testing.T, objs map[string][]any) (corev1.PodSpec, string) {
	t.Helper()
	if d := objs["Deployment"]; len(d) == 1 {
		return d[0].(*appsv1.Deployment).Spec.Template.Spec, "Deployment"
	}
	if s := objs["StatefulSet"]; len(s) == 1 {
		return s[0].(*appsv1.StatefulSet).Spec.Template.Spec, "StatefulSet"
	}
	t.Fatalf("want exactly one Deployment or StatefulSet, got %d and %d", len(objs["Deployment"]), len(objs["StatefulSet"]))
	return corev1.PodSpec{}, ""
}

func config(objs map[string][]any) map[string]string {
	return objs["ConfigMap"][0].(*corev1.ConfigMap).Data
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func TestDefaultValues(t *testing.T) {
	objs := render(t)
	spec, kind := podSpec(t, objs)
	if kind != "StatefulSet" {
		t.Errorf("local sandboxes keep state: want a StatefulSet, got %s", kind)
	}
	c := spec.Containers[0]
	if c.ReadinessProbe.HTTPGet.Path != "/ready" || c.LivenessProbe.HTTPGet.Path != "/health" {
		t.Errorf("probes: readiness %s liveness %s", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	sc := c.SecurityContext
	if sc.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined || *sc.ProcMount != corev1.UnmaskedProcMount || *sc.Privileged || *sc.AllowPrivilegeEscalation {
		t.Errorf("security context %+v", sc)
	}
	if spec.HostUsers == nil || *spec.HostUsers {
		t.Error("procMount Unmasked needs hostUsers: false")
	}
	// A default turn (network on) needs /dev/net/tun in the pod.
	tun := false
	for _, v := range spec.Volumes {
		tun = tun || v.HostPath != nil && v.HostPath.Path == "/dev/net/tun"
	}
	if !tun {
		t.Error("the default render gives the pod no /dev/net/tun: every default turn would be refused")
	}
	if cfg := config(objs); cfg["AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS"] != "local" || cfg["AGENTA_RUNNER_METRICS_ADDR"] != "0.0.0.0:9464" {
		t.Errorf("config %v", cfg)
	}
	if tok := objs["Secret"][0].(*corev1.Secret).StringData["token"]; len(tok) < 32 {
		t.Errorf("no generated token: %q", tok)
	}
	if len(objs["PodDisruptionBudget"]) != 1 || len(objs["Service"]) != 2 {
		t.Errorf("PDB %d, Services %d", len(objs["PodDisruptionBudget"]), len(objs["Service"]))
	}
}

// TestAgentaChartValues: a values file in the shape of Agenta's chart
// works unchanged.
func TestAgentaChartValues(t *testing.T) {
	objs := render(t, "agenta-chart-values.yaml")
	spec, _ := podSpec(t, objs)
	c := spec.Containers[0]
	cfg := config(objs)
	want := map[string]string{
		"AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS": "local,daytona", "AGENTA_RUNNER_DEFAULT_SANDBOX_PROVIDER": "daytona",
		"AGENTA_RUNNER_DAYTONA_TARGET": "eu", "AGENTA_RUNNER_DAYTONA_SNAPSHOT": "agenta-agent-sandbox-v1",
		"AGENTA_RUNNER_DAYTONA_AUTOSTOP_MINUTES": "15", "AGENTA_RUNNER_DAYTONA_AUTODELETE_MINUTES": "30",
		"AGENTA_RUNNER_DAYTONA_OPAQUE_SECRETS": "off", "AGENTA_RUNNER_LOG_LEVEL": "debug", "AGENTA_RUNNER_SESSION_POOL_MAX": "4",
	}
	for k, v := range want {
		if cfg[k] != v {
			t.Errorf("%s = %q, want %q", k, cfg[k], v)
		}
	}
	for name, ref := range map[string][2]string{
		"AGENTA_RUNNER_TOKEN":           {"agenta-runner", "token"},
		"AGENTA_RUNNER_DAYTONA_API_KEY": {"agenta-runner-daytona", "api-key"},
		"AGENTA_RUNNER_DATABASE_URL":    {"agenta-runner-db", "url"},
	} {
		e := envVar(c, name)
		if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != ref[0] || e.ValueFrom.SecretKeyRef.Key != ref[1] {
			t.Errorf("%s: %+v, want the secret %s/%s", name, e, ref[0], ref[1])
		}
	}
	if e := envVar(c, "AGENTA_RUNNER_REPLICA_ID"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("several replicas need one id each: %+v", e)
	}
	if _, ok := objs["Secret"][0].(*corev1.Secret).StringData["token"]; ok {
		t.Error("the chart's Secret holds a token although auth.tokenSecretRef names the operator's")
	}
	if len(spec.Tolerations) != 1 || spec.NodeSelector["kubernetes.io/os"] != "linux" || c.Resources.Limits.Memory().String() != "8Gi" {
		t.Errorf("scheduling values lost: %+v %+v %+v", spec.Tolerations, spec.NodeSelector, c.Resources)
	}
}

// TestAgentaDocsValues: a values file in the shape of Agenta's Daytona
// documentation works unchanged.
func TestAgentaDocsValues(t *testing.T) {
	objs := render(t, "agenta-docs-values.yaml")
	spec, kind := podSpec(t, objs)
	if kind != "StatefulSet" {
		t.Errorf("Daytona only, but SQLite on the pod's volume: want a StatefulSet, got %s", kind)
	}
	cfg := config(objs)
	want := map[string]string{
		"AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS": "daytona", "AGENTA_RUNNER_DEFAULT_SANDBOX_PROVIDER": "daytona",
		"AGENTA_RUNNER_DAYTONA_TARGET": "us", "AGENTA_RUNNER_DAYTONA_AUTOSTOP_MINUTES": "20", "AGENTA_RUNNER_DAYTONA_AUTODELETE_MINUTES": "60",
		"AGENTA_RUNNER_DAYTONA_SESSION_IDLE_TTL_MS": "120000", "AGENTA_RUNNER_DAYTONA_SESSION_MAX_WARM": "10",
	}
	for k, v := range want {
		if cfg[k] != v {
			t.Errorf("%s = %q, want %q", k, cfg[k], v)
		}
	}
	sec := objs["Secret"][0].(*corev1.Secret).StringData
	if sec["daytona-api-key"] != "dtn_example_key" {
		t.Errorf("secret %v", sec)
	}
	if e := envVar(spec.Containers[0], "AGENTA_RUNNER_DAYTONA_API_KEY"); e == nil || e.ValueFrom.SecretKeyRef.Key != "daytona-api-key" {
		t.Errorf("daytona key env %+v", e)
	}
	if _, ok := cfg["AGENTA_RUNNER_DAYTONA_API_KEY"]; ok {
		t.Error("the Daytona key is in the ConfigMap")
	}
	if len(objs["ServiceMonitor"]) != 1 {
		t.Error("no ServiceMonitor")
	}
}

// TestRolloutNeverSharesAReplicaID: no shape of the chart runs two pods
// with one replica id: a fixed id only where Recreate stops the old pod
// first, the pod's name otherwise; one volume (SQLite or local sandboxes)
// is never rolled with a surge pod.
func TestRolloutNeverSharesAReplicaID(t *testing.T) {
	for _, values := range [][]string{
		nil,
		{"agenta-docs-values.yaml"},
		{"agenta-docs-values.yaml", "agentRunner.workload=Deployment"},
		{"agentRunner.workload=Deployment"},
		{"agenta-docs-values.yaml", "agentRunner.databaseUrl=postgres://db/runner"},
		{"agenta-chart-values.yaml"},
	} {
		t.Run(strings.Join(values, ","), func(t *testing.T) {
			objs := render(t, values...)
			spec, kind := podSpec(t, objs)
			id := envVar(spec.Containers[0], "AGENTA_RUNNER_REPLICA_ID")
			if id == nil {
				t.Fatal("no AGENTA_RUNNER_REPLICA_ID")
			}
			fixed := id.ValueFrom == nil
			sqlite := envVar(spec.Containers[0], "AGENTA_RUNNER_DATABASE_URL") == nil
			if kind != "Deployment" {
				if fixed {
					t.Errorf("a %s with a fixed replica id %q: take the pod's stable name", kind, id.Value)
				}
				return
			}
			st := objs["Deployment"][0].(*appsv1.Deployment).Spec.Strategy
			if fixed && st.Type != appsv1.RecreateDeploymentStrategyType {
				t.Errorf("fixed replica id %q with a %s rollout: two pods hold one id", id.Value, st.Type)
			}
			if sqlite && st.Type != appsv1.RecreateDeploymentStrategyType {
				t.Errorf("SQLite on one volume rolled %s: two runners on one database", st.Type)
			}
		})
	}
}

// TestKubernetesProvider: with sandboxes as pods the runner pod is
// unprivileged, runs as its own ServiceAccount, and a Role in the sandbox
// namespace grants exactly the provider's verbs; nothing is cluster-wide.
func TestKubernetesProvider(t *testing.T) {
	objs := render(t, "agentRunner.provider=kubernetes", "agentRunner.kubernetes.image=runner:1",
		"agentRunner.kubernetes.namespace=sandboxes", "agentRunner.kubernetes.runtimeClassName=gvisor",
		"agentRunner.kubernetes.resources.limits.memory=2Gi")
	spec, _ := podSpec(t, objs)
	c := spec.Containers[0]
	if sc := c.SecurityContext; sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || sc.ProcMount != nil || *sc.Privileged || *sc.AllowPrivilegeEscalation {
		t.Errorf("the runner pod is not unprivileged: %+v", sc)
	}
	if spec.HostUsers != nil {
		t.Error("hostUsers is set although no local sandbox runs in the pod")
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("a hostPath volume (%s) without local sandboxes", v.HostPath.Path)
		}
	}
	if len(objs["ServiceAccount"]) != 1 || spec.ServiceAccountName != objs["ServiceAccount"][0].(*corev1.ServiceAccount).Name || !*spec.AutomountServiceAccountToken {
		t.Errorf("the runner does not run as the chart's ServiceAccount: %q", spec.ServiceAccountName)
	}
	cfg := config(objs)
	for k, v := range map[string]string{
		"AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS": "kubernetes", "AGENTA_RUNNER_DEFAULT_SANDBOX_PROVIDER": "kubernetes",
		"AGENTA_RUNNER_KUBERNETES_NAMESPACE": "sandboxes", "AGENTA_RUNNER_KUBERNETES_IMAGE": "runner:1",
		"AGENTA_RUNNER_KUBERNETES_RUNTIME_CLASS": "gvisor", "AGENTA_RUNNER_KUBERNETES_RESOURCES": `{"limits":{"memory":"2Gi"}}`,
	} {
		if cfg[k] != v {
			t.Errorf("%s = %q, want %q", k, cfg[k], v)
		}
	}
	if len(objs["Role"]) != 1 || len(objs["RoleBinding"]) != 1 {
		t.Fatalf("want one Role and one RoleBinding, got %d and %d", len(objs["Role"]), len(objs["RoleBinding"]))
	}
	role := objs["Role"][0].(*rbacv1.Role)
	if role.Namespace != "sandboxes" {
		t.Errorf("the Role is in %q, not the sandbox namespace", role.Namespace)
	}
	got := map[string]string{}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			got[res] = strings.Join(r.Verbs, ",")
		}
	}
	want := map[string]string{"pods": "create,get,list,watch,delete", "pods/portforward": "create", "networkpolicies": "create,get,update,delete"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Role grants %s: %q, want %q", k, got[k], v)
		}
	}
	rb := objs["RoleBinding"][0].(*rbacv1.RoleBinding)
	if rb.Namespace != "sandboxes" || rb.Subjects[0].Namespace != "agents" || rb.RoleRef.Name != role.Name {
		t.Errorf("RoleBinding %+v", rb)
	}
	// The default render makes no account and no Role, and mounts no token.
	def := render(t)
	if len(def["Role"]) != 0 || len(def["ServiceAccount"]) != 0 {
		t.Error("the default render (local sandboxes) makes RBAC objects")
	}
	if ds, _ := podSpec(t, def); ds.AutomountServiceAccountToken == nil || *ds.AutomountServiceAccountToken {
		t.Error("the default render mounts a service account token the runner does not use")
	}
}

// TestSeveralReplicas: replicas: 3 on PostgreSQL behind the plain
// Service works as it renders: a StatefulSet whose pods advertise their
// stable names under the headless Service, the only names dialled as
// peers; a Deployment advertises pod IPs, in the operator's peer CIDRs.
func TestSeveralReplicas(t *testing.T) {
	objs := render(t, "agentRunner.replicas=3", "agentRunner.databaseUrl=postgres://db/runner")
	spec, kind := podSpec(t, objs)
	if kind != "StatefulSet" {
		t.Fatalf("PostgreSQL and 3 replicas: want a StatefulSet (stable names to forward to), got %s", kind)
	}
	sts := objs["StatefulSet"][0].(*appsv1.StatefulSet)
	if *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %d", *sts.Spec.Replicas)
	}
	headless := false
	for _, o := range objs["Service"] {
		svc := o.(*corev1.Service)
		headless = headless || svc.Name == sts.Spec.ServiceName && svc.Spec.ClusterIP == "None" && svc.Spec.PublishNotReadyAddresses
	}
	if !headless {
		t.Errorf("no headless Service %q publishing not-ready (draining) pods", sts.Spec.ServiceName)
	}
	c := spec.Containers[0]
	domain := sts.Spec.ServiceName + ".agents.svc"
	order := map[string]int{}
	for i, e := range c.Env {
		order[e.Name] = i
	}
	if e := envVar(c, "AGENTA_RUNNER_ADVERTISE_URL"); e == nil || e.Value != "http://$(AGENTA_RUNNER_REPLICA_ID)."+domain+":8765" {
		t.Errorf("AGENTA_RUNNER_ADVERTISE_URL %+v, want the pod's name under %s", e, domain)
	} else if order["AGENTA_RUNNER_REPLICA_ID"] > order["AGENTA_RUNNER_ADVERTISE_URL"] {
		t.Error("AGENTA_RUNNER_ADVERTISE_URL refers to AGENTA_RUNNER_REPLICA_ID, which comes after it: Kubernetes leaves it unexpanded")
	}
	if e := envVar(c, "AGENTA_RUNNER_PEER_CIDRS"); e == nil || e.Value != "."+domain {
		t.Errorf("AGENTA_RUNNER_PEER_CIDRS %+v, want the headless Service's domain only", e)
	}

	objs = render(t, "agentRunner.replicas=3", "agentRunner.databaseUrl=postgres://db/runner", "agentRunner.workload=Deployment",
		"agentRunner.peers.cidrs=10.42.0.0/16", "agentRunner.peers.tokenSecretRef.name=peer")
	spec, _ = podSpec(t, objs)
	c = spec.Containers[0]
	if e := envVar(c, "AGENTA_RUNNER_ADVERTISE_URL"); e == nil || e.Value != "http://$(POD_IP):8765" {
		t.Errorf("a Deployment's AGENTA_RUNNER_ADVERTISE_URL %+v", e)
	}
	if e := envVar(c, "AGENTA_RUNNER_PEER_CIDRS"); e == nil || e.Value != "10.42.0.0/16" {
		t.Errorf("a Deployment's AGENTA_RUNNER_PEER_CIDRS %+v", e)
	}
	if e := envVar(c, "AGENTA_RUNNER_PEER_TOKEN"); e == nil || e.ValueFrom.SecretKeyRef.Name != "peer" || e.ValueFrom.SecretKeyRef.Key != "token" {
		t.Errorf("AGENTA_RUNNER_PEER_TOKEN %+v", e)
	}
	// One replica on SQLite forwards nowhere.
	spec, _ = podSpec(t, render(t))
	if e := envVar(spec.Containers[0], "AGENTA_RUNNER_ADVERTISE_URL"); e != nil {
		t.Errorf("SQLite advertises %+v", e)
	}
}

// TestRefusals: values that cannot work fail the render, naming the value.
func TestRefusals(t *testing.T) {
	helm := os.Getenv("RUNNER_TEST_HELM")
	if helm == "" {
		t.Skip("RUNNER_TEST_HELM is not set; .ci/container.sh sets it")
	}
	for set, want := range map[string]string{
		"agentRunner.replicas=3":                      "agentRunner.databaseUrl",
		"agentRunner.provider=daytona":                "agentRunner.daytona.apiKey",
		"agentRunner.provider=kubernetes":             "agentRunner.kubernetes.image",
		"agentRunner.workload=ReplicaSet":             "agentRunner.workload",
		"agentRunner.providers.default=e2b":           "not among the enabled providers",
		"agentRunner.localSandbox.tun.hostPath=false": "agentRunner.localSandbox.tun.hostPath",
		"agentRunner.replicas=3,agentRunner.databaseUrl=postgres://db/r,agentRunner.workload=Deployment": "agentRunner.peers.cidrs",
	} {
		out, err := exec.Command(helm, "template", "rel", "../runner", "--set", set).CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("--set %s: %v, want an error naming %s:\n%s", set, err, want, out)
		}
	}
}

// TestKubernetesParking: a storage class turns parking on, and only then
// does the Role grant persistentvolumeclaims.
func TestKubernetesParking(t *testing.T) {
	base := []string{"agentRunner.provider=kubernetes", "agentRunner.kubernetes.image=runner:1"}
	grants := func(objs map[string][]any) string {
		for _, r := range objs["Role"][0].(*rbacv1.Role).Rules {
			for _, res := range r.Resources {
				if res == "persistentvolumeclaims" {
					return strings.Join(r.Verbs, ",")
				}
			}
		}
		return ""
	}
	if g := grants(render(t, base...)); g != "" {
		t.Errorf("without a storage class the Role grants persistentvolumeclaims %q", g)
	}
	objs := render(t, append(base, "agentRunner.kubernetes.storageClass=fast", "agentRunner.kubernetes.volumeSize=8Gi")...)
	if g := grants(objs); g != "create,get,list,delete" {
		t.Errorf("with a storage class the Role grants persistentvolumeclaims %q, want create,get,list,delete", g)
	}
	cfg := config(objs)
	if cfg["AGENTA_RUNNER_KUBERNETES_STORAGE_CLASS"] != "fast" || cfg["AGENTA_RUNNER_KUBERNETES_VOLUME_SIZE"] != "8Gi" {
		t.Errorf("parking settings: %q, %q", cfg["AGENTA_RUNNER_KUBERNETES_STORAGE_CLASS"], cfg["AGENTA_RUNNER_KUBERNETES_VOLUME_SIZE"])
	}
}

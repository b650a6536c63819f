package metrics_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/process"
)

// configEnvVars returns the environment variables the processes read for
// their configuration: every name process.LoadConfig asks its getenv for.
func configEnvVars(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	record := func(name string) string {
		out[name] = true
		return ""
	}
	_, _, _ = process.LoadConfig("api", nil, record)
	for _, want := range []string{"DATABASE_URL", "REDIS_URL", "AMQP_URL", "API_ADDR", "METRICS_ADDR", "ADMIN_TOKEN",
		"HOOKLINE_CONFIG", "ALLOW_PRIVATE_NETWORKS", "API_MIGRATE_ON_START"} {
		require.True(t, out[want], "LoadConfig reads %s", want)
	}
	return out
}

// binaries are the commands the image holds, by path.
func binaries(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, name := range []string{"api", "worker", "dlq"} {
		_, err := os.Stat(filepath.Join(root, "cmd", name, "main.go"))
		require.NoError(t, err)
		out["/usr/local/bin/"+name] = true
	}
	return out
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err, addr)
	return p
}

// testKey is a valid SECRET_KEYS value, for configurations whose real
// one is a placeholder.
const testKey = "test:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

// loadConfig loads a configuration file the way the processes do, with
// the given environment.
func loadConfig(t *testing.T, path string, env map[string]string) config.Config {
	t.Helper()
	cfg, err := config.Load(path, func(k string) string { return env[k] })
	require.NoError(t, err, path)
	return cfg
}

// The image is multi-stage, runs as non-root, holds the three binaries and
// a configuration that loads, and exposes the ports that configuration
// listens on.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	require.NoError(t, err)
	df := string(raw)
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)(?:\s+AS\s+(\S+))?`).FindAllStringSubmatch(
		strings.ReplaceAll(df, "--platform=$BUILDPLATFORM ", ""), -1)
	require.GreaterOrEqual(t, len(froms), 2, "multi-stage")
	final := df[strings.LastIndex(df, "\nFROM "):]
	user := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindStringSubmatch(final)
	require.NotNil(t, user, "the final stage sets USER")
	require.NotContains(t, []string{"root", "0", "0:0", "root:root"}, user[1])
	for _, cmd := range []string{"./cmd/api", "./cmd/worker", "./cmd/dlq"} {
		require.Contains(t, df, cmd)
	}
	require.Contains(t, df, "/out/api /out/worker /out/dlq /usr/local/bin/")
	cp := regexp.MustCompile(`(?m)^COPY\s+(config/\S+)\s+(\S+)`).FindStringSubmatch(final)
	require.NotNil(t, cp, "the image holds a configuration file")
	require.Regexp(t, `(?m)^ENV HOOKLINE_CONFIG=`+regexp.QuoteMeta(cp[2])+`$`, final)
	cfg := loadConfig(t, filepath.Join(root, cp[1]), map[string]string{"ADMIN_TOKEN": "a-token-of-enough-length", "SECRET_KEYS": testKey})
	expose := regexp.MustCompile(`(?m)^EXPOSE\s+(.+)$`).FindStringSubmatch(final)
	require.NotNil(t, expose)
	ports := strings.Fields(expose[1])
	require.Contains(t, ports, port(t, cfg.API.Addr))
	require.Contains(t, ports, port(t, cfg.MetricsAddr))
}

// docker-compose.yml runs every part with images, commands, env vars,
// ports and files that exist, in a valid start order; Prometheus scrapes
// the ports the processes listen on.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	docs := readYAML(t, filepath.Join(root, "docker-compose.yml"))
	require.Len(t, docs, 1)
	services, _ := docs[0]["services"].(map[string]any)
	var names []string
	for n := range services {
		names = append(names, n)
	}
	slices.Sort(names)
	require.Equal(t, []string{"api", "dlq", "grafana", "jaeger", "migrate", "postgres", "prometheus", "rabbitmq", "redis", "worker"}, names)
	envs, bins := configEnvVars(t), binaries(t)
	listen := map[string]string{}
	for _, name := range []string{"migrate", "api", "worker", "dlq"} {
		svc := services[name]
		require.Equal(t, "hookline:local", dig(svc, "image"), name)
		require.Equal(t, ".", dig(svc, "build"), name)
		require.True(t, bins[str(list(dig(svc, "command"))[0])], "%s runs a binary of the image", name)
		env, _ := dig(svc, "environment").(map[string]any)
		require.NotEmpty(t, env, name)
		for k := range env {
			require.True(t, envs[k], "%s sets %s, which no process reads", name, k)
		}
		penv := composeEnv(env)
		require.Empty(t, penv["SECRET_KEYS"], "compose has no default secret key")
		penv["SECRET_KEYS"] = testKey
		require.Empty(t, penv["ADMIN_TOKEN"], "compose has no default admin token")
		penv["ADMIN_TOKEN"] = "a-token-of-enough-length"
		cfg := loadConfig(t, "", penv)
		require.True(t, cfg.Tracing.Enabled, "%s exports traces", name)
		require.Equal(t, "http://jaeger:4318/v1/traces", cfg.Tracing.ExportURL(), "%s exports to Jaeger's OTLP/HTTP port", name)
		listen[name] = cfg.API.Addr
		if name != "api" {
			listen[name] = cfg.MetricsAddr
		}
	}
	require.Contains(t, list(dig(services, "api", "ports")), port(t, listen["api"])+":"+port(t, listen["api"]))
	for _, name := range []string{"worker", "dlq"} {
		require.Nil(t, dig(services, name, "ports"), "%s publishes no host port, so that it scales", name)
		require.Contains(t, list(dig(services, name, "expose")), port(t, listen[name]))
	}
	for name, svc := range services {
		deps, _ := dig(svc, "depends_on").(map[string]any)
		for dep, cond := range deps {
			require.Contains(t, services, dep, "%s depends on %s", name, dep)
			switch dig(cond, "condition") {
			case "service_healthy":
				require.NotNil(t, dig(services, dep, "healthcheck"), "%s waits for %s to be healthy", name, dep)
			case "service_completed_successfully":
				require.Equal(t, "migrate", dep)
			}
		}
		if image := str(dig(svc, "image")); image != "hookline:local" {
			require.Regexp(t, `^[a-z0-9./-]+:v?[0-9][0-9A-Za-z.-]*$`, image, "%s pins a version", name)
		}
		for _, v := range list(dig(svc, "volumes")) {
			src := strings.Split(str(v), ":")[0]
			if strings.HasPrefix(src, "./") {
				_, err := os.Stat(filepath.Join(root, src))
				require.NoError(t, err, "%s mounts %s", name, src)
			} else {
				require.Contains(t, docs[0]["volumes"], src, "%s uses a declared volume", name)
			}
		}
	}
	require.Contains(t, list(dig(services, "jaeger", "expose")), "4318", "Jaeger receives OTLP/HTTP")
	require.Equal(t, "true", str(dig(services, "jaeger", "environment", "COLLECTOR_OTLP_ENABLED")))
	jaeger := readYAML(t, filepath.Join(root, "deploy/grafana/provisioning/datasources/jaeger.yml"))[0]
	ds := list(jaeger["datasources"])
	require.Len(t, ds, 1)
	require.Equal(t, "jaeger", str(dig(ds[0], "type")))
	require.Equal(t, "http://jaeger:16686", str(dig(ds[0], "url")), "Grafana reads Jaeger's query port")
	require.Contains(t, list(dig(services, "jaeger", "ports")), "127.0.0.1:16686:16686", "the Jaeger UI, on this host only")

	home := str(dig(services, "grafana", "environment", "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"))
	_, err := os.Stat(filepath.Join(root, "deploy/grafana/dashboards", filepath.Base(home)))
	require.NoError(t, err, "Grafana's home dashboard exists")

	prom := readYAML(t, filepath.Join(root, "deploy/prometheus/prometheus.yml"))[0]
	targets := map[string]string{}
	for _, job := range list(prom["scrape_configs"]) {
		name := str(dig(job, "job_name"))
		for _, sc := range list(dig(job, "static_configs")) {
			for _, tg := range list(dig(sc, "targets")) {
				targets[name] = str(tg)
			}
		}
		for _, sd := range list(dig(job, "dns_sd_configs")) {
			targets[name] = fmt.Sprintf("%s:%d", str(list(dig(sd, "names"))[0]), dig(sd, "port"))
		}
	}
	for _, name := range []string{"api", "worker", "dlq"} {
		require.Equal(t, name+":"+port(t, listen[name]), targets[name], "Prometheus scrapes %s where it listens", name)
	}
}

// composeEnv resolves a compose environment into the environment a
// process sees when no variable is set: ${VAR:-default} is the default,
// ${VAR:?message} (required) is empty.
func composeEnv(env map[string]any) map[string]string {
	def := regexp.MustCompile(`\$\{[A-Z_]+:-([^}]*)\}`)
	required := regexp.MustCompile(`\$\{[A-Z_]+:\?[^}]*\}`)
	out := map[string]string{}
	for k, v := range env {
		out[k] = required.ReplaceAllString(def.ReplaceAllString(fmt.Sprint(v), "$1"), "")
	}
	return out
}

// The Kubernetes manifests: every resource of the kustomization parses;
// every Deployment runs a binary of the image with env vars the processes
// read, from keys the Secret template has, probes /readyz and /healthz on
// the port the process listens on, and has resource requests and limits;
// the ConfigMap is a configuration that loads; the Service, PDBs and HPA
// select what exists.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(root, "deploy/k8s")
	kust := readYAML(t, filepath.Join(dir, "kustomization.yaml"))[0]
	objects := map[string]map[string]any{} // kind/name
	for _, f := range list(kust["resources"]) {
		for _, doc := range readYAML(t, filepath.Join(dir, str(f))) {
			key := str(doc["kind"]) + "/" + str(dig(doc, "metadata", "name"))
			require.NotContains(t, objects, key)
			objects[key] = doc
		}
	}
	secret := readYAML(t, filepath.Join(dir, "secret.example.yaml"))[0]
	require.Equal(t, "hookline", dig(secret, "metadata", "name"))
	secretKeys, _ := secret["stringData"].(map[string]any)
	env := composeEnv(secretKeys)
	env["ADMIN_TOKEN"] = "a-token-of-enough-length"
	env["SECRET_KEYS"] = testKey
	cm := objects["ConfigMap/hookline-config"]
	require.NotNil(t, cm)
	cfgFile := filepath.Join(t.TempDir(), "hookline.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(str(dig(cm, "data", "hookline.yaml"))), 0o600))
	cfg := loadConfig(t, cfgFile, env)

	envs, bins := configEnvVars(t), binaries(t)
	deployments := 0
	for key, obj := range objects {
		if !strings.HasPrefix(key, "Deployment/") {
			continue
		}
		deployments++
		checkDeployment(t, key, obj, cfg, envs, bins, secretKeys, objects)
	}
	require.Equal(t, 3, deployments)
	for key, obj := range objects {
		switch {
		case strings.HasPrefix(key, "PodDisruptionBudget/"), strings.HasPrefix(key, "Service/"):
			sel, _ := dig(obj, "spec", "selector", "matchLabels").(map[string]any)
			if sel == nil {
				sel, _ = dig(obj, "spec", "selector").(map[string]any)
			}
			require.NotEmpty(t, sel, key)
			require.NotEmpty(t, selected(objects, sel), "%s selects a Deployment's pods", key)
		case strings.HasPrefix(key, "HorizontalPodAutoscaler/"):
			require.Contains(t, objects, "Deployment/"+str(dig(obj, "spec", "scaleTargetRef", "name")), key)
		}
	}
	svc := objects["Service/hookline-api"]
	for _, p := range list(dig(svc, "spec", "ports")) {
		require.Contains(t, containerPorts(objects["Deployment/hookline-api"]), str(dig(p, "targetPort")))
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
		require.NoError(t, err, "kubectl kustomize:\n%s", out)
	}
}

func checkDeployment(t *testing.T, key string, obj map[string]any, cfg config.Config, envs, bins map[string]bool,
	secretKeys map[string]any, objects map[string]map[string]any) {
	t.Helper()
	pod := dig(obj, "spec", "template")
	labels, _ := dig(pod, "metadata", "labels").(map[string]any)
	for k, v := range dig(obj, "spec", "selector", "matchLabels").(map[string]any) {
		require.Equal(t, v, labels[k], "%s: the selector matches the pod template", key)
	}
	grace, _ := dig(pod, "spec", "terminationGracePeriodSeconds").(int)
	require.Greater(t, time.Duration(grace)*time.Second, cfg.ShutdownGrace.D(), "%s outlives shutdown_grace", key)
	for _, v := range list(dig(pod, "spec", "volumes")) {
		if name := str(dig(v, "configMap", "name")); name != "" {
			require.Contains(t, objects, "ConfigMap/"+name, key)
		}
	}
	containers := list(dig(pod, "spec", "containers"))
	require.Len(t, containers, 1, key)
	c := containers[0]
	require.Equal(t, "hookline:local", dig(c, "image"), key)
	command := list(dig(c, "command"))
	require.True(t, bins[str(command[0])], "%s runs a binary of the image", key)
	addr := cfg.MetricsAddr
	for _, e := range list(dig(c, "env")) {
		name := str(dig(e, "name"))
		require.True(t, envs[name], "%s sets %s, which no process reads", key, name)
		if ref := dig(e, "valueFrom", "secretKeyRef"); ref != nil {
			require.Equal(t, "hookline", dig(ref, "name"), key)
			require.Contains(t, secretKeys, str(dig(ref, "key")), "%s: the Secret template has %s", key, dig(ref, "key"))
		}
		if name == "API_ADDR" || name == "METRICS_ADDR" {
			addr = str(dig(e, "value"))
		}
	}
	if str(command[0]) == "/usr/local/bin/api" && addr == cfg.MetricsAddr {
		addr = cfg.API.Addr
	}
	ports := containerPorts(obj)
	listenPort := port(t, addr)
	require.Contains(t, ports, listenPort, "%s declares the port it listens on", key)
	require.Equal(t, listenPort, dig(pod, "metadata", "annotations", "prometheus.io/port"), "%s is scraped there", key)
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz", "startupProbe": "/healthz"} {
		require.Equal(t, path, dig(c, probe, "httpGet", "path"), "%s %s", key, probe)
		require.Equal(t, listenPort, ports[str(dig(c, probe, "httpGet", "port"))], "%s %s probes the listening port", key, probe)
	}
	for _, kind := range []string{"requests", "limits"} {
		for _, res := range []string{"cpu", "memory"} {
			require.NotNil(t, dig(c, "resources", kind, res), "%s has a %s %s", key, res, kind)
		}
	}
}

// containerPorts maps the names and numbers of a Deployment's container
// ports to their numbers.
func containerPorts(obj map[string]any) map[string]string {
	out := map[string]string{}
	for _, c := range list(dig(obj, "spec", "template", "spec", "containers")) {
		for _, p := range list(dig(c, "ports")) {
			n := fmt.Sprint(dig(p, "containerPort"))
			out[n] = n
			out[str(dig(p, "name"))] = n
		}
	}
	return out
}

// selected returns the Deployments whose pods carry every label of sel.
func selected(objects map[string]map[string]any, sel map[string]any) []string {
	var out []string
	for key, obj := range objects {
		if !strings.HasPrefix(key, "Deployment/") {
			continue
		}
		labels, _ := dig(obj, "spec", "template", "metadata", "labels").(map[string]any)
		match := true
		for k, v := range sel {
			match = match && labels[k] == v
		}
		if match {
			out = append(out, key)
		}
	}
	return out
}

{{/* Names. */}}
{{- define "runner.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "runner.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: runner
{{- end -}}

{{- define "runner.labels" -}}
{{ include "runner.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The image: agentRunner.image as {repository, tag} or a plain string. */}}
{{- define "runner.image" -}}
{{- $img := .Values.agentRunner.image -}}
{{- if kindIs "string" $img -}}
{{- $img -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{- define "runner.pullPolicy" -}}
{{- $img := .Values.agentRunner.image -}}
{{- if kindIs "map" $img }}{{ default "IfNotPresent" $img.pullPolicy }}{{ else }}{{ default "IfNotPresent" .Values.agentRunner.imagePullPolicy }}{{ end -}}
{{- end -}}

{{/* Enabled providers, comma-joined: providers.enabled, else from the
     documentation shape's provider, else local. */}}
{{- define "runner.providers" -}}
{{- $r := .Values.agentRunner -}}
{{- $p := default dict $r.providers -}}
{{- if $p.enabled -}}
{{- join "," $p.enabled -}}
{{- else if has (default "" $r.provider) (list "daytona" "kubernetes") -}}
{{ $r.provider }}
{{- else -}}
local
{{- end -}}
{{- end -}}

{{- define "runner.defaultProvider" -}}
{{- $r := .Values.agentRunner -}}
{{- $p := default dict $r.providers -}}
{{- default (default (first (splitList "," (include "runner.providers" .))) $r.provider) $p.default -}}
{{- end -}}

{{- define "runner.local" -}}
{{- if has "local" (splitList "," (include "runner.providers" .)) }}true{{ end -}}
{{- end -}}

{{- define "runner.kubernetesOn" -}}
{{- if has "kubernetes" (splitList "," (include "runner.providers" .)) }}true{{ end -}}
{{- end -}}

{{/* The namespace sandbox pods go to: agentRunner.kubernetes.namespace,
     else the release's. */}}
{{- define "runner.sandboxNamespace" -}}
{{- default .Release.Namespace (default dict .Values.agentRunner.kubernetes).namespace -}}
{{- end -}}

{{- define "runner.daytonaOn" -}}
{{- if has "daytona" (splitList "," (include "runner.providers" .)) }}true{{ end -}}
{{- end -}}

{{/* Daytona settings: the documentation shape (agentRunner.daytona),
     overridden by the chart shape (agentRunner.providers.daytona). */}}
{{- define "runner.daytona" -}}
{{- $r := .Values.agentRunner -}}
{{- $doc := default dict $r.daytona -}}
{{- $chart := default dict (default dict $r.providers).daytona -}}
{{- $d := dict -}}
{{- range $k, $v := $doc }}{{ if not (kindIs "invalid" $v) }}{{ $_ := set $d $k $v }}{{ end }}{{ end -}}
{{- if and (hasKey $doc "autostopDelay") (ne (toString $doc.autostopDelay) "") }}{{ $_ := set $d "autostopMinutes" $doc.autostopDelay }}{{ end -}}
{{- if and (hasKey $doc "autodeleteDelay") (ne (toString $doc.autodeleteDelay) "") }}{{ $_ := set $d "autodeleteMinutes" $doc.autodeleteDelay }}{{ end -}}
{{- range $k, $v := $chart }}{{ if not (kindIs "invalid" $v) }}{{ $_ := set $d $k $v }}{{ end }}{{ end -}}
{{- toYaml $d -}}
{{- end -}}

{{/* Non-empty when the store is SQLite on the pod's volume (no PostgreSQL). */}}
{{- define "runner.sqlite" -}}
{{- $r := .Values.agentRunner -}}
{{- if not (or $r.databaseUrl (default dict $r.databaseUrlSecretRef).name) }}true{{ end -}}
{{- end -}}

{{- define "runner.workload" -}}
{{- $r := .Values.agentRunner -}}
{{- $w := default "auto" $r.workload -}}
{{- if eq $w "auto" -}}
{{- if or (not (include "runner.sqlite" .)) (and (or (include "runner.local" .) (include "runner.sqlite" .)) $r.persistence.enabled) }}StatefulSet{{ else }}Deployment{{ end -}}
{{- else if or (eq $w "Deployment") (eq $w "StatefulSet") -}}
{{- $w -}}
{{- else -}}
{{- fail (printf "agentRunner.workload is %q; use auto, Deployment or StatefulSet" $w) -}}
{{- end -}}
{{- end -}}

{{/* The token Secret reference: auth.tokenSecretRef, else the chart's Secret. */}}
{{- define "runner.tokenRef" -}}
{{- $ref := default dict (default dict .Values.agentRunner.auth).tokenSecretRef -}}
{{- if $ref.name -}}
name: {{ $ref.name | quote }}
key: {{ default "token" $ref.key | quote }}
{{- else -}}
name: {{ include "runner.fullname" . | quote }}
key: token
{{- end -}}
{{- end -}}

{{/* The token: agentRunner.token, agenta.runnerToken, the one already in
     the release's Secret, or a new random one (read it from the Secret). */}}
{{- define "runner.token" -}}
{{- $given := default (default "" (default dict .Values.agenta).runnerToken) .Values.agentRunner.token -}}
{{- if $given -}}
{{- $given -}}
{{- else -}}
{{- $old := lookup "v1" "Secret" .Release.Namespace (include "runner.fullname" .) -}}
{{- if and $old $old.data $old.data.token -}}
{{- b64dec $old.data.token -}}
{{- else -}}
{{- randAlphaNum 48 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Refuse values that cannot work, naming what to change. */}}
{{- define "runner.validate" -}}
{{- $r := .Values.agentRunner -}}
{{- if and (gt (int $r.replicas) 1) (not $r.databaseUrl) (not (default dict $r.databaseUrlSecretRef).name) -}}
{{- fail "agentRunner.replicas > 1 needs a shared PostgreSQL: set agentRunner.databaseUrl or agentRunner.databaseUrlSecretRef (SQLite on one pod's volume cannot be shared)" -}}
{{- end -}}
{{- if and (gt (int $r.replicas) 1) (eq (include "runner.workload" .) "Deployment") (not (default dict $r.peers).cidrs) -}}
{{- fail "agentRunner.replicas > 1 as a Deployment advertises pod IPs to the other replicas: set agentRunner.peers.cidrs to the cluster's pod range, or use workload StatefulSet (the default with PostgreSQL), whose pods are reached by name" -}}
{{- end -}}
{{- $tun := default dict $r.localSandbox.tun -}}
{{- if and (include "runner.local" .) (not $tun.hostPath) (not (default dict $tun.resource).name) (ne (toString (default dict $r.env).AGENTA_RUNNER_LOCAL_NETWORK) "host") -}}
{{- fail "the local provider's default network mode (on) needs /dev/net/tun in the pod: set agentRunner.localSandbox.tun.hostPath: true (the node's device) or agentRunner.localSandbox.tun.resource (a device plugin's, e.g. {name: squat.ai/tun}); or disable the local provider" -}}
{{- end -}}
{{- if and (include "runner.kubernetesOn" .) (not (default dict $r.kubernetes).image) -}}
{{- fail "the kubernetes provider is enabled but has no sandbox image: set agentRunner.kubernetes.image (an image with the runner binary and the harnesses, e.g. this chart's runner image)" -}}
{{- end -}}
{{- $d := include "runner.daytona" . | fromYaml -}}
{{- if and (include "runner.daytonaOn" .) (not $d.apiKey) (not (default dict $d.apiKeySecretRef).name) -}}
{{- fail "the daytona provider is enabled but has no API key: set agentRunner.daytona.apiKey or agentRunner.providers.daytona.apiKeySecretRef {name, key}" -}}
{{- end -}}
{{- $def := include "runner.defaultProvider" . -}}
{{- if not (has $def (splitList "," (include "runner.providers" .))) -}}
{{- fail (printf "the default provider %q is not among the enabled providers %q" $def (include "runner.providers" .)) -}}
{{- end -}}
{{- end -}}

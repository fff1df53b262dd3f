{{/* Chart name (nameOverride replaces it in names and the app.kubernetes.io/name label). */}}
{{- define "proxy-pool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-scoped base name of every object: fullnameOverride, else <release>-<name>
(the release name alone when it contains the name). At most 38 characters so the
longest Service name (<base>-controller-control-plane) fits in 63; a longer one is cut
to 31 and given 6 characters of its hash, so two long release names in one namespace
still differ. */}}
{{- define "proxy-pool.fullname" -}}
{{- $full := "" -}}
{{- if .Values.fullnameOverride -}}
{{- $full = .Values.fullnameOverride -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- $full = .Release.Name -}}
{{- else -}}
{{- $full = printf "%s-%s" .Release.Name $name -}}
{{- end -}}
{{- end -}}
{{- if gt (len $full) 38 -}}
{{- printf "%s-%s" ($full | trunc 31 | trimSuffix "-") ($full | sha256sum | trunc 6) -}}
{{- else -}}
{{- $full | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Common labels; call with (dict "ctx" $ "component" "operator"). */}}
{{- define "proxy-pool.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "proxy-pool.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: proxy-pool
proxypool.io/component: {{ .component }}
{{- end -}}

{{/* Selector labels; call with (dict "ctx" $ "component" "operator"). */}}
{{- define "proxy-pool.selectorLabels" -}}
app.kubernetes.io/name: {{ include "proxy-pool.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
proxypool.io/component: {{ .component }}
{{- end -}}

{{/* Image reference; call with (dict "ctx" $ "image" .Values.operator.image). */}}
{{- define "proxy-pool.image" -}}
{{- $tag := .image.tag | default .ctx.Values.image.tag | default .ctx.Chart.AppVersion -}}
{{- printf "%s/%s:%s" .ctx.Values.image.registry .image.repository $tag -}}
{{- end -}}

{{- define "proxy-pool.pullPolicy" -}}
{{- .image.pullPolicy | default .ctx.Values.image.pullPolicy -}}
{{- end -}}

{{- define "proxy-pool.operator" -}}{{ include "proxy-pool.fullname" . }}-operator{{- end -}}
{{- define "proxy-pool.controller" -}}{{ include "proxy-pool.fullname" . }}-controller{{- end -}}
{{- define "proxy-pool.checker" -}}{{ include "proxy-pool.fullname" . }}-checker{{- end -}}
{{- define "proxy-pool.gateway" -}}{{ include "proxy-pool.fullname" . }}-gateway{{- end -}}
{{/* The operator's identity CA Secret and the trust-bundle ConfigMap it publishes
(the operator's --identity-ca-secret / --trust-bundle-config-map): per release, so two
releases in one namespace keep separate CAs. */}}
{{- define "proxy-pool.identityCaSecret" -}}{{ include "proxy-pool.fullname" . }}-identity-ca{{- end -}}
{{- define "proxy-pool.trustBundle" -}}{{ include "proxy-pool.fullname" . }}-trust-bundle{{- end -}}

{{/* Controller replicas: the value, or 3 on Redis and 1 on memory. */}}
{{- define "proxy-pool.controllerReplicas" -}}
{{- $v := .Values -}}
{{- if kindIs "invalid" $v.controller.replicas -}}
{{- if eq $v.store.backend "redis" -}}3{{- else -}}1{{- end -}}
{{- else -}}
{{- int $v.controller.replicas -}}
{{- end -}}
{{- end -}}

{{/* "true" when the controller replicas elect their leader on a Kubernetes Lease and
the leader labels its pod (store.backend=redis, controller.leaderElection=kubernetes). */}}
{{- define "proxy-pool.kubernetesLeader" -}}
{{- if eq .Values.store.backend "redis" -}}
{{- if eq .Values.controller.leaderElection "kubernetes" -}}true
{{- else if ne .Values.controller.leaderElection "redis" -}}
{{- fail "controller.leaderElection must be kubernetes or redis" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The controller's base config: everything not derived from custom resources. */}}
{{- define "proxy-pool.baseConfig" -}}
{{- $v := .Values -}}
{{- $store := dict "backend" $v.store.backend -}}
{{- if eq $v.store.backend "redis" -}}
{{- $redis := dict "commandTimeout" $v.redis.commandTimeout -}}
{{- if $v.redis.sentinel.masterName -}}
{{- $_ := set $redis "sentinel" (dict "masterName" $v.redis.sentinel.masterName "addresses" $v.redis.sentinel.addresses) -}}
{{- else -}}
{{- $_ := set $redis "address" (required "redis.address or redis.sentinel.masterName is required with store.backend=redis" $v.redis.address) -}}
{{- end -}}
{{- if $v.redis.username -}}{{- $_ := set $redis "username" $v.redis.username -}}{{- end -}}
{{- if $v.redis.passwordSecret.name -}}{{- $_ := set $redis "passwordFile" "/etc/proxy-pool-redis/password" -}}{{- end -}}
{{- $_ := set $store "redis" $redis -}}
{{- end -}}
{{- $base := dict
  "store" $store
  "egress" (include "proxy-pool.egress" . | fromYaml)
  "distribution" (dict "listen" (printf "0.0.0.0:%d" (int $v.controller.distributionPort)))
  "admin" (dict "listen" (printf "0.0.0.0:%d" (int $v.controller.adminPort)))
  "controlPlane" (merge (dict "enabled" true "listen" (printf "0.0.0.0:%d" (int $v.controller.controlPlanePort))) (deepCopy $v.controller.controlPlane))
  "analytics" (dict "enabled" $v.postgresql.enabled)
  "leadership" (dict "replicas" (int (include "proxy-pool.controllerReplicas" .)))
-}}
{{- if include "proxy-pool.kubernetesLeader" . -}}
{{- $_ := set $base.leadership "backend" "kubernetes" -}}
{{- $_ := set $base.leadership "kubernetes" (dict "leaseName" (include "proxy-pool.controller" .) "labelPod" true) -}}
{{- end -}}
{{- if $v.postgresql.enabled -}}
{{- /* The DSN Secret is mounted into the controller by this chart (controller.yaml). */ -}}
{{- $_ := set $base.analytics "dsnFile" "/etc/proxy-pool-postgres/dsn" -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $base (deepCopy $v.controller.config)) -}}
{{- end -}}

{{/* The egress policy (one for the controller's provider, the checker and the
gateways): the cluster's pod and service ranges and egress.denyCidrs refused on top
of the built-in loopback / link-local / metadata ranges; egress.allowCidrs opted in. */}}
{{- define "proxy-pool.egress" -}}
{{- $v := .Values -}}
denyCidrs: {{ concat $v.cluster.podCidrs $v.cluster.serviceCidrs $v.egress.denyCidrs | uniq | toJson }}
allowCidrs: {{ $v.egress.allowCidrs | toJson }}
{{- end -}}

{{/* The egress policy as the checker's and gateways' environment. */}}
{{- define "proxy-pool.egressEnv" -}}
{{- $e := include "proxy-pool.egress" . | fromYaml -}}
{{- if $e.denyCidrs }}
- name: PROXY_POOL_EGRESS_DENY_CIDRS
  value: {{ join "," $e.denyCidrs | quote }}
{{- end }}
{{- if $e.allowCidrs }}
- name: PROXY_POOL_EGRESS_ALLOW_CIDRS
  value: {{ join "," $e.allowCidrs | quote }}
{{- end }}
{{- end -}}

{{/* Egress of gateways and the checker: DNS, the controller's control plane, the
operator's issuer, and anything outside the cluster ranges (vendor proxies) unless
refused; opted-in ranges too. */}}
{{- define "proxy-pool.workloadEgress" -}}
{{- $v := .Values -}}
- ports: [{port: 53, protocol: UDP}, {port: 53, protocol: TCP}]
- to:
    - podSelector:
        matchLabels:
          {{- include "proxy-pool.selectorLabels" (dict "ctx" . "component" "controller") | nindent 10 }}
  ports: [{port: {{ $v.controller.controlPlanePort }}, protocol: TCP}]
- to:
    - podSelector:
        matchLabels:
          {{- include "proxy-pool.selectorLabels" (dict "ctx" . "component" "operator") | nindent 10 }}
  ports: [{port: {{ $v.operator.identityPort }}, protocol: TCP}]
{{- $except := list "169.254.0.0/16" "127.0.0.0/8" -}}
{{- range concat $v.cluster.podCidrs $v.cluster.serviceCidrs $v.egress.denyCidrs -}}
{{- if not (contains ":" .) -}}{{- $except = append $except . -}}{{- end -}}
{{- end }}
- to:
    - ipBlock:
        cidr: 0.0.0.0/0
        except: {{ $except | uniq | toJson }}
    {{- range $v.egress.allowCidrs }}
    - ipBlock: {cidr: {{ . }}}
    {{- end }}
{{- end -}}

{{/* A map with every value a string (annotations): `--set a.b=2` gives a number. */}}
{{- define "proxy-pool.strings" -}}
{{- $out := dict -}}
{{- range $k, $v := . }}{{ $_ := set $out $k (toString $v) }}{{ end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Pod settings of the operator-made gateway Deployments (the operator's
     --gateway-pod-settings file; operator/src/reconcile/gateway_pod.rs). */}}
{{- define "proxy-pool.gatewayPodSettings" -}}
{{- $g := .Values.gateway -}}
{{- $s := dict
  "imagePullSecrets" .Values.imagePullSecrets
  "podSecurityContext" .Values.podSecurityContext
  "securityContext" .Values.securityContext
  "resources" $g.resources
  "podAnnotations" (include "proxy-pool.strings" $g.podAnnotations | fromYaml)
  "nodeSelector" $g.nodeSelector
  "tolerations" $g.tolerations
  "topologySpreadConstraints" $g.topologySpreadConstraints
  "shutdownDelaySeconds" (int $g.shutdownDelaySeconds)
  "drainGraceSeconds" (int $g.drainGraceSeconds)
  "podDisruptionBudget" $g.podDisruptionBudget
  "logFormat" .Values.logging.format
  "logLevel" ($g.logLevel | default .Values.logging.level)
-}}
{{- with $g.affinity }}{{ $_ := set $s "affinity" . }}{{ end -}}
{{- with $g.priorityClassName }}{{ $_ := set $s "priorityClassName" . }}{{ end -}}
{{- toYaml $s -}}
{{- end -}}


{{/* Labels of a chart-rendered pod: the common labels, then the component's podLabels
(they cannot replace a selector label: the schema refuses those keys).
Call with (dict "ctx" $ "component" "controller" "values" .Values.controller). */}}
{{- define "proxy-pool.podLabels" -}}
{{- $own := include "proxy-pool.labels" (dict "ctx" .ctx "component" .component) | fromYaml -}}
{{- $extra := include "proxy-pool.strings" (.values.podLabels | default dict) | fromYaml -}}
{{- toYaml (mustMergeOverwrite $extra $own) -}}
{{- end -}}

{{/* Environment every chart-rendered container starts with: the log format and level
(logging.*, the component's logLevel), then extraEnv; an extraEnv entry of the same
name replaces the chart's. Call with (dict "ctx" $ "values" .Values.controller "env"
(list ...the container's own entries...)). */}}
{{- define "proxy-pool.env" -}}
{{- $extra := .values.extraEnv | default list -}}
{{- $names := list -}}
{{- range $extra }}{{ $names = append $names .name }}{{ end -}}
{{- $env := list
  (dict "name" "PROXY_POOL_LOG_FORMAT" "value" .ctx.Values.logging.format)
  (dict "name" "RUST_LOG" "value" (.values.logLevel | default .ctx.Values.logging.level))
-}}
{{- $env = concat $env (.env | default list) -}}
{{- $out := list -}}
{{- range $env }}{{ if not (has .name $names) }}{{ $out = append $out . }}{{ end }}{{ end -}}
{{- toYaml (concat $out $extra) -}}
{{- end -}}

{{/* An HTTP probe on a named port with the component's settings (periodSeconds,
timeoutSeconds, failureThreshold, initialDelaySeconds, successThreshold).
Call with (dict "path" "/healthz" "port" "admin" "probe" .Values.controller.livenessProbe). */}}
{{- define "proxy-pool.probe" -}}
{{- toYaml (mustMergeOverwrite (dict "httpGet" (dict "path" .path "port" .port)) (deepCopy (.probe | default dict))) -}}
{{- end -}}

{{/* The controller config the analytics `migrate` hook runs with: the store and
analytics sections of the base config (and shutdown, which analytics is checked
against) - nothing that needs the operator's rendered files. */}}
{{- define "proxy-pool.migrateConfig" -}}
{{- $base := include "proxy-pool.baseConfig" . | fromYaml -}}
{{- toYaml (pick $base "store" "analytics" "shutdown") -}}
{{- end -}}


{{/* What the values cannot say in the schema, with the reason: the memory store lives in
one controller process; analytics counts in the store's Redis. */}}
{{- define "proxy-pool.storeChecks" -}}
{{- if ne .Values.store.backend "redis" -}}
{{- if gt (int (include "proxy-pool.controllerReplicas" .)) 1 -}}
{{- fail "controller.replicas > 1 needs store.backend=redis: the memory store lives inside one controller process" -}}
{{- end -}}
{{- if .Values.postgresql.enabled -}}
{{- fail "postgresql.enabled (usage analytics) needs store.backend=redis: analytics counts usage in the store's Redis before flushing it to PostgreSQL" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpuhub.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuhub.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpuhub.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: gpuhub
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* selectorLabels takes (dict "root" $ "component" "gpu-agent") */}}
{{- define "gpuhub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuhub.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* componentLabels, (dict "root" $ "component" "gpu-agent"): the common labels and the selector labels, each
     key once (both carry the instance; a key twice is invalid YAML that some parsers refuse). */}}
{{- define "gpuhub.componentLabels" -}}
{{ include "gpuhub.labels" .root }}
app.kubernetes.io/name: {{ include "gpuhub.name" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpuhub.image" -}}
{{- printf "%s/%s:%s" .root.Values.image.repository .name (default .root.Chart.AppVersion .root.Values.image.tag) -}}
{{- end -}}

{{- define "gpuhub.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The audience of the token the usage API sends the agents: dedicated, so the token is worthless against the
API server and the API server's credentials are worthless at an agent. */}}
{{- define "gpuhub.agentAudience" -}}
gpuhub-agent
{{- end -}}

{{/* Where the usage API reads that token (a projected serviceAccountToken volume). */}}
{{- define "gpuhub.agentTokenDir" -}}
/var/run/secrets/gpuhub/agent-token
{{- end -}}

{{- define "gpuhub.agentServiceAccount" -}}
{{- printf "%s-agent" (include "gpuhub.fullname" .) -}}
{{- end -}}

{{- define "gpuhub.usageServiceAccount" -}}
{{- printf "%s-usage" (include "gpuhub.fullname" .) -}}
{{- end -}}

{{/* The agent pods' label selector (the DaemonSet's selector), as the usage API's --agent-selector. */}}
{{- define "gpuhub.agentSelector" -}}
{{- $l := include "gpuhub.selectorLabels" (dict "root" . "component" "gpu-agent") | fromYaml -}}
{{- $parts := list -}}
{{- range $k := keys $l | sortAlpha -}}
{{- $parts = append $parts (printf "%s=%s" $k (get $l $k)) -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}

{{/* Namespace of the single-user pods: usage.podNamespace, else the release's. */}}
{{- define "gpuhub.podNamespace" -}}
{{- default .Release.Namespace .Values.usage.podNamespace -}}
{{- end -}}

{{- define "gpuhub.quotaServiceAccount" -}}
{{- printf "%s-quota" (include "gpuhub.fullname" .) -}}
{{- end -}}

{{/* The Hub's public base path without its trailing slash ("" for "/"), for service prefixes. */}}
{{- define "gpuhub.basePath" -}}
{{- trimSuffix "/" .Values.hub.baseURL -}}
{{- end -}}

{{/* The usage API's base URL inside the cluster, with its service prefix (gpu-quota's --usage-url). */}}
{{- define "gpuhub.usageURL" -}}
{{- if .Values.quota.usageURL -}}
{{- .Values.quota.usageURL -}}
{{- else -}}
{{- printf "http://%s.%s:%v%s/services/%s/" (include "gpuhub.usageServiceAccount" .) .Release.Namespace .Values.usage.port (include "gpuhub.basePath" .) .Values.usage.serviceName -}}
{{- end -}}
{{- end -}}

{{/* gpu-quota's base URL inside the cluster, with its service prefix (the usage API's --quota-url). */}}
{{- define "gpuhub.quotaURL" -}}
{{- printf "http://%s.%s:%v%s/services/%s/" (include "gpuhub.quotaServiceAccount" .) .Release.Namespace .Values.quota.port (include "gpuhub.basePath" .) .Values.quota.serviceName -}}
{{- end -}}

{{/* The Lease that keeps gpu-quota's enforcement loop to one replica. */}}
{{- define "gpuhub.usageLease" -}}
{{- printf "%s-usage-ledger" (include "gpuhub.fullname" .) -}}
{{- end -}}

{{- define "gpuhub.quotaLease" -}}
{{- printf "%s-quota" (include "gpuhub.fullname" .) -}}
{{- end -}}

{{- define "gpuhub.profilesServiceAccount" -}}
{{- printf "%s-profiles" (include "gpuhub.fullname" .) -}}
{{- end -}}

{{/* The Lease that keeps gpu-profiles' pending-spawn explainer to one replica. */}}
{{- define "gpuhub.profilesLease" -}}
{{- printf "%s-profiles" (include "gpuhub.fullname" .) -}}
{{- end -}}

{{- define "gpuhub.cullerServiceAccount" -}}
{{- printf "%s-culler" (include "gpuhub.fullname" .) -}}
{{- end -}}

{{/* The Lease that keeps gpu-culler's passes to one replica. */}}
{{- define "gpuhub.cullerLease" -}}
{{- printf "%s-culler" (include "gpuhub.fullname" .) -}}
{{- end -}}

{{/* The ConfigMap where gpu-culler keeps each user's last stop (the "why" on the Hub home page and the panel).
gpu-culler creates it, not the chart, so an upgrade never empties it (nor could helm adopt it from an existing
install). It is owned by gpu-culler's Deployment (--owner-deployment): helm uninstall deletes the Deployment and
the garbage collector the ConfigMap with it; an upgrade keeps the Deployment, so it keeps the ConfigMap. */}}
{{- define "gpuhub.cullerStops" -}}
{{- printf "%s-culler-stops" (include "gpuhub.fullname" .) -}}
{{- end -}}

{{/* The usage API's reader services (--reader-services, every user's GPU-hours and telemetry): gpu-quota
(GPU-hours) and gpu-culler (every GPU server's telemetry), those the chart runs. Not gpu-profiles: it reads each
user's right-size advice only, as an advice reader (--advice-readers, templates/usage.yaml). */}}
{{- define "gpuhub.usageReaders" -}}
{{- $r := list -}}
{{- if .Values.quota.enabled }}{{ $r = append $r .Values.quota.serviceName }}{{ end -}}
{{- if .Values.culler.enabled }}{{ $r = append $r .Values.culler.serviceName }}{{ end -}}
{{- join "," $r -}}
{{- end -}}

{{/* gpu-culler's base URL inside the cluster, with its service prefix (the usage API's --culler-url: the admin view's
decisions). */}}
{{- define "gpuhub.cullerURL" -}}
{{- printf "http://%s.%s:%v%s/services/%s/" (include "gpuhub.cullerServiceAccount" .) .Release.Namespace .Values.culler.port (include "gpuhub.basePath" .) .Values.culler.serviceName -}}
{{- end -}}

{{/* The usage API's URL for gpu-culler's --usage-url: culler.usageURL, else this release's. */}}
{{- define "gpuhub.cullerUsageURL" -}}
{{- if .Values.culler.usageURL -}}
{{- .Values.culler.usageURL -}}
{{- else -}}
{{- printf "http://%s.%s:%v%s/services/%s/" (include "gpuhub.usageServiceAccount" .) .Release.Namespace .Values.usage.port (include "gpuhub.basePath" .) .Values.usage.serviceName -}}
{{- end -}}
{{- end -}}

{{/* --tolerations for gpu-quota and the usage API: the single-user pods' tolerations are one setting, gpu-profiles'
overrides (profiles.config), so a GPU on a node tainted against those pods is free for none of the services
(admission, the form, right-size advice). Empty when profiles.config sets none (each service's default). */}}
{{- define "gpuhub.tolerationsArg" -}}
{{- $profilesConfig := fromYaml .Values.profiles.config -}}
{{- if hasKey $profilesConfig "tolerations" -}}
- {{ printf "--tolerations=%s" (toJson $profilesConfig.tolerations) | quote }}
{{- end -}}
{{- end -}}

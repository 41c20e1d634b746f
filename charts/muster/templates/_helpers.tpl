{{/*
The labels every object gets, as manifests/kustomization.yaml's `labels:` gives them.
*/}}
{{- define "muster.labels" -}}
app.kubernetes.io/part-of: muster
{{- end }}

{{/*
The objects of one file of the repository's manifests/ (charts/muster/manifests links to it,
so the static objects are written once), each with the chart's labels added and with the
given annotations. Argument: (list $ "scheduler/clusterrole.yaml" (dict ...)), and optionally
a dict of texts to replace in the file, each of which must be there.
*/}}
{{- define "muster.manifest" -}}
{{- $root := index . 0 -}}
{{- $path := printf "manifests/%s" (index . 1) -}}
{{- $annotations := index . 2 -}}
{{- $text := $root.Files.Get $path -}}
{{- if not $text -}}
{{- fail (printf "%s is missing from the chart (charts/muster/manifests is a link to the repository's manifests/; package the chart from a checkout)" $path) -}}
{{- end -}}
{{- if gt (len .) 3 -}}
{{- range $old, $new := index . 3 -}}
{{- if not (contains $old $text) -}}
{{- fail (printf "%s no longer contains %q, which the chart replaces" $path $old) -}}
{{- end -}}
{{- $text = replace $old $new $text -}}
{{- end -}}
{{- end -}}
{{- $labels := include "muster.labels" $root | fromYaml -}}
{{- range $doc := regexSplit "(?m)^---[ \\t]*$" $text -1 }}
{{- $object := fromYaml $doc }}
{{- if hasKey $object "Error" }}
{{- fail (printf "%s: %s" $path $object.Error) }}
{{- end }}
{{- if $object.kind }}
{{- $meta := $object.metadata }}
{{- $_ := set $meta "labels" (merge (dict) $labels ($meta.labels | default dict)) }}
{{- with $annotations }}
{{- $_ := set $meta "annotations" (merge (dict) . ($meta.annotations | default dict)) }}
{{- end }}
---
{{ toYaml $object }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The scheduler's configuration file: scheduler.config, else manifests/scheduler/config.yaml,
with its schedulerName set to scheduler.name. The text is kept as written (comments
included); only the schedulerName line is replaced, or added when there is none.
*/}}
{{- define "muster.schedulerConfig" -}}
{{- $config := .Values.scheduler.config | default (.Files.Get "manifests/scheduler/config.yaml") -}}
{{- $parsed := fromYaml $config -}}
{{- if hasKey $parsed "Error" -}}
{{- fail (printf "scheduler.config is not YAML: %s" $parsed.Error) -}}
{{- end -}}
{{- $name := .Values.scheduler.name -}}
{{- if and $name (ne (toString $parsed.schedulerName) $name) -}}
{{- $line := printf "schedulerName: %s" (toJson $name) -}}
{{- if regexMatch "(?m)^schedulerName:" $config -}}
{{- $config = regexReplaceAllLiteral "(?m)^schedulerName:.*$" $config $line -}}
{{- else -}}
{{- $config = printf "%s\n%s\n" (trimSuffix "\n" $config) $line -}}
{{- end -}}
{{- if ne (toString (fromYaml $config).schedulerName) $name -}}
{{- fail "scheduler.name could not be written into scheduler.config: give its schedulerName a line of its own (schedulerName: NAME)" -}}
{{- end -}}
{{- end -}}
{{- $auth := .Values.metrics.auth.secretName -}}
{{- $ui := .Values.metrics.ui -}}
{{- if or $auth (ne $ui "Protected") -}}
{{- if regexMatch "(?m)^metricsServer:" $config -}}
{{- fail "metrics.auth and metrics.ui write the configuration's metricsServer, which scheduler.config sets too: set it in one place" -}}
{{- end -}}
{{- $block := "metricsServer:\n" -}}
{{- if $auth -}}
{{- $block = printf "%s  bearerTokenFile: %s/%s\n" $block (include "muster.tokenDir" .) .Values.metrics.auth.secretKey -}}
{{- end -}}
{{- $block = printf "%s  ui: %s\n" $block $ui -}}
{{- $config = printf "%s\n%s" (trimSuffix "\n" $config) $block -}}
{{- end -}}
{{- $config -}}
{{- end }}

{{/*
Where the scheduler's pod mounts the Secret of metrics.auth.
*/}}
{{- define "muster.tokenDir" -}}
/etc/muster-metrics
{{- end }}

{{/*
The scheduler's configuration, parsed.
*/}}
{{- define "muster.schedulerConfigValues" -}}
{{- include "muster.schedulerConfig" . | fromYaml | toJson -}}
{{- end }}

{{/*
The ConfigMap holding the configuration, named as kustomize's configMapGenerator names it:
muster-scheduler-config-<hash>, where the hash is kustomize's (the first 10 hex digits of the
SHA-256 of {"data":...,"kind":"ConfigMap","name":""} as JSON, with 0 1 3 a e written g h k m
t). A changed configuration is a new ConfigMap, so the Deployment rolls, as with kustomize.
*/}}
{{- define "muster.configMapName" -}}
{{- $data := dict "config.yaml" (include "muster.schedulerConfig" .) -}}
{{- $hash := dict "data" $data "kind" "ConfigMap" "name" "" | toJson | sha256sum | trunc 10 -}}
{{- printf "muster-scheduler-config-%s" ($hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t") -}}
{{- end }}

{{/*
The image of the scheduler and the agent.
*/}}
{{- define "muster.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) -}}
{{- end }}

{{/*
Whether to render the ServiceMonitor: metrics.serviceMonitor.enabled true, or auto and the
cluster serves monitoring.coreos.com/v1 ServiceMonitor. "true" or "".
*/}}
{{- define "muster.serviceMonitor" -}}
{{- $enabled := toString .Values.metrics.serviceMonitor.enabled -}}
{{- if eq $enabled "true" -}}
true
{{- else if eq $enabled "auto" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" }}true{{ end -}}
{{- else if ne $enabled "false" -}}
{{- fail (printf "metrics.serviceMonitor.enabled is auto, true or false, not %s" $enabled) -}}
{{- end -}}
{{- end }}

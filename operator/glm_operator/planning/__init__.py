"""Pure planning: memory fit, placement, autoscale decisions. No Kubernetes, kopf or HTTP imports."""

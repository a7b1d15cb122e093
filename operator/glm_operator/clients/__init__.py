"""The only code that talks to the Kubernetes apiserver and to Prometheus."""

"""glm-operator: plans and serves GLM-family models with vLLM on Kubernetes GPU clusters."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("glm-operator")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+source"

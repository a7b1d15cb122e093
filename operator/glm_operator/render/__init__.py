"""Rendering of Kubernetes objects from typed contexts with jinja2 templates."""

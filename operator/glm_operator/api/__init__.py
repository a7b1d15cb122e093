"""Pydantic models of the GLMDeployment API: the single source of the CRD schema."""

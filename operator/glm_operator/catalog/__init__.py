"""Data catalogs (models, GPUs) loaded from YAML files shipped in the package."""

"""Thin kopf handlers; all of them call one level-based reconcile()."""

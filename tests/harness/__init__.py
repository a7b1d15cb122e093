"""Test helpers that ship with the package (stand-ins for external services, loopback only)."""

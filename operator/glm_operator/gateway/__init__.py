"""The OpenAI gateway of a namespace: routing table (pure), HAProxy config (pure), sync process (I/O)."""

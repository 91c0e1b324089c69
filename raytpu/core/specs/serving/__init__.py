"""What vLLM and Ray Serve accept, checked offline: serving and batch fields, a team's Serve app, the engine's disk."""

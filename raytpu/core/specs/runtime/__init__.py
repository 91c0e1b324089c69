"""What a run finds on its slice: env and secrets, team code and RAYTPU_*, compile caches, checkpoints, Ray Data."""

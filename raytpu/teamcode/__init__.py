"""A team's code folder (``workloads[].code``): what ships and how (:mod:`raytpu.teamcode.bundle`), and what the kit
checks in it before anything runs (:mod:`raytpu.teamcode.checks`). Standard library only."""

"""What the workload programs import and never run (each program keeps its ``raytpu.workloads.<program>`` path)."""

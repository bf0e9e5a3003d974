"""`relevo demo`: the whole fleet in one process, on simulated providers that misbehave."""

from worker.demo.run import run_demo

__all__ = ["run_demo"]

"""The one reconcile engine every controller uses: a keyed, deduplicating work queue.

Level-based: a key says *what* to look at, never *what happened*. The reconcile function
observes current state, plans with a pure function and applies the plan. Keys are processed
serially per key, by a bounded number of workers, with jittered exponential backoff on errors.
"""

from tether.engine.queue import Engine, Reconcile, RequeueAfter

__all__ = ["Engine", "Reconcile", "RequeueAfter"]

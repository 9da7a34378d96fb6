"""Built-in container programs: stand-ins for common images, bound to the pod's IP."""

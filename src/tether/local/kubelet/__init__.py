"""A kubelet for local clusters: pods become real processes where their image maps to a program.

Images resolve through an image map (built-ins, extended by a user file); a container whose
image maps to nothing runs virtually (Running, no process), as kwok does.
"""

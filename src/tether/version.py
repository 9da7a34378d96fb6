"""tether's version and the container image that carries it.

The image runs the `tether` program (entrypoint `tether`, arguments from the container's
`args`); local clusters run a container of this image as this very install (`python -m tether`).
"""

from __future__ import annotations

from tether import __version__

IMAGE_REPOSITORY = "ghcr.io/tether-dev/tether"
IMAGE = f"{IMAGE_REPOSITORY}:{__version__}"

__all__ = ["IMAGE", "IMAGE_REPOSITORY", "__version__"]

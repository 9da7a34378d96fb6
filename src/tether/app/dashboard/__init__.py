"""The hub's read-only web dashboard (`tether hub run --dashboard-port`).

- `model`: what the page shows, a pure function of the hub's caches (frozen dataclasses).
- `access`: who may look (anyone who may `get clusters` on the hub), the cluster proxy's
  authentication and a SubjectAccessReview.
- `server`: the HTTP side: static assets from `static/` (vanilla JS, no build step, nothing
  from a CDN), `/api/model` and `/api/events` (server-sent events fed by the hub's informers).
"""

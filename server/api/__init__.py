"""HTTP API v1 (DESIGN §4): one router per resource."""

#: Routers carry the whole prefix themselves, so a route's path is its full template (used as a metrics label).
API_PREFIX = "/api/v1"

"""Many streams as a running service: the service and its supervision, the control API and the HTTP
guards, Prometheus metrics, the host paths a stream may touch, logging, and running a config to its end."""

"""The flow network (max-min fair sharing of directed links and compute), the task-graph
engine that plays work on it in SimPy, and the machine of one run (the cluster)."""

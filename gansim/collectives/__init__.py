"""Collective algorithms as schedules of point-to-point steps, their closed forms, and the
cost models (flow, alpha_beta, paper) that play them on a cluster."""

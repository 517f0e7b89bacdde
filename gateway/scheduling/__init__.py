"""Admission to upstream replicas: global capacity caps, priority classes, fair queues across teams."""

"""A toy operator: arrivals counted per tumbling event-time window, emitted after a fixed slack."""

"""θ-joins over windowed datasets of two streams: FastThetaJoin's plan and the brute-force oracle."""

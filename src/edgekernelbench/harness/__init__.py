"""The evaluation harness: judge a candidate on a backend (compile, correctness, timing)."""
